"""The sandbox's checkpoint handler, driven in-process (no socket is bound): the kernel
fingerprint goes into the image only when stats were asked for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt import statefile
from ckpt.sandbox.process import Host
from ckpt.sandbox.protocol import BootRequest, CheckpointRequest, PauseRequest


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    h = Host("unit", str(tmp_path / "ctl.sock"))
    h.boot(BootRequest(workload="empty", options={"rootfs": "minimal"}))
    h.pause(PauseRequest())  # frozen, so the kernel cannot change between two looks
    yield h
    h.server.close()


def test_plain_checkpoint_has_no_fingerprint(host: Host, tmp_path: Path) -> None:
    reply = host.checkpoint(CheckpointRequest(image=str(tmp_path / "img"), leave_running=True))
    meta = statefile.open_image(tmp_path / "img").metadata
    assert meta["workload"] == "empty"
    assert "fingerprint" not in meta
    assert "fingerprint_time_ms" not in reply.counters


def test_stats_checkpoint_records_the_fingerprint(host: Host, tmp_path: Path) -> None:
    want = host.kernel.fingerprint()
    reply = host.checkpoint(
        CheckpointRequest(image=str(tmp_path / "img"), leave_running=True, stats=True)
    )
    assert statefile.open_image(tmp_path / "img").metadata["fingerprint"] == want
    assert reply.counters["fingerprint_time_ms"] >= 0
    saved = json.loads((tmp_path / "img" / "stats.json").read_text())
    assert "fingerprint_time_ms" in saved["checkpoint"]


def test_restored_kernel_matches_the_recorded_fingerprint(host: Host, tmp_path: Path) -> None:
    host.checkpoint(CheckpointRequest(image=str(tmp_path / "img"), leave_running=True, stats=True))
    from ckpt import state

    image = statefile.open_image(tmp_path / "img")
    k = state.load(image.state_reader())
    k.memory_file.restore_pages(image.open_pages(lazy=False))
    assert k.fingerprint() == image.metadata["fingerprint"]
