"""Where the CLI's side of the sandbox resolves an image: a ``file://`` URL or a path
is one local directory from then on, a store's URL never becomes one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckpt.images import Location
from ckpt.sandbox.client import lifecycle, precopy_options
from ckpt.sandbox.wire.paths import SandboxState


def _state(image: str) -> SandboxState:
    return SandboxState(
        id="sb", pid=0, status="stopped", workload="kv", cgroup=None, created="now",
        extra={"checkpointing_to": image},
    )  # fmt: skip


def _leftover(tmp_path: Path) -> Path:
    dead = tmp_path / ".img.tmp-999999999-abc"  # a writer that died
    dead.mkdir()
    (dead / "checkpoint.img").write_bytes(b"half")
    return dead


@pytest.mark.parametrize("form", ["{tmp}/img", "file://{tmp}/img"])
def test_kill_cleans_a_cut_short_checkpoint(tmp_path: Path, form: str) -> None:
    dead = _leftover(tmp_path)
    where = Location.parse(form.format(tmp=tmp_path))
    lifecycle._clean_checkpoint(_state(str(where)))  # what a checkpoint records
    assert not dead.exists()


def test_a_store_checkpoint_leaves_the_cwd_alone(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    lifecycle._clean_checkpoint(_state("s3://bucket/p/img"))
    assert os.listdir(tmp_path) == []


def test_a_parent_path_travels_as_the_location_it_names(tmp_path: Path) -> None:
    image = Location.parse(f"file://{tmp_path}/c")
    options = precopy_options.cli_options(False, f"file://{tmp_path}/p", False, image)
    assert options == {"parent": str(tmp_path / "p")}
    store = precopy_options.cli_options(False, "s3://b/r/p", False, Location.parse("s3://b/r/c"))
    assert store == {"parent": "s3://b/r/p"}
