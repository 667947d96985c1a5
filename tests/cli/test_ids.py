"""Names checked by a pattern are checked whole: ``$`` also matches before a final
newline, so every pattern is applied with ``fullmatch``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt.errors import SandboxError
from ckpt.sandbox.wire.paths import Root, check_id
from ckpt.statefile import ImageWriter


def ckpt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CKPT_TEMPLATE": "0"}
    return subprocess.run(
        [sys.executable, "-m", "ckpt", *args], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.mark.parametrize("bad", ["nl\n", "a\n", "\n", "a\nb", "-a", "a/b", "a" * 65, ""])
def test_a_bad_id_is_refused(bad: str) -> None:
    with pytest.raises(SandboxError, match="invalid sandbox ID"):
        check_id(bad)


def test_good_ids_pass() -> None:
    for good in ("a", "web-1", "A.b_c", "a" * 64):
        assert check_id(good) == good


@pytest.mark.parametrize("verb", [["state"], ["run", "-w", "http"]])
def test_the_cli_refuses_an_id_ending_in_a_newline(tmp_path: Path, verb: list[str]) -> None:
    root = tmp_path / "root"
    root.mkdir()
    out = ckpt("--root", str(root), verb[0], "nl\n", *verb[1:])
    if out.returncode == 0 and verb[0] == "run":  # accepted: stop what it started
        ckpt("--root", str(root), "delete", "nl\n", "--force")
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stderr.splitlines() == [
        "error: invalid sandbox ID 'nl\\n': use 1-64 letters, digits, '_', '.' or '-', "
        "starting with a letter or digit"
    ]
    assert os.listdir(root) == []


def test_a_record_under_a_newline_name_is_not_listed(tmp_path: Path) -> None:
    for name in ("ok", "bad\n"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "state.json").write_text("{}")
    assert Root(tmp_path).ids() == ["ok"]


def test_a_foreign_round_name_is_left_when_an_image_is_replaced(tmp_path: Path) -> None:
    target = tmp_path / "img"
    with ImageWriter(target) as img:
        img.write_pages([])
        assert img.temp_dir is not None
        (img.temp_dir / "rounds" / "r0\n").mkdir(parents=True)
    with ImageWriter(target, force=True) as img:
        img.write_pages([])
    assert any(p.endswith("r0\n") for p in img.left_behind)  # not an image's: left alone
