"""The one-line result of a checkpoint says how long the sandbox was frozen: with
pre-copy or a parent, SuspendTotal counts time the sandbox went on serving."""

from __future__ import annotations

from ckpt.sandbox.wire.timings import CHECKPOINT, SUSPEND_TOTAL, Timings


def test_a_checkpoint_line_leads_with_the_frozen_time() -> None:
    t = Timings(phases_ns={CHECKPOINT: 2_600_000_000, SUSPEND_TOTAL: 2_678_000_000})
    t.counters["frozen_time_ms"] = 11.96
    line = t.summary()
    assert line.startswith("frozen 12.0 ms · "), line
    assert "SuspendTotal 2678.0 ms" in line


def test_a_restore_line_has_no_frozen_time() -> None:
    t = Timings(phases_ns={"Restore": 40_000_000})
    t.counters["sandbox_start"] = "template"
    assert "frozen" not in t.summary()


def test_a_malformed_counter_is_not_shown() -> None:
    t = Timings(phases_ns={CHECKPOINT: 1_000_000})
    t.counters["frozen_time_ms"] = "12"
    assert "frozen" not in t.summary()
