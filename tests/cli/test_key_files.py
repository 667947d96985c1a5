"""Key files (``--key-file`` of checkpoint, restore, inspect and migrate): one loader,
one set of rules.  A key file is a private regular file of the caller's, of at least
32 bytes; anything else is refused with one line that says how to fix it, and nothing
planted in its place (a link, a FIFO) is followed or blocks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ckpt import migration, statefile
from ckpt.cli import app
from ckpt.errors import CkptError

SECRET = bytes(range(32))

LOADERS = {
    "image": statefile.read_key_file,
    "migration": migration.read_key_file,
}


@pytest.fixture(params=sorted(LOADERS))
def load(request: pytest.FixtureRequest) -> Callable[[str], bytes]:
    return LOADERS[request.param]


def _key(tmp_path: Path, data: bytes = SECRET, mode: int = 0o600, name: str = "key") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def _refused(load: Callable[[str], bytes], path: Path, match: str) -> str:
    with pytest.raises(CkptError, match=match) as info:
        load(str(path))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_private_key_of_32_bytes_is_read_whole(load, tmp_path: Path) -> None:
    assert load(str(_key(tmp_path, SECRET + b"\n"))) == SECRET + b"\n"


def test_a_symlink_is_refused_not_followed(load, tmp_path: Path) -> None:
    real = _key(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(real)
    _refused(load, link, "symlink")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602])
def test_a_key_others_may_read_or_write_is_refused(load, tmp_path: Path, mode: int) -> None:
    path = _key(tmp_path, mode=mode)
    assert f"chmod 600 {path}" in _refused(load, path, "group or others")


@pytest.mark.parametrize("size", [0, 1, 31])
def test_a_short_key_is_refused(load, tmp_path: Path, size: int) -> None:
    path = _key(tmp_path, SECRET[:size])
    assert "head -c 32 /dev/urandom" in _refused(load, path, "fewer than 32")


def test_an_oversized_key_is_refused(load, tmp_path: Path) -> None:
    _refused(load, _key(tmp_path, bytes(4097)), "larger than 4096")


@pytest.mark.watchdog_s(20)
def test_a_fifo_is_refused_without_blocking(load, tmp_path: Path, watchdog) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    _refused(load, fifo, "not a regular file")


def test_a_directory_or_a_missing_file_is_refused(load, tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir(mode=0o700)
    _refused(load, tmp_path / "dir", "not a regular file")
    _refused(load, tmp_path / "absent", "cannot open")


def test_a_key_of_another_user_is_refused(load, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
    path = _key(tmp_path)
    os.chown(path, 65534, 65534)
    assert f"chown {os.geteuid()} {path}" in _refused(load, path, "belongs to uid 65534")


def test_inspect_refuses_a_loose_key_file_with_one_line(tmp_path: Path) -> None:
    key = _key(tmp_path, mode=0o644)
    res = CliRunner().invoke(app, ["inspect", "statefile", str(tmp_path), "--key-file", str(key)])
    assert res.exit_code == 1
    assert isinstance(res.exception, CkptError) and "chmod 600" in str(res.exception)
