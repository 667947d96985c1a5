"""The image directory is replaced atomically; crashes leave the old image intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ckpt import statefile
from ckpt.errors import ImageExistsError, StatefileError
from ckpt.statefile import image as image_mod
from tests.statefile.conftest import sample_pages, write_image

OLD = b"the previous image" * 100
NEW = b"the new image" * 100


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_existing_image_is_refused_without_force(make_image, tmp_path: Path) -> None:
    target = make_image("img", OLD, sample_pages())
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.raises(ImageExistsError, match="--force"):
        write_image(target, NEW)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert leftovers(tmp_path) == []


def test_empty_existing_directory_is_used(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    write_image(tmp_path / "img", NEW)
    assert statefile.open_image(tmp_path / "img").read_state() == NEW


def test_target_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "img").write_text("x")
    with pytest.raises(StatefileError, match="not a directory"):
        write_image(tmp_path / "img", NEW)


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_force_replaces_atomically(make_image, tmp_path: Path, monkeypatch, exchange) -> None:
    if not exchange:
        monkeypatch.setattr(image_mod, "_exchange", lambda a, b: False)
    target = make_image("img", OLD, sample_pages())
    (target / "stats.json").write_text("{}")  # an extra file of the old image
    write_image(target, NEW, force=True)
    assert statefile.open_image(target).read_state() == NEW
    assert not (target / "stats.json").exists()
    assert leftovers(tmp_path) == []


def test_exception_mid_write_leaves_old_image(make_image, tmp_path: Path) -> None:
    target = make_image("img", OLD, sample_pages())
    with pytest.raises(RuntimeError, match="boom"):  # noqa: SIM117
        with statefile.ImageWriter(target, force=True) as img:
            img.state_file.write(NEW * 1000)
            img.write_pages(sample_pages())
            assert img.temp_dir is not None and img.temp_dir.exists()
            raise RuntimeError("boom")
    assert statefile.open_image(target).read_state() == OLD
    assert leftovers(tmp_path) == []


def test_failed_first_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):  # noqa: SIM117
        with statefile.ImageWriter(tmp_path / "img") as img:
            img.state_file.write(NEW)
            raise RuntimeError("crash")
    assert list(tmp_path.iterdir()) == []


CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from ckpt import statefile
    target, ready = Path(sys.argv[1]), Path(sys.argv[2])
    with statefile.ImageWriter(target, force=True) as img:
        img.state_file.write(b"half-written" * 200000)
        # Publish by rename so the parent never sees an empty ready file.
        ready.with_suffix(".tmp").write_text(str(img.temp_dir))
        os.replace(ready.with_suffix(".tmp"), ready)
        time.sleep(60)
    """
)


def test_sigkill_mid_write_keeps_old_image(make_image, tmp_path: Path) -> None:
    target = make_image("img", OLD, sample_pages())
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(target), str(ready)], env=env)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), "the writer never got going"
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    temp = Path(ready.read_text())
    assert temp.exists() and temp.parent == tmp_path  # the dead writer's leftover
    assert not (temp / "pages_meta.img").exists()  # it never looked complete
    # The old image is intact and still verifies.
    image = statefile.open_image(target)
    assert image.read_state() == OLD
    assert image.open_pages().read_page(0) == sample_pages()[0][1]
    # The next writer for the same target sweeps the dead writer's leftover.
    write_image(target, NEW, force=True)
    assert not temp.exists()
    assert leftovers(tmp_path) == []
    assert statefile.open_image(target).read_state() == NEW


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_crash_between_renames_is_undone(make_image, tmp_path: Path) -> None:
    target = make_image("img", OLD, sample_pages())
    aside = tmp_path / f".img.old-{_dead_pid()}-abc123"
    os.rename(target, aside)  # as if killed after renaming the old image aside
    assert statefile.clean_stale(target) == []
    assert statefile.open_image(target).read_state() == OLD
    assert leftovers(tmp_path) == []


