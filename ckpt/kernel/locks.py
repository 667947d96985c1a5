"""File locks: BSD ``flock``, POSIX record locks and OFD locks, with Linux's conflict rules.

A ``LockSet`` is a sorted list of non-overlapping byte ranges (``LockSegment``), each with
at most one writer or any number of readers.  Locking a range splits the segments at its
edges, fills the gaps, updates the holders inside, then merges neighbours that ended up
identical, so ``[0,10) read`` plus ``[10,20) read`` by one owner is one segment.

Owners are integers unique within the kernel: a thread group's ``lock_owner`` for POSIX
locks (released when the process closes *any* fd of the inode, or exits), a file
description's id for flock and OFD locks (released when the description's last reference
goes).  Blocked requests wait in a FIFO queue and are granted in that order when a
release makes room.

An inode's ``FileLocks`` and its two sets are allocated on first use, so an inode that
never locked saves as one nil reference (as gVisor's code-generated prototype
allocates its lock sets lazily).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ckpt import state
from ckpt.errors import KernelError

LOCK_EOF = (1 << 63) - 1  # "to end of file, however far it grows"


class LockType(enum.Enum):
    """F_RDLCK / F_WRLCK (LOCK_SH / LOCK_EX for flock)."""

    READ = 0
    WRITE = 1


@state.savable
@dataclass(eq=False, slots=True)
class LockSegment:
    """Holders of the byte range ``[start, end)``: one writer, or readers (owner -> pid)."""

    start: int
    end: int
    writer: int = 0
    writer_pid: int = 0
    readers: dict[int, int] = field(default_factory=dict)

    def same_holders(self, other: LockSegment) -> bool:
        return (
            self.writer == other.writer
            and self.writer_pid == other.writer_pid
            and self.readers == other.readers
        )

    def empty(self) -> bool:
        return self.writer == 0 and not self.readers

    def split(self, at: int) -> LockSegment:
        """Cut at ``at``: this segment keeps ``[start, at)``, the result is ``[at, end)``."""
        tail = LockSegment(at, self.end, self.writer, self.writer_pid, dict(self.readers))
        self.end = at
        return tail


@state.savable
@dataclass(eq=False, slots=True)
class LockWaiter:
    """A blocked F_SETLKW / flock request; ``tid`` is the task sleeping on it."""

    owner: int
    pid: int
    type: LockType
    start: int
    end: int
    tid: int


@dataclass(frozen=True, slots=True)
class Conflict:
    """What F_GETLK reports: the first lock in the way."""

    type: LockType
    start: int
    end: int
    pid: int


@state.savable
@dataclass(eq=False)
class LockSet:
    """Byte-range locks of one kind on one inode, and the requests waiting for them."""

    segments: list[LockSegment] = field(default_factory=list)
    waiters: list[LockWaiter] = field(default_factory=list)

    def conflict(self, owner: int, type: LockType, start: int, end: int) -> Conflict | None:
        """The first lock held by another owner that stops ``owner`` from locking."""
        _check_range(start, end)
        for seg in self.segments:
            if seg.end <= start:
                continue
            if seg.start >= end:
                break
            if seg.writer and seg.writer != owner:
                return Conflict(LockType.WRITE, seg.start, seg.end, seg.writer_pid)
            if type is LockType.WRITE:
                for reader, pid in seg.readers.items():
                    if reader != owner:
                        return Conflict(LockType.READ, seg.start, seg.end, pid)
        return None

    def try_lock(self, owner: int, pid: int, type: LockType, start: int, end: int) -> bool:
        """Take (or convert) the lock if nothing conflicts; False if something does."""
        if self.conflict(owner, type, start, end) is not None:
            return False
        inside = self._carve(start, end, fill=True)
        for seg in inside:
            if type is LockType.WRITE:
                seg.readers.pop(owner, None)
                seg.writer, seg.writer_pid = owner, pid
            else:
                if seg.writer == owner:
                    seg.writer, seg.writer_pid = 0, 0
                seg.readers[owner] = pid
        self._merge()
        return True

    def unlock(self, owner: int, start: int = 0, end: int = LOCK_EOF) -> bool:
        """Drop ``owner``'s locks in ``[start, end)``; True if anything was released."""
        _check_range(start, end)
        if not any(
            seg.start < end and seg.end > start and (seg.writer == owner or owner in seg.readers)
            for seg in self.segments
        ):
            return False
        for seg in self._carve(start, end, fill=False):
            if seg.writer == owner:
                seg.writer, seg.writer_pid = 0, 0
            seg.readers.pop(owner, None)
        self._merge()
        return True

    def enqueue(self, waiter: LockWaiter) -> None:
        self.waiters.append(waiter)

    def cancel(self, tid: int) -> None:
        """Forget the requests of a task that stopped waiting (killed, interrupted)."""
        self.waiters = [w for w in self.waiters if w.tid != tid]

    def grant_waiters(self) -> list[LockWaiter]:
        """Grant queued requests that now fit, first come first served."""
        granted = []
        for waiter in list(self.waiters):
            if self.try_lock(waiter.owner, waiter.pid, waiter.type, waiter.start, waiter.end):
                self.waiters.remove(waiter)
                granted.append(waiter)
        return granted

    def held_by(self, owner: int) -> list[tuple[LockType, int, int]]:
        """``owner``'s locks as merged ranges, in order: ``(type, start, end)``."""
        out: list[tuple[LockType, int, int]] = []
        for seg in self.segments:
            if seg.writer == owner:
                kind = LockType.WRITE
            elif owner in seg.readers:
                kind = LockType.READ
            else:
                continue
            if out and out[-1][0] is kind and out[-1][2] == seg.start:
                out[-1] = (kind, out[-1][1], seg.end)
            else:
                out.append((kind, seg.start, seg.end))
        return out

    def owners(self) -> set[int]:
        found: set[int] = set()
        for seg in self.segments:
            if seg.writer:
                found.add(seg.writer)
            found.update(seg.readers)
        return found

    def _carve(self, start: int, end: int, *, fill: bool) -> list[LockSegment]:
        """Split segments at ``start`` and ``end``; return those inside, gaps filled if asked."""
        out: list[LockSegment] = []
        inside: list[LockSegment] = []
        cursor = start
        for seg in self.segments:
            if seg.end <= start or seg.start >= end:
                out.append(seg)
                continue
            if seg.start < start:
                out.append(seg)
                seg = seg.split(start)
            tail = seg.split(end) if seg.end > end else None
            if fill and seg.start > cursor:
                gap = LockSegment(cursor, seg.start)
                out.append(gap)
                inside.append(gap)
            out.append(seg)
            inside.append(seg)
            cursor = seg.end
            if tail is not None:
                out.append(tail)
        if fill and cursor < end:
            gap = LockSegment(cursor, end)
            out.append(gap)
            inside.append(gap)
        out.sort(key=lambda s: s.start)
        self.segments = out
        return inside

    def _merge(self) -> None:
        merged: list[LockSegment] = []
        for seg in self.segments:
            if seg.empty():
                continue
            if merged and merged[-1].end == seg.start and merged[-1].same_holders(seg):
                merged[-1].end = seg.end
            else:
                merged.append(seg)
        self.segments = merged


@state.savable
@dataclass(eq=False)
class FileLocks:
    """An inode's locks: the flock set and the POSIX/OFD record-lock set, each lazy."""

    bsd: LockSet | None = None
    posix: LockSet | None = None

    def bsd_set(self) -> LockSet:
        if self.bsd is None:
            self.bsd = LockSet()
        return self.bsd

    def posix_set(self) -> LockSet:
        if self.posix is None:
            self.posix = LockSet()
        return self.posix

    def sets(self) -> list[LockSet]:
        return [s for s in (self.bsd, self.posix) if s is not None]


def _check_range(start: int, end: int) -> None:
    if start < 0 or end <= start or end > LOCK_EOF:
        raise KernelError(f"bad lock range [{start}, {end}): need 0 <= start < end <= LOCK_EOF")
