"""The sandbox's checkpoint handler, driven in-process (no socket is bound): the kernel
fingerprint goes into the image only when stats were asked for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt import statefile
from ckpt.sandbox.host.process import Host
from ckpt.sandbox.wire.protocol import BootRequest, CheckpointRequest, PauseRequest


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


# CRIU's stats-dump names, in the order a checkpoint reports them (pages_* come from the
# page writer's summary between memwrite_time_ms and pages_written).
DUMP_HEAD = [
    "objects",
    "types",
    "state_bytes",
    "freezing_time_ms",
    "state_dump_time_ms",
    "memdump_memwrite_time_ms",
    "memdump_time_ms",
    "memwrite_time_ms",
]
DUMP_TAIL = ["pages_written", "pages_skipped_parent", "rounds", "commit_time_ms", "frozen_time_ms"]


@pytest.mark.parametrize("stats", [False, True])
def test_checkpoint_counters_keep_their_names_order_and_sums(
    host: Host, tmp_path: Path, stats: bool
) -> None:
    reply = host.checkpoint(
        CheckpointRequest(image=str(tmp_path / "img"), leave_running=True, stats=stats)
    )
    keys = list(reply.counters)
    assert keys[: len(DUMP_HEAD)] == DUMP_HEAD and keys[-len(DUMP_TAIL) :] == DUMP_TAIL
    middle = keys[len(DUMP_HEAD) : -len(DUMP_TAIL)]
    want_middle = [k for k in middle if k != "fingerprint_time_ms"]
    assert want_middle and all(k.startswith("pages_") for k in want_middle)
    assert ("fingerprint_time_ms" in middle) is stats
    c = reply.counters
    assert all(c[k] >= 0 for k in keys if k.endswith("_time_ms"))
    # memdump (reading the pages) and memwrite (writing them) split one timed span
    assert abs(c["memdump_time_ms"] + c["memwrite_time_ms"] - c["memdump_memwrite_time_ms"]) < 0.01
    assert c["pages_written"] == c["pages_stored"] and c["rounds"] == 0
    if stats:  # written into the image before the commit, so without the commit's own
        saved = json.loads((tmp_path / "img" / "stats.json").read_text())["checkpoint"]
        assert set(saved) == set(keys) - {"commit_time_ms", "frozen_time_ms"}
