"""How long the sandbox's ticker sleeps between kernel runs (process.ticks_to_sleep):
until the next due event, within [1, TICK_IDLE_MAX] ticks, and never less than
TICK_SLACK ticks once the sandbox is quiet (its timers then fire late, in order)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.sandbox.host import process
from ckpt.sandbox.host.process import TICK_IDLE_MAX, TICK_SLACK, ticks_to_sleep

STEP = int(process.TICK_S * 1e9)


@pytest.mark.parametrize(
    ("due_in", "quiet", "ticks"),
    [
        (None, False, TICK_IDLE_MAX),  # nothing due: the longest sleep
        (None, True, TICK_IDLE_MAX),
        (0, False, 1),  # due now (or a busy task): one tick
        (STEP, False, 1),
        (3 * STEP, False, 3),
        (0, True, TICK_SLACK),  # quiet: at least the slack, even when due now
        (3 * STEP, True, TICK_SLACK),
        (7 * STEP, True, 7),  # slack only ever lengthens a sleep
        (10**12, False, TICK_IDLE_MAX),
    ],
)
def test_ticks_to_sleep(due_in: int | None, quiet: bool, ticks: int) -> None:
    now = 123 * STEP
    assert ticks_to_sleep(now, None if due_in is None else now + due_in, quiet) == ticks


@given(
    now=st.integers(0, 10**15),
    due_in=st.one_of(st.none(), st.integers(-(10**10), 10**12)),
    quiet=st.booleans(),
)
def test_ticks_to_sleep_bounds(now: int, due_in: int | None, quiet: bool) -> None:
    due = None if due_in is None else now + due_in
    ticks = ticks_to_sleep(now, due, quiet)
    assert 1 <= ticks <= TICK_IDLE_MAX
    if quiet:
        assert ticks >= TICK_SLACK
    if due is not None and not quiet and due_in >= STEP:
        assert ticks * STEP <= max(due_in, STEP)  # an attentive sandbox is never late