def test_live_writers_leftovers_are_kept(tmp_path: Path) -> None:
    mine = tmp_path / f".img.tmp-{os.getpid()}-xyz"
    mine.mkdir()
    dead = tmp_path / f".img.tmp-{_dead_pid()}-xyz"
    dead.mkdir()
    other = tmp_path / f".other.tmp-{_dead_pid()}-xyz"
    other.mkdir()
    assert statefile.clean_stale(tmp_path / "img") == [dead]
    assert mine.exists() and other.exists()


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_a_directory_that_is_not_an_image_is_refused_as_such(tmp_path: Path, force: bool) -> None:
    """Never "already holds an image; use --force", which --force then contradicts."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("precious")
    with pytest.raises(StatefileError) as info:
        write_image(home, NEW, force=force)
    assert not isinstance(info.value, ImageExistsError), info.value
    message = str(info.value)
    assert "is not an image directory (it holds notes.txt)" in message, message
    assert "new or empty directory" in message and "already holds" not in message, message
    assert (home / "notes.txt").read_text() == "precious"
    assert leftovers(tmp_path) == []


def test_force_never_replaces_a_foreign_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("precious")
    with pytest.raises(StatefileError, match="not an image directory"):
        write_image(home, NEW, force=True)
    assert (home / "notes.txt").read_text() == "precious"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("dangling", [False, True], ids=["to-an-image", "dangling"])
def test_target_that_is_a_symlink_is_refused(make_image, tmp_path: Path, dangling) -> None:
    real = make_image("real", OLD, sample_pages())
    link = tmp_path / "img"
    link.symlink_to(tmp_path / "gone" if dangling else real)
    with pytest.raises(StatefileError, match="not a directory"):
        write_image(link, NEW, force=True)
    assert link.is_symlink()
    assert statefile.open_image(real).read_state() == OLD
    assert leftovers(tmp_path) == []


def test_dotted_names_sweep_only_their_own_leftovers(tmp_path: Path) -> None:
    dead = _dead_pid()
    own = tmp_path / f".img.v1.tmp-{dead}-xyz"
    shorter = tmp_path / f".img.tmp-{dead}-xyz"  # target "img", not "img.v1"
    longer = tmp_path / f".img.v1.2.tmp-{dead}-xyz"  # target "img.v1.2"
    for d in (own, shorter, longer):
        d.mkdir()
    assert statefile.clean_stale(tmp_path / "img.v1") == [own]
    assert statefile.clean_stale(tmp_path / "img") == [shorter]
    assert longer.exists()


def test_a_replaced_image_that_gained_a_subdirectory_keeps_only_that(tmp_path: Path) -> None:
    """Only an image's own files are removed: a subdirectory is not one of them, so it
    stays and is reported (the parent may be writable by someone else)."""
    old = tmp_path / ".img.tmp-1-xyz"
    (old / "deeper").mkdir(parents=True)
    (old / "checkpoint.img").write_bytes(OLD)
    (old / "deeper" / "file").write_bytes(OLD)
    assert image_mod._remove_image_dir(str(tmp_path), old.name) == [str(old / "deeper")]
    assert [p.name for p in old.iterdir()] == ["deeper"]
    assert (old / "deeper" / "file").read_bytes() == OLD


@pytest.mark.parametrize("how", ["new", "renameat2", "two-renames"])
def test_every_file_is_synced_before_the_image_is_installed_and_the_parent_after(
    make_image, tmp_path: Path, monkeypatch, how: str
) -> None:
    """The durability order a crash relies on: the files and the temporary directory
    reach the disk before the rename that installs them, and the parent directory
    after it (when a replaced image's removal is synced does not matter: a leftover
    is swept)."""
    if how != "new":
        make_image("img", OLD, sample_pages())
    if how == "two-renames":
        monkeypatch.setattr(image_mod, "_exchange", lambda a, b: False)
    target = tmp_path / "img"
    events: list[tuple[str, str]] = []
    real_fsync, real_rename, real_exchange = os.fsync, os.rename, image_mod._exchange

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def rename(src: str, dst: str) -> None:
        events.append(("install" if Path(dst) == target else "rename", str(dst)))
        real_rename(src, dst)

    def exchange(a: str, b: str) -> bool:
        done = real_exchange(a, b)
        if done:
            events.append(("install", str(b)))
        return done

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(image_mod, "_exchange", exchange)
    write_image(target, NEW, force=how != "new")
    assert statefile.open_image(target).read_state() == NEW
    installed = [i for i, (kind, _) in enumerate(events) if kind == "install"]
    assert len(installed) == 1, events
    before, after = events[: installed[0]], events[installed[0] + 1 :]
    synced = {Path(p).name for kind, p in before if kind == "fsync"}
    files = {p.name for p in target.iterdir()}
    assert files <= synced, f"not synced before install: {files - synced}"
    assert any(kind == "fsync" and Path(p).name.startswith(".img.tmp-") for kind, p in before)
    assert ("fsync", str(tmp_path)) in after, events


@pytest.mark.parametrize("failing", ["checkpoint.img", "pages.img", "pages_meta.img", "dir"])
def test_a_failed_sync_of_any_file_leaves_the_old_image(
    make_image, tmp_path: Path, monkeypatch, failing: str
) -> None:
    """The files are synced together, some on the chunk pool's threads: a failure in any
    of them still aborts the image before it is installed."""
    target = make_image("img", OLD, sample_pages())
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        name = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        if name == failing or (failing == "dir" and name.startswith(".img.tmp-")):
            raise OSError(5, "Input/output error (injected)")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="injected"):
        write_image(target, NEW, force=True)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert leftovers(tmp_path) == []


def test_an_image_written_without_sync_reads_back_and_calls_no_fsync(
    make_image, tmp_path: Path, monkeypatch
) -> None:
    """``sync=False`` (a migration's transient images): the same image, installed the
    same way (replacing an old one too), with no fsync of any file or directory."""
    target = make_image("img", OLD, sample_pages())
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    write_image(target, NEW, sample_pages(), force=True, sync=False)
    assert synced == []
    assert statefile.open_image(target).read_state() == NEW
    assert leftovers(tmp_path) == []
