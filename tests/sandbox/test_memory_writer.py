"""``memory:N@RATE`` in a real sandbox: its writer thread writes while the sandbox
serves, and after a checkpoint and a restore it writes on from where it stopped."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from .conftest import Cli

pytestmark = pytest.mark.slow

SB = f"memw-{os.getpid()}"


def _wait_for_more(cli: Cli, than: int, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = cli.get(SB)
        if body["pages_written"] > than:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"pages_written stayed at {body['pages_written']}")
        time.sleep(0.1)


def test_the_writer_writes_while_serving_and_goes_on_after_a_restore(
    cli: Cli, tmp_path: Path
) -> None:
    cli("run", SB, "--workload", "memory:8@4M", "--port", "0", timeout=120)
    assert cli.state(SB)["workload"] == "memory:8@4M"
    first = _wait_for_more(cli, 0)
    assert first["write_rate"] == 4 << 20 and first["restores"] == 0
    before = _wait_for_more(cli, first["pages_written"])["pages_written"]
    image = tmp_path / "img"
    cli("checkpoint", SB, "--image-path", str(image), timeout=120)
    cli("restore", SB, "--image-path", str(image), timeout=120)
    restored = cli.get(SB)
    assert restored["restores"] == 1 and restored["pages_written"] >= before
    _wait_for_more(cli, restored["pages_written"])
