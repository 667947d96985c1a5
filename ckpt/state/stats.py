"""Per-type statistics: how many objects of each type, and the time spent on them.

Off by default and free when off: engines take ``stats=None`` and then read no clock
at all.  When on, times come from ``time.perf_counter_ns`` (monotonic, no wall-clock
or datetime construction), looked up when the ``Stats`` is created.  Times
are exclusive: references are queued, not followed, so a type's time never includes
another type's.  The typed engine times a whole batch of one type at once.

One-time set-up (resolving a class's annotations, generating and compiling its code)
can happen in the middle of a timed batch, when a type is met for the first time.  It
is timed where it happens (``setup_timer``; always on: it runs once per class) and
moved out of the per-type times onto its own ``(set-up)`` line.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any

_setup_ns = [0]  # one-time set-up timed so far in this process (all threads)
_collecting = [0]  # saves/loads with stats running now: only then is set-up timed


@contextmanager
def setup_timer() -> Any:
    """Count the enclosed one-time work as set-up, not as the current type's time.
    Reads no clock unless some save or load is collecting stats."""
    if not _collecting[0]:
        yield
        return
    start = time.perf_counter_ns()
    try:
        yield
    finally:
        _setup_ns[0] += time.perf_counter_ns() - start


@contextmanager
def collecting(stats: Stats) -> Any:
    """Around a save or load given a Stats: time one-time set-up meanwhile, and put all
    of it on the Stats' set-up line."""
    _collecting[0] += 1
    before = _setup_ns[0]
    try:
        yield
    finally:
        _collecting[0] -= 1
        stats.setup_ns += _setup_ns[0] - before


def setup_clock() -> int:
    return _setup_ns[0]


class Stats:
    """Counts and exclusive nanoseconds per type name; renders like gVisor's table."""

    def __init__(self) -> None:
        self.clock = time.perf_counter_ns
        self.setup_clock = setup_clock
        self.counts: dict[str, int] = {}
        self.times: dict[str, int] = {}
        self.setup_ns = 0  # one-time set-up during the save or load (not in any type)

    def add(self, name: str, ns: int, count: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + count
        self.times[name] = self.times.get(name, 0) + ns

    def add_timed(self, name: str, start: int, setup_start: int, count: int = 1) -> None:
        """Add the time since ``start`` minus the set-up done since ``setup_start``."""
        self.add(name, self.clock() - start - (_setup_ns[0] - setup_start), count)

    @property
    def total_ns(self) -> int:
        return sum(self.times.values())

    def rows(self) -> list[tuple[str, int, int, float]]:
        """(type, count, total ns, ns per object), sorted by total time, largest first."""
        out = [
            (
                name,
                count,
                self.times.get(name, 0),
                self.times.get(name, 0) / count if count else 0.0,
            )
            for name, count in self.counts.items()
        ]
        out.sort(key=lambda r: (-r[2], r[0]))
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "total_ns": self.total_ns,
            "setup_ns": self.setup_ns,
            "types": [
                {"type": name, "count": count, "total_ns": total, "per_object_ns": round(per)}
                for name, count, total, per in self.rows()
            ],
        }

    def __str__(self) -> str:
        lines = [f"{'total':>12} {'count':>8} {'per object':>12}  type"]
        for name, count, total, per in self.rows():
            lines.append(f"{_ms(total):>12} {count:>8} {_us(per):>12}  {name}")
        lines.append(f"{_ms(self.total_ns):>12} {sum(self.counts.values()):>8} {'':>12}  (all)")
        if self.setup_ns:
            lines.append(f"{_ms(self.setup_ns):>12} {'':>8} {'':>12}  (set-up, once per class)")
        return "\n".join(lines)

    def __rich__(self) -> Any:
        from rich.table import Table

        table = Table(title="per-type state statistics")
        for col in ("total", "count", "per object", "type"):
            table.add_column(col, justify="left" if col == "type" else "right")
        for name, count, total, per in self.rows():
            table.add_row(_ms(total), str(count), _us(per), name)
        if self.setup_ns:
            table.add_row(_ms(self.setup_ns), "", "", "(set-up, once per class)")
        return table


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def _us(ns: float) -> str:
    return f"{ns / 1e3:.2f} µs"
