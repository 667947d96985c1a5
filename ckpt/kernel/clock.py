"""The kernel's clocks: a monotonic and a realtime clock advanced by the step loop.

The simulated clocks move only when the kernel runs (``Kernel.run_for``), so a run is
deterministic.  Across a pause (and so across a checkpoint and restore) the Timekeeper
remembers the host's realtime; on resume it moves monotonic forward by the host time
that passed, never backwards, as gVisor does::

    restored monotonic = saved monotonic + max(0, host realtime elapsed)

Realtime follows the host even when the host clock stepped back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ckpt import state

CLOCK_REALTIME = 0
CLOCK_MONOTONIC = 1

# Where the simulated clocks start: realtime at a fixed date so runs are reproducible.
BOOT_REALTIME_NS = 1_790_000_000_000_000_000


@state.savable
@dataclass(eq=False, slots=True)
class Timekeeper:
    """Monotonic and realtime clocks, and the host realtime seen at the last pause."""

    monotonic_ns: int = 0
    realtime_ns: int = BOOT_REALTIME_NS
    paused_host_ns: int | None = None
    # How the host's realtime is read; tests swap in a fake.  Rebuilt on load.
    host_clock: Callable[[], int] = state.field(nosave=True, default=time.time_ns)  # noqa: RUF009

    def now(self, clock: int) -> int:
        """The current value of ``clock`` (CLOCK_REALTIME or CLOCK_MONOTONIC)."""
        return self.realtime_ns if clock == CLOCK_REALTIME else self.monotonic_ns

    def advance(self, ns: int) -> None:
        """Move both clocks forward by ``ns`` (the step loop's only way to pass time)."""
        self.monotonic_ns += ns
        self.realtime_ns += ns

    def freeze(self) -> None:
        """Remember the host realtime so resume can account for the time spent frozen."""
        self.paused_host_ns = self.host_clock()

    def thaw(self, host_now_ns: int | None = None) -> int:
        """Account for host time passed since ``freeze``; returns the monotonic step.

        Monotonic moves forward by the elapsed host time but never backwards, even when
        the host clock was stepped back; realtime simply follows the host.
        """
        if self.paused_host_ns is None:
            return 0
        now = self.host_clock() if host_now_ns is None else host_now_ns
        elapsed = now - self.paused_host_ns
        self.paused_host_ns = None
        step = max(0, elapsed)
        self.monotonic_ns += step
        self.realtime_ns += elapsed
        return step
