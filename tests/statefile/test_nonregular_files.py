"""An image's files are opened as regular files or refused at once, in one line.

A FIFO named checkpoint.img used to block ``open`` forever; a link to /proc/self/mem
failed every read with EIO and a traceback; a character device never ends.  Each is
refused promptly, by ``open_image`` (as a restore opens it) and by ``inspect``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ckpt import statefile
from ckpt.errors import StatefileError
from tests.statefile.conftest import sample_pages


def fifo(p: Path) -> None:
    os.mkfifo(p)


def symlink_to_a_real_file(p: Path) -> None:
    real = p.parent.parent / f"real-{p.name}"
    os.rename(p, real)
    p.symlink_to(real)


def proc_self_mem(p: Path) -> None:
    p.symlink_to("/proc/self/mem")


def char_device(p: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    os.mknod(p, 0o600 | 0o020000, os.makedev(1, 5))  # as /dev/zero


def directory(p: Path) -> None:
    p.mkdir()


KINDS = [fifo, symlink_to_a_real_file, proc_self_mem, char_device, directory]
FILES = ["checkpoint.img", "pages.img", "pages_meta.img"]


def replace(img: Path, name: str, make: Callable[[Path], None]) -> None:
    p = img / name
    if make is symlink_to_a_real_file:
        make(p)
        return
    p.unlink()
    make(p)


def open_everything(img: Path) -> None:
    """What a restore reads: the statefile, the page map and every page."""
    image = statefile.open_image(img)
    image.read_state()
    image.open_pages(lazy=False).close()


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("make", KINDS, ids=lambda f: f.__name__)
def test_open_refuses_in_one_line(make_image, name: str, make: Callable, watchdog: None) -> None:
    img = make_image("img", b"state" * 100, sample_pages())
    replace(img, name, make)
    with pytest.raises(StatefileError) as err:
        open_everything(img)
    msg = str(err.value)
    assert name in msg and "\n" not in msg
    assert any(word in msg for word in ("link", "FIFO", "device", "directory")), msg


@pytest.mark.parametrize("make", KINDS, ids=lambda f: f.__name__)
def test_inspect_refuses_a_statefile_that_is_not_regular(
    make_image, make: Callable, watchdog: None
) -> None:
    from ckpt.cli import app

    img = make_image("img", b"state" * 100, sample_pages())
    replace(img, "checkpoint.img", make)
    res = CliRunner().invoke(app, ["inspect", "statefile", str(img)])
    assert isinstance(res.exception, StatefileError), res.output
    assert "checkpoint.img" in str(res.exception) and "\n" not in str(res.exception)


def test_a_statefile_that_fails_every_read_is_one_line(watchdog: None) -> None:
    """/proc/self/mem is a regular file whose reads fail (EIO at offset 0)."""
    with pytest.raises(StatefileError, match="cannot read"):
        statefile.inspect_image("/proc/self/mem")


def test_image_directory_that_is_a_symlink_is_refused(make_image, tmp_path: Path) -> None:
    img = make_image("img", b"state", sample_pages())
    link = tmp_path / "link"
    link.symlink_to(img)
    with pytest.raises(StatefileError, match="symbolic link; give the image directory"):
        statefile.open_image(link)


def test_a_fifo_statefile_does_not_hang_the_real_cli(make_image) -> None:
    """Through the real entry point: one line on stderr, exit 1, within the timeout."""
    img = make_image("img", b"state", sample_pages())
    replace(img, "checkpoint.img", fifo)
    res = subprocess.run(
        [sys.executable, "-m", "ckpt", "inspect", "statefile", str(img)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert res.returncode == 1
    assert len(res.stderr.strip().splitlines()) == 1 and "FIFO" in res.stderr, res.stderr
