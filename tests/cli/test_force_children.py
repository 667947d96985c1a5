"""``checkpoint --force`` onto an image that another image beside it names as its
parent would break that child silently (found out only at its restore): it is refused
in one line unless ``--force-children`` is given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt.errors import StatefileError
from ckpt.statefile import ImageWriter, chain, open_image
from ckpt.statefile.format import PAGE_SIZE


def _image(path: Path, parent: Path | None = None, **meta) -> Path:
    link = chain.link_metadata(path, open_image(parent)) if parent else {}
    with ImageWriter(path, metadata={"sandbox_id": "sb", **link, **meta}, force=True) as img:
        img.write_pages([(0, bytes([1]) * PAGE_SIZE)])
    return path


def ckpt(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CKPT_TEMPLATE": "0"}
    cmd = [sys.executable, "-m", "ckpt", "--root", str(root), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)


def test_children_are_the_images_beside_that_link_to_it_as_it_is(tmp_path: Path) -> None:
    a = _image(tmp_path / "a")
    b = _image(tmp_path / "b", a)
    c = _image(tmp_path / "c", a)
    _image(tmp_path / "d", b)
    (tmp_path / "link").symlink_to(b)
    (tmp_path / "junk").mkdir()
    assert chain.children(a) == [b, c]
    assert chain.children(b) == [tmp_path / "d"]
    assert chain.children(c) == [] and chain.children(tmp_path / "absent") == []
    _image(a)  # replaced: b and c name the old a, which is gone already
    assert chain.children(a) == []


def test_a_repository_too_large_to_check_is_refused(tmp_path: Path, monkeypatch) -> None:
    a = _image(tmp_path / "a")
    for i in range(5):
        (tmp_path / f"x{i}").mkdir()
    monkeypatch.setattr(chain, "MAX_SIBLINGS", 4)
    with pytest.raises(StatefileError, match="--force-children"):
        chain.children(a)


def test_force_onto_a_parent_is_refused_in_one_line(tmp_path: Path) -> None:
    a = _image(tmp_path / "a")
    b = _image(tmp_path / "b", a)
    before = (a / "checkpoint.img").read_bytes()
    root = tmp_path / "root"
    out = ckpt(root, "checkpoint", "nosuch", "--image-path", str(a), "--force")
    assert out.returncode == 4  # refused as unsafe
    assert out.stderr.splitlines() == [
        f"error: {a} is the parent of the image {b}; replacing it would break that chain: "
        "write to another path, or pass --force-children"
    ]
    assert (a / "checkpoint.img").read_bytes() == before
    forced = ckpt(
        root, "checkpoint", "nosuch", "--image-path", str(a), "--force", "--force-children"
    )
    assert "is the parent" not in forced.stderr and "nosuch" in forced.stderr  # went on
