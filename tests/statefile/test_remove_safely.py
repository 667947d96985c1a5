"""Removing a replaced image or a dead writer's leftover never reaches outside it.

The image's parent may be writable by another local user (``/tmp/web.img``), who can
swap the dot-named directory for a symlink between the rename and the removal.  The
writer must then delete nothing: not through the link, not a foreign file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt import statefile
from ckpt.statefile import image as image_mod
from ckpt.statefile.image import IMAGE_FILES
from tests.statefile.conftest import sample_pages, write_image

OLD = b"the previous image" * 100
NEW = b"the new image" * 100


def victim(tmp_path: Path) -> Path:
    """A directory outside the image holding files named as an image's and others."""
    v = tmp_path / "victim"
    v.mkdir()
    for name in [*sorted(IMAGE_FILES), "passwd"]:
        (v / name).write_text(f"precious {name}")
    return v


def assert_intact(v: Path) -> None:
    for name in [*sorted(IMAGE_FILES), "passwd"]:
        assert (v / name).read_text() == f"precious {name}"


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_aside_image_swapped_for_a_symlink_deletes_nothing_outside(
    make_image, tmp_path: Path, monkeypatch, exchange: bool
) -> None:
    if not exchange:
        monkeypatch.setattr(image_mod, "_exchange", lambda a, b: False)
    target = make_image("img", OLD, sample_pages())
    v = victim(tmp_path)
    real_fsync_dir = image_mod._fsync_dir
    swapped: list[Path] = []

    def race(path: str) -> None:
        """Runs between the rename that puts the old image aside and its removal:
        the attacker moves the aside directory away and plants a link to the victim."""
        real_fsync_dir(path)
        for entry in Path(path).iterdir():
            if entry.name.startswith(".img.") and entry.is_dir() and not entry.is_symlink():
                entry.rename(tmp_path / "moved-away")
                entry.symlink_to(v)
                swapped.append(entry)

    monkeypatch.setattr(image_mod, "_fsync_dir", race)
    with statefile.ImageWriter(target, force=True) as img:
        img.state_file.write(NEW)
        w = img
    assert swapped, "the race hook never ran"
    assert_intact(v)
    assert statefile.open_image(target).read_state() == NEW
    assert swapped[0].is_symlink()  # left in place, not followed
    assert w.left_behind == [str(swapped[0])]


def test_clean_stale_never_follows_a_leftover_that_is_a_symlink(tmp_path: Path) -> None:
    v = victim(tmp_path)
    link = tmp_path / f".img.tmp-{_dead_pid()}-abc"
    link.symlink_to(v)
    assert statefile.clean_stale(tmp_path / "img") == []
    assert_intact(v)
    assert link.is_symlink()


def test_rename_back_never_installs_a_symlink(tmp_path: Path) -> None:
    v = victim(tmp_path)
    link = tmp_path / f".img.old-{_dead_pid()}-abc"
    link.symlink_to(v)
    statefile.clean_stale(tmp_path / "img")
    assert not os.path.lexists(tmp_path / "img")
    assert_intact(v)


def test_a_dead_writers_leftover_keeps_foreign_files(tmp_path: Path) -> None:
    leftover = tmp_path / f".img.tmp-{_dead_pid()}-abc"
    leftover.mkdir()
    (leftover / "checkpoint.img").write_bytes(b"partial")
    (leftover / "notes.txt").write_text("not ours")
    link_to_victim = leftover / "pages.img"
    v = victim(tmp_path)
    link_to_victim.symlink_to(v / "pages.img")  # unlinked as a link, never followed
    assert statefile.clean_stale(tmp_path / "img") == []
    assert sorted(p.name for p in leftover.iterdir()) == ["notes.txt"]
    assert_intact(v)


def test_force_replace_leaves_foreign_files_added_to_the_old_image(
    make_image, tmp_path: Path, monkeypatch
) -> None:
    target = make_image("img", OLD, sample_pages())
    real_fsync_dir = image_mod._fsync_dir

    def plant(path: str) -> None:
        real_fsync_dir(path)
        for entry in Path(path).iterdir():
            if entry.name.startswith(".img."):
                (entry / "planted").write_text("someone else's")

    monkeypatch.setattr(image_mod, "_fsync_dir", plant)
    with statefile.ImageWriter(target, force=True) as img:
        img.state_file.write(NEW)
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith(".img.")]
    assert [p.name for p in aside.iterdir()] == ["planted"]
    assert img.left_behind == [str(aside / "planted")]
    write_image(tmp_path / "other", NEW)  # an unrelated writer: nothing to sweep
    assert statefile.open_image(target).read_state() == NEW


@pytest.mark.parametrize("swap", ["symlink", "foreign-directory"])
def test_a_temporary_directory_swapped_after_mkdir_gets_no_file(
    tmp_path: Path, monkeypatch, swap: str
) -> None:
    """Between the mkdir and the first file, the directory is replaced: by a link to a
    victim (whose checkpoint.img an open-by-path would truncate), or by a directory
    others may write.  The writer refuses, and the victim is untouched."""
    v = victim(tmp_path)
    real_make = image_mod._make_temp_dir

    def make_then_swap(parent: str, prefix: str) -> str:
        path = real_make(parent, prefix)
        os.rename(path, tmp_path / "moved-away")
        if swap == "symlink":
            os.symlink(v, path)
        else:
            os.mkdir(path)
            os.chmod(path, 0o777)
        return path

    monkeypatch.setattr(image_mod, "_make_temp_dir", make_then_swap)
    with pytest.raises(statefile.StatefileError, match="replaced as it was made"):  # noqa: SIM117
        with statefile.ImageWriter(tmp_path / "img") as img:
            img.state_file.write(NEW)
    assert_intact(v)
    assert not (tmp_path / "img").exists()
