"""The ticker with a kernel that asks for a pace (``Kernel.pace_ns``, as ``memory:N@RATE``
does): it runs the kernel that often, for the real time passed, under the kernel lock,
instead of whole ticks.  Driven in-process on a fake clock: no timing is asserted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt.sandbox.host.pacing import PACE_MIN_NS
from ckpt.sandbox.host.process import TICK_IDLE_MAX, TICK_S, Host

STEP = int(TICK_S * 1e9)
MS = 1_000_000


class Clock:
    """``time.monotonic_ns`` as the test moves it."""

    def __init__(self) -> None:
        self.ns = 10**12

    def __call__(self) -> int:
        return self.ns


class FakeKernel:
    """What the ticker calls; each run takes ``work_ns`` of the fake clock."""

    def __init__(self, host: Host, clock: Clock, pace: int | None, work_ns: int) -> None:
        self.host, self.clock, self.pace, self.work_ns = host, clock, pace, work_ns
        self.runs: list[int] = []
        self.now = 0

    def run_for(self, ns: int) -> None:
        assert self.host.cond._is_owned()  # type: ignore[attr-defined]  # under the lock
        self.runs.append(ns)
        self.now += ns
        self.clock.ns += self.work_ns

    def pace_ns(self) -> int | None:
        return self.pace

    def next_event_ns(self) -> int | None:
        return None


class Waits:
    """Stands in for ``Host.exiting``: records each sleep, moves the clock by it, and
    ends the loop after ``rounds`` sleeps; ``on_wait`` may change the host meanwhile."""

    def __init__(self, clock: Clock, rounds: int, on_wait=None) -> None:
        self.clock, self.rounds, self.on_wait = clock, rounds, on_wait
        self.sleeps: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.sleeps.append(timeout)
        self.clock.ns += round(timeout * 1e9)
        if self.on_wait is not None:
            self.on_wait(len(self.sleeps))
        return len(self.sleeps) > self.rounds

    def set(self) -> None:
        self.rounds = 0


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Host, Clock]]:
    clock = Clock()
    monkeypatch.setattr(time, "monotonic_ns", clock)
    h = Host("unit", str(tmp_path / "ctl.sock"))
    yield h, clock
    h.server.close()


def ticking(h: Host, clock: Clock, pace: int | None, rounds: int, work_ns: int = MS, on_wait=None):
    k = FakeKernel(h, clock, pace, work_ns)
    h.kernel = k
    waits = Waits(clock, rounds, on_wait)
    h.exiting = waits  # type: ignore[assignment]
    start = clock.ns
    h.tick()
    return k, waits, start


def test_a_paced_kernel_runs_at_its_pace_for_the_real_time_passed(host) -> None:
    h, clock = host
    k, waits, start = ticking(h, clock, pace=2_500_000, rounds=40)
    assert waits.sleeps[0] == TICK_S  # before the kernel first asked
    assert waits.sleeps[1:] == [0.0025] * 40
    assert k.runs[0] == STEP
    assert k.runs[1:] == [2_500_000 + MS] * 39  # the sleep and the run before it
    # the kernel's clock keeps up with real time (bar the last run's work and the sleep
    # that ended the loop)
    assert sum(k.runs) == clock.ns - start - MS - 2_500_000


@pytest.mark.parametrize(("asked", "sleep_ns"), [(1, PACE_MIN_NS), (10 * STEP, STEP)])
def test_a_pace_is_bounded(host, asked: int, sleep_ns: int) -> None:
    h, clock = host
    _, waits, _ = ticking(h, clock, pace=asked, rounds=5)
    assert waits.sleeps[1:] == [sleep_ns / 1e9] * 5


def test_without_a_pace_it_sleeps_whole_ticks_as_before(host) -> None:
    h, clock = host
    k, waits, _ = ticking(h, clock, pace=None, rounds=5)
    assert waits.sleeps == [TICK_S] + [TICK_S * TICK_IDLE_MAX] * 5
    assert k.runs == [STEP] + [STEP * TICK_IDLE_MAX] * 4


def test_a_freeze_is_not_run_again_after_the_thaw(host) -> None:
    """The thaw moves the kernel's clock over a freeze: the ticker must not as well."""
    h, clock = host

    def freeze_between(n: int) -> None:
        h.frozen = 5 <= n < 8
        if h.frozen:
            clock.ns += 10 * 10**9  # 10 s frozen at each of those wakes

    k, waits, _ = ticking(h, clock, pace=2_500_000, rounds=12, on_wait=freeze_between)
    assert len(k.runs) == 12 - 3  # twelve wakes, three of them frozen
    assert k.runs[4] == 2_500_000  # after the thaw: the sleep before it, no more
    assert waits.sleeps[1:] == [0.0025] * 12  # the pace is kept while frozen


def test_a_late_wake_is_caught_up_in_slices_and_at_most_100_ms(host) -> None:
    """A loaded host wakes the ticker late: the time missed is run two paces a run, 1 ms
    apart, and beyond 100 ms the kernel's clock lags instead."""
    h, clock = host

    def late(n: int) -> None:
        if n == 4:
            clock.ns += 300 * MS

    k, waits, start = ticking(h, clock, pace=2_500_000, rounds=60, on_wait=late)
    assert max(k.runs[1:]) == 2 * 2_500_000
    assert k.runs[1:4] == [3_500_000, 3_500_000, 5_000_000]
    catching_up = waits.sleeps.index(0.0025, 4) - 4
    assert catching_up > 20 and waits.sleeps[4 : 4 + catching_up] == [0.001] * catching_up
    assert waits.sleeps[4 + catching_up :] == [0.0025] * (len(waits.sleeps) - 4 - catching_up)
    dropped = 300 * MS + 3_500_000 - 100 * MS
    assert sum(k.runs) == clock.ns - start - dropped - MS - 2_500_000
