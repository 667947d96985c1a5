"""``memory:N`` end to end: a background restore answers while its pages still load and
ends with every page right; a page file damaged under it stops the sandbox cleanly."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ckpt.sandbox.host.http import get_json

from .conftest import Cli

pytestmark = pytest.mark.slow

MEM = f"mem-{os.getpid()}"
SLOW_FILL = {"CKPT_FAULT": "pages-fill-delay:2"}  # ~25 runs: ~50 s unless touched


def _get(cli: Cli, path: str) -> dict:
    host, _, port = cli.state(MEM)["address"].rpartition(":")
    status, body = get_json(host, int(port), path, timeout=60)
    assert status == 200
    return body


def _checkpointed(cli: Cli, tmp_path: Path) -> tuple[Path, str]:
    cli("run", MEM, "--workload", "memory:8", "--port", "0", timeout=120)
    digest = _get(cli, "/memory")["memory_sha256"]
    image = tmp_path / "img"
    cli("checkpoint", MEM, "--image-path", str(image), timeout=120)
    return image, digest


def _wait(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_background_restore_serves_while_loading_and_ends_with_every_page_right(
    cli: Cli, tmp_path: Path
) -> None:
    image, digest = _checkpointed(cli, tmp_path)
    cli("restore", MEM, "--image-path", str(image), "--background", env=SLOW_FILL, timeout=120)
    first = _get(cli, "/")
    assert first["pages_loading"] is True  # answered before the page file is all in
    assert first["restores"] == 1
    touched = _get(cli, "/memory")  # touches every page: each is fetched as it is needed
    assert touched["memory_sha256"] == digest
    _wait(lambda: not _get(cli, "/")["pages_loading"], "the background fill to finish")
    assert _get(cli, "/memory")["memory_sha256"] == digest


@pytest.mark.parametrize("damage", ["corrupt", "truncate"])
def test_damaged_page_file_during_background_load_stops_the_sandbox(
    cli: Cli, tmp_path: Path, damage: str
) -> None:
    image, digest = _checkpointed(cli, tmp_path)
    pages = image / "pages.img"
    size = pages.stat().st_size
    if damage == "truncate":
        # pages_meta.img records pages.img's size, so a truncation before the restore is
        # refused up front; truncate while the slow fill runs instead.
        cli("restore", MEM, "--image-path", str(image), "--background", env=SLOW_FILL)
        os.truncate(pages, size - 5000)
    else:
        with open(pages, "r+b") as f:  # same size: only the run's tag can tell
            f.seek(size - 5000)
            b = f.read(1)
            f.seek(size - 5000)
            f.write(bytes([b[0] ^ 0xFF]))
        cli("restore", MEM, "--image-path", str(image), "--background", env=SLOW_FILL)
    try:
        body = _get(cli, "/memory")
    except (OSError, ValueError, IndexError, AssertionError):
        body = None  # the sandbox stopped while answering: no digest at all
    assert body is None or body["memory_sha256"] == digest  # never wrong memory
    _wait(lambda: cli.state(MEM)["status"] == "stopped", "the sandbox to stop")
    log = (cli.root / MEM / "sandbox.log").read_text()
    assert "page file damaged during background load" in log
    assert "stopping the sandbox rather than run with wrong memory" in log
