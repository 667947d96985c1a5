"""Timers: interval timers (ITIMER_REAL/VIRTUAL/PROF), POSIX timers and timerfds.

Expiry times are absolute on the timer's clock (monotonic or realtime; thread-group
CPU time for ITIMER_VIRTUAL/PROF), so a timer keeps its phase across a checkpoint: the
restored kernel fires it at ``expiry + k * interval`` like the original would have.
When several periods pass at once, one expiry is delivered and the rest are counted:
as POSIX timer overruns, as timerfd ticks.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from ckpt import state
from ckpt.errors import SyscallError
from ckpt.kernel.clock import CLOCK_MONOTONIC
from ckpt.kernel.vfs import FileDescription

ITIMER_REAL = 0
ITIMER_VIRTUAL = 1
ITIMER_PROF = 2
ITIMER_NAMES = ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")


def expirations(expiry_ns: int, interval_ns: int, now_ns: int) -> tuple[int, int]:
    """(how many times a timer armed for ``expiry_ns`` has expired by ``now_ns``, next expiry).

    A next expiry of 0 means the timer is now disarmed (one-shot).
    """
    if expiry_ns == 0 or now_ns < expiry_ns:
        return 0, expiry_ns
    if interval_ns == 0:
        return 1, 0
    count = 1 + (now_ns - expiry_ns) // interval_ns
    return count, expiry_ns + count * interval_ns


@state.savable
@dataclass(eq=False, slots=True)
class ITimer:
    """One of a thread group's three interval timers (``expiry_ns`` 0: disarmed)."""

    which: int
    expiry_ns: int = 0
    interval_ns: int = 0
    fired: int = 0

    def arm(self, now_ns: int, value_ns: int, interval_ns: int) -> None:
        if value_ns < 0 or interval_ns < 0:
            raise SyscallError(errno.EINVAL, "negative itimer value")
        self.expiry_ns = now_ns + value_ns if value_ns else 0
        self.interval_ns = interval_ns

    def remaining(self, now_ns: int) -> int:
        return max(0, self.expiry_ns - now_ns) if self.expiry_ns else 0

    def expire(self, now_ns: int) -> int:
        count, self.expiry_ns = expirations(self.expiry_ns, self.interval_ns, now_ns)
        self.fired += count
        return count


@state.savable
@dataclass(eq=False, slots=True)
class PosixTimer:
    """A timer_create timer: its clock, the signal it sends, and its overrun count."""

    id: int
    clock: int = CLOCK_MONOTONIC
    signo: int = 14
    expiry_ns: int = 0
    interval_ns: int = 0
    target_tid: int = 0  # SIGEV_THREAD_ID target, 0 for the whole thread group
    overrun: int = 0  # what timer_getoverrun reports for the last delivered signal
    pending_overrun: int = 0  # expirations while the signal was still queued
    signal_queued: bool = False
    fired: int = 0

    def arm(self, now_ns: int, value_ns: int, interval_ns: int) -> None:
        if value_ns < 0 or interval_ns < 0:
            raise SyscallError(errno.EINVAL, "negative timer value")
        self.expiry_ns = now_ns + value_ns if value_ns else 0
        self.interval_ns = interval_ns

    def remaining(self, now_ns: int) -> int:
        return max(0, self.expiry_ns - now_ns) if self.expiry_ns else 0

    def expire(self, now_ns: int) -> bool:
        """Account for expirations up to ``now_ns``; True if a signal must be queued."""
        count, self.expiry_ns = expirations(self.expiry_ns, self.interval_ns, now_ns)
        if not count:
            return False
        self.fired += count
        if self.signal_queued:
            self.pending_overrun += count
            return False
        self.signal_queued = True
        self.pending_overrun += count - 1
        return True

    def delivered(self) -> None:
        """The queued signal was dequeued: its overrun becomes timer_getoverrun's answer."""
        self.overrun = self.pending_overrun
        self.pending_overrun = 0
        self.signal_queued = False


@state.savable
@dataclass(eq=False)
class TimerFD(FileDescription):
    """A timerfd: reading returns the expirations since the last read (EAGAIN if none)."""

    clock: int = CLOCK_MONOTONIC
    expiry_ns: int = 0
    interval_ns: int = 0
    ticks: int = 0

    def arm(self, now_ns: int, value_ns: int, interval_ns: int) -> None:
        self.expiry_ns = now_ns + value_ns if value_ns else 0
        self.interval_ns = interval_ns
        self.ticks = 0

    def remaining(self, now_ns: int) -> int:
        return max(0, self.expiry_ns - now_ns) if self.expiry_ns else 0

    def expire(self, now_ns: int) -> int:
        count, self.expiry_ns = expirations(self.expiry_ns, self.interval_ns, now_ns)
        self.ticks += count
        return count

    def read_ticks(self) -> int:
        if not self.ticks:
            raise SyscallError(errno.EAGAIN, "timerfd has not expired")
        ticks, self.ticks = self.ticks, 0
        return ticks
