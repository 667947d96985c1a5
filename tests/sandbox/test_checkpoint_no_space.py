"""A checkpoint onto a full file system: one clear error naming the image, nothing left
behind, and the sandbox keeps running and serving."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import Cli


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 32 KiB tmpfs: far too small for an http image (about 150 KB)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", str(mnt)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.slow
def test_checkpoint_onto_a_full_disk_is_one_line_and_loses_nothing(cli: Cli, tiny_fs: Path) -> None:
    cli("run", "full", "--workload", "http")
    before = cli.get("full")["requests"]
    image = tiny_fs / "img"
    proc = cli("checkpoint", "full", "--image-path", str(image), check=False)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    assert str(image) in lines[0]
    assert "No space left on device" in lines[0]
    assert "Traceback" not in proc.stderr
    assert list(tiny_fs.iterdir()) == []  # no image, no temporary directory
    assert cli.state("full")["status"] == "running"
    assert cli.get("full")["requests"] == before + 1
