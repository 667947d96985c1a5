"""FrameBits: a set of frame numbers kept as one byte per frame, and a count.

A restored memory file tracks the frames it has not fetched yet.  A post-copy restore
of 1 GiB starts with about 262,144 of them; as a Python ``set`` of ints, building it
costs ~60-135 ms per GiB while the sandbox is down, and each int is ~60 bytes.  Kept
as bytes, a set-up from runs is one slice store per run (C speed, no int per frame),
a membership test is one index, and the memory is 256 KiB per GiB whatever is set.

Only what ``MemoryFile`` needs: ``in``, ``len``, ``discard``, ``discard_range``, and
the members ascending.  The count is kept beside the bytes, so ``len`` is O(1).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator


class FrameBits:
    """Frames ``>= 0`` held as ``bits[frame] == 1`` (see the module docstring)."""

    __slots__ = ("bits", "count")

    def __init__(self, runs: Iterable[tuple[int, int]] = ()) -> None:
        """The frames of the ascending, disjoint ``(first, count)`` ``runs``."""
        spans = [(first, n) for first, n in runs if n > 0]
        size = spans[-1][0] + spans[-1][1] if spans else 0
        self.bits = bytearray(size)
        self.count = 0
        for first, n in spans:
            if first < 0:
                raise ValueError(f"a frame run starts at {first}")
            self.bits[first : first + n] = b"\x01" * n
            self.count += n
        if self.count and self.bits.count(1) != self.count:  # runs overlapped
            raise ValueError("frame runs overlap or are out of order")

    def __contains__(self, frame: object) -> bool:
        bits = self.bits
        return type(frame) is int and 0 <= frame < len(bits) and bits[frame] == 1

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def discard(self, frame: int) -> None:
        """Remove ``frame`` if held."""
        bits = self.bits
        if 0 <= frame < len(bits) and bits[frame]:
            bits[frame] = 0
            self.count -= 1

    def discard_range(self, first: int, n: int) -> None:
        """Remove every held frame of ``first .. first + n - 1``."""
        bits = self.bits
        lo, hi = max(first, 0), min(first + n, len(bits))
        if lo >= hi:
            return
        held = bits.count(1, lo, hi)
        if held:
            bits[lo:hi] = bytes(hi - lo)
            self.count -= held

    def __iter__(self) -> Iterator[int]:
        """The held frames, ascending."""
        if not self.count:
            return iter(())
        return itertools.compress(range(len(self.bits)), self.bits)


def runs_of_frames(frames: Iterable[int]) -> list[tuple[int, int]]:
    """Ascending frames as ``(first, count)`` runs."""
    runs: list[tuple[int, int]] = []
    for f in frames:
        if runs and runs[-1][0] + runs[-1][1] == f:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((f, 1))
    return runs


def intersect_runs(
    a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]
) -> Iterator[tuple[int, int]]:
    """The ``(first, count)`` runs of the frames in both ``a`` and ``b``, each ascending
    and disjoint: one step per run, not per frame."""
    ia, ib = iter(a), iter(b)
    ra, rb = next(ia, None), next(ib, None)
    while ra is not None and rb is not None:
        lo = max(ra[0], rb[0])
        end_a, end_b = ra[0] + ra[1], rb[0] + rb[1]
        hi = min(end_a, end_b)
        if lo < hi:
            yield lo, hi - lo
        if end_a <= end_b:
            ra = next(ia, None)
        else:
            rb = next(ib, None)
