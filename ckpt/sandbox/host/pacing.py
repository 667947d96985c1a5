"""The ticker's bookkeeping for a kernel that asks for a pace (``Kernel.pace_ns``).

``memory:N@RATE``'s writer owes pages in proportion to kernel time.  Run in whole
ticks, a fast writer would do tens of milliseconds of writes in one hold of the kernel
lock; asked for a pace, the ticker (``Host.tick``) sleeps that long instead and runs
the kernel for the real time passed, so the clock keeps up and each hold is one batch.
A late wake (a loaded host, a thaw) is caught up two paces a run, ``PACE_MIN_NS``
apart, so requests are served between; beyond ``PACE_CATCHUP_NS`` behind, the kernel's
clock lags rather than the sandbox doing nothing else.
"""

from __future__ import annotations

import time

PACE_MIN_NS = 1_000_000  # the shortest sleep a paced kernel gets
PACE_CATCHUP_NS = 100_000_000  # at most this much real time is owed to the kernel


class Pacer:
    """How long a paced kernel runs and sleeps; ``pace`` 0 when none is asked."""

    def __init__(self, tick_ns: int) -> None:
        self.tick_ns = tick_ns
        self.pace = 0  # ns between runs, PACE_MIN_NS to one tick
        self.owed = 0  # real time not run yet
        self.ran_at = time.monotonic_ns()

    def since(self) -> int:
        """The real time since the last call (the ticker calls it once a wake)."""
        now = time.monotonic_ns()
        since, self.ran_at = now - self.ran_at, now
        return since

    def run_ns(self, since: int) -> int:
        """How long to run the kernel now, ``since`` more having passed."""
        self.owed = min(self.owed + since, PACE_CATCHUP_NS)
        run = min(self.owed, 2 * self.pace)
        self.owed -= run
        return run

    def ask(self, asked: int | None) -> bool:
        """Take the kernel's ``pace_ns()``; False if it asks for none."""
        self.pace = max(PACE_MIN_NS, min(self.tick_ns, asked)) if asked else 0
        if not self.pace:
            self.owed = 0
        return self.pace > 0

    def sleep_s(self) -> float:
        """The next sleep: the pace, or the shortest while time is owed."""
        return (PACE_MIN_NS if self.owed else self.pace) / 1e9
