"""RunMap: an integer map kept as runs of consecutive keys, for per-page kernel tables.

Page tables (virtual page -> frame) and frame reference counts hold one entry per page,
but their values come in long runs: a mapping filled in order has frames that follow
its pages, and a region's frames share one count.  Kept as a dict, a 1 GiB sandbox's
two tables are 524,288 entries and 5 MB of saved state, all written while the sandbox
is frozen.  Kept as runs, they are as large as the number of runs.

A run ``i`` covers the keys ``starts[i] .. starts[i] + lens[i] - 1``; key ``k`` in it
maps to ``values[i] + step * (k - starts[i])``.  A page table has ``step`` 1 (each page's
frame follows the one before), a reference count ``step`` 0 (one count for the run).
The runs are always sorted, disjoint, non-empty and *maximal*: two neighbours that
could be one run are one, so equal maps have equal runs whatever built them (and a
saved map is the same bytes).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ckpt import state


@state.savable
@dataclass(eq=False)
class RunMap:
    """``int -> int`` stored as maximal runs (see the module docstring)."""

    step: int = 0
    starts: list[int] = field(default_factory=list)
    lens: list[int] = field(default_factory=list)
    values: list[int] = field(default_factory=list)
    count: int = 0  # keys held: the sum of ``lens``

    # -- reading ------------------------------------------------------------------------
    def _index(self, key: int) -> int:
        """The run holding ``key``, or -1."""
        i = bisect_right(self.starts, key) - 1
        if i >= 0 and key < self.starts[i] + self.lens[i]:
            return i
        return -1

    def get(self, key: int, default: int | None = None) -> int | None:
        i = bisect_right(self.starts, key) - 1
        if i >= 0:
            off = key - self.starts[i]
            if off < self.lens[i]:
                return self.values[i] + self.step * off
        return default

    def __getitem__(self, key: int) -> int:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return type(key) is int and self._index(key) >= 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[int]:
        return self.keys()

    def keys(self) -> Iterator[int]:
        """Every key, ascending."""
        for s, n in zip(self.starts, self.lens, strict=True):
            yield from range(s, s + n)

    def held(self, keys: Iterable[int]) -> Iterator[int]:
        """Those of ``keys`` the map holds.  Ascending keys cost one bisection per run
        they meet, not one each; keys out of order are still answered right."""
        starts, lens = self.starts, self.lens
        start = end = 0
        for key in keys:
            if not start <= key < end:
                i = bisect_right(starts, key) - 1
                if i < 0:
                    continue
                start, end = starts[i], starts[i] + lens[i]
                if key >= end:
                    continue
            yield key

    def items(self) -> Iterator[tuple[int, int]]:
        """Every ``(key, value)``, ascending."""
        step = self.step
        for s, n, v in zip(self.starts, self.lens, self.values, strict=True):
            if step:
                yield from zip(range(s, s + n), range(v, v + n * step, step), strict=True)
            else:
                for k in range(s, s + n):
                    yield k, v

    def values_iter(self) -> Iterator[int]:
        for _, v in self.items():
            yield v

    def runs(self) -> list[tuple[int, int, int]]:
        """The runs as ``(first key, length, first value)``, ascending."""
        return list(zip(self.starts, self.lens, self.values, strict=True))

    def runs_in(self, first: int, n: int) -> list[tuple[int, int, int]]:
        """The runs clipped to the keys ``first .. first + n - 1``."""
        out: list[tuple[int, int, int]] = []
        end = first + n
        i = max(bisect_right(self.starts, first) - 1, 0)
        starts, lens, values, step = self.starts, self.lens, self.values, self.step
        while i < len(starts) and starts[i] < end:
            s, length = starts[i], lens[i]
            lo, hi = max(s, first), min(s + length, end)
            if lo < hi:
                out.append((lo, hi - lo, values[i] + step * (lo - s)))
            i += 1
        return out

    def copy(self) -> RunMap:
        return RunMap(self.step, list(self.starts), list(self.lens), list(self.values), self.count)

    # -- writing ------------------------------------------------------------------------
    def __setitem__(self, key: int, value: int) -> None:
        starts = self.starts
        if starts:  # the common case first: extending the last run (a mapping filled in order)
            last = len(starts) - 1
            end = starts[last] + self.lens[last]
            if key == end and value == self.values[last] + self.step * self.lens[last]:
                self.lens[last] += 1
                self.count += 1
                return
        self.assign(key, 1, value)

    def __delitem__(self, key: int) -> None:
        if not self.pop_range(key, 1):
            raise KeyError(key)

    def assign(self, first: int, n: int, value: int) -> None:
        """Map the keys ``first .. first + n - 1`` to ``value``, ``value + step``, ..."""
        if n <= 0:
            return
        lo = self._cut(first)
        hi = self._cut(first + n)
        self.count += n - sum(self.lens[lo:hi])
        self.starts[lo:hi] = [first]
        self.lens[lo:hi] = [n]
        self.values[lo:hi] = [value]
        self._join(lo)
        self._join(lo - 1)

    def pop_range(self, first: int, n: int) -> list[tuple[int, int, int]]:
        """Remove the keys ``first .. first + n - 1``; returns the runs they held."""
        if n <= 0:
            return []
        lo = self._cut(first)
        hi = self._cut(first + n)
        gone = list(zip(self.starts[lo:hi], self.lens[lo:hi], self.values[lo:hi], strict=True))
        self.count -= sum(self.lens[lo:hi])
        del self.starts[lo:hi], self.lens[lo:hi], self.values[lo:hi]
        return gone  # the runs either side now have a gap between them: nothing to join

    def add(self, first: int, n: int, delta: int) -> None:
        """Add ``delta`` to the value of every key held in ``first .. first + n - 1``."""
        if n <= 0 or not delta:
            return
        lo = self._cut(first)
        hi = self._cut(first + n)
        values = self.values
        for i in range(lo, hi):
            values[i] += delta
        self._join(hi - 1)
        self._join(lo - 1)

    def _cut(self, key: int) -> int:
        """Split the run holding ``key`` so that one starts there; returns the index of
        the first run starting at or after ``key``."""
        starts = self.starts
        i = bisect_right(starts, key) - 1
        if i < 0:
            return 0
        s = starts[i]
        if s == key:
            return i
        length = self.lens[i]
        if key >= s + length:
            return i + 1
        cut = key - s
        starts.insert(i + 1, key)
        self.lens.insert(i + 1, length - cut)
        self.values.insert(i + 1, self.values[i] + self.step * cut)
        self.lens[i] = cut
        return i + 1

    def _join(self, i: int) -> None:
        """Merge run ``i`` with run ``i + 1`` if they continue each other."""
        starts, lens, values = self.starts, self.lens, self.values
        if 0 <= i < len(starts) - 1:
            n = lens[i]
            if starts[i] + n == starts[i + 1] and values[i] + self.step * n == values[i + 1]:
                lens[i] = n + lens[i + 1]
                del starts[i + 1], lens[i + 1], values[i + 1]

    def __after_load__(self) -> None:
        self.check()  # a run map from an image is trusted only once it holds together

    def check(self) -> None:
        """Raise ``ValueError`` unless the runs are sorted, disjoint, non-empty, maximal
        and ``count`` is their total (for tests and for loading untrusted state)."""
        starts, lens, values = self.starts, self.lens, self.values
        if not len(starts) == len(lens) == len(values):
            raise ValueError("run map columns differ in length")
        if type(self.step) is not int or any(
            type(x) is not int for col in (starts, lens, values) for x in col
        ):
            raise ValueError("run map holds a value that is not an int")
        for i, n in enumerate(lens):
            if n <= 0:
                raise ValueError(f"run {i} is empty")
            if i and starts[i - 1] + lens[i - 1] > starts[i]:
                raise ValueError(f"run {i} overlaps or precedes the one before")
            if (
                i
                and starts[i - 1] + lens[i - 1] == starts[i]
                and values[i - 1] + self.step * lens[i - 1] == values[i]
            ):
                raise ValueError(f"runs {i - 1} and {i} should be one")
        if sum(lens) != self.count:
            raise ValueError(f"run map counts {self.count} keys, its runs hold {sum(lens)}")
