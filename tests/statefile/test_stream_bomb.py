"""A state stream that declares more than the host could hold is refused before any of
it is read: a few MiB of honest zstd frames can declare hundreds of GiB."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt import statefile
from ckpt.errors import StatefileError
from ckpt.statefile import reader

from .conftest import write_image

STREAM = bytes(range(256)) * 4096  # 1 MiB: compresses well, as a bomb's frames do


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_a_stream_larger_than_the_memory_left_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    target = write_image(tmp_path / "img", STREAM, compression=compression)
    monkeypatch.setattr(reader, "memory_available", lambda: len(STREAM) - 1)
    image = statefile.open_image(target)
    with pytest.raises(StatefileError, match=r"declares 1,048,576 bytes, more than the 1,048,575"):
        image.read_state()
    with pytest.raises(StatefileError, match="this host has available"):
        image.state_reader().read()


def test_a_stream_that_fits_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = write_image(tmp_path / "img", STREAM)
    monkeypatch.setattr(reader, "memory_available", lambda: len(STREAM))
    assert statefile.open_image(target).read_state() == STREAM


def test_memory_available_is_lowered_by_an_address_space_limit() -> None:
    assert (reader.memory_available() or 0) > 0
    code = (
        "import resource; from ckpt.statefile import reader; "
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY)); "
        "print(reader.memory_available())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert int(out.stdout) <= 3 << 30
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY
