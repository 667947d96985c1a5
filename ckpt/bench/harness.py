"""Shared benchmark machinery: interleaved runs, per-operation metrics, three renderings.

Every suite describes its work as ``Case`` objects (a name, a variant such as an engine,
a ``run`` callable and an optional ``setup`` whose result is passed to ``run`` and is not
timed).  ``run_interleaved`` runs the variants of each name in alternating order
(A B, B A, A B, ...) so that drift on a shared, noisy machine hits every variant alike,
and records per operation:

* wall time and process CPU time (nanoseconds),
* cyclic-GC collections that started during the operation (``gc.callbacks``),
* net allocated blocks (``sys.getallocatedblocks`` delta, result still alive),
* peak traced memory (``tracemalloc``) in a separate, untimed pass, because tracing
  slows Python down several times and would distort the times,
* bytes produced, when the case says how to count them.

Results render as a rich table (medians, spread, ratio to a baseline variant), as JSON,
and as Go benchmark lines that ``benchstat`` can compare across runs.
"""

from __future__ import annotations

import gc
import re
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ckpt.errors import CkptError


class BenchError(CkptError):
    """A benchmark was asked for something it cannot do (bad filter, bad count)."""


def mib_sizes(text: str) -> list[int]:
    """``--sizes 64,256`` as [64, 256]: sandbox memory sizes in MiB, each at least 1."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise BenchError(f"bad --sizes {text!r}: give MiB counts such as 64,256")
    return sizes


@dataclass
class Case:
    """One operation to measure: ``run(setup())`` (or ``run()`` without setup)."""

    name: str
    variant: str
    run: Callable[..., Any]
    setup: Callable[[], Any] | None = None
    # How many bytes the operation produced, computed from run's return value.
    bytes_of: Callable[[Any], int] | None = None
    # Extra named figures computed once from a result (e.g. file sizes); not timed.
    extras: Callable[[Any], dict[str, float]] | None = None
    # False where tracemalloc distorts beyond use (pure-Python pickle's deep recursion
    # runs ~200x slower traced); the peak-memory cell then stays empty.
    trace_memory: bool = True


@dataclass
class Sample:
    wall_ns: int
    cpu_ns: int
    gc_collections: int
    blocks: int
    out_bytes: int | None = None


@dataclass
class Result:
    """All samples of one (name, variant), with medians as properties."""

    name: str
    variant: str
    samples: list[Sample] = field(default_factory=list)
    peak_bytes: int | None = None
    extras: dict[str, float] = field(default_factory=dict)

    def median(self, attr: str) -> float:
        values = [getattr(s, attr) for s in self.samples if getattr(s, attr) is not None]
        return statistics.median(values) if values else float("nan")

    def spread(self, attr: str = "wall_ns") -> float:
        """Half the interquartile range relative to the median (benchstat's ± is similar)."""
        values = sorted(getattr(s, attr) for s in self.samples)
        if len(values) < 4:
            lo, hi = values[0], values[-1]
        else:
            q = statistics.quantiles(values, n=4)
            lo, hi = q[0], q[2]
        med = statistics.median(values)
        return (hi - lo) / 2 / med if med else 0.0

    @property
    def wall_ns(self) -> float:
        return self.median("wall_ns")

    @property
    def cpu_ns(self) -> float:
        return self.median("cpu_ns")

    @property
    def gc_collections(self) -> float:
        return self.median("gc_collections")

    @property
    def blocks(self) -> float:
        return self.median("blocks")

    @property
    def out_bytes(self) -> float:
        return self.median("out_bytes")


class _GcCounter:
    """Counts collections that start while installed (gc.callbacks, phase 'start')."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.count += 1

    def __enter__(self) -> _GcCounter:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def measure_once(case: Case) -> tuple[Sample, Any]:
    """Run the case once and measure it; returns the sample and the run's result."""
    arg = case.setup() if case.setup is not None else None
    gc.collect()
    with _GcCounter() as counter:
        blocks0 = sys.getallocatedblocks()
        cpu0 = time.process_time_ns()
        t0 = time.perf_counter_ns()
        result = case.run(arg) if case.setup is not None else case.run()
        t1 = time.perf_counter_ns()
        cpu1 = time.process_time_ns()
        blocks1 = sys.getallocatedblocks()
    out = case.bytes_of(result) if case.bytes_of is not None else None
    sample = Sample(t1 - t0, cpu1 - cpu0, counter.count, blocks1 - blocks0, out)
    return sample, result


def measure_peak(case: Case) -> int:
    """Peak traced memory of one run, measured in its own pass (tracing is slow)."""
    arg = case.setup() if case.setup is not None else None
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        result = case.run(arg) if case.setup is not None else case.run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del result
    return max(0, peak - base)


def select(cases: Sequence[Case], pattern: str | None) -> list[Case]:
    """Cases whose ``name/variant`` contains ``pattern`` (all when None)."""
    chosen = set(matching([f"{c.name}/{c.variant}" for c in cases], pattern))
    return [c for c in cases if f"{c.name}/{c.variant}" in chosen]


def matching(labels: Sequence[str], pattern: str | None) -> list[str]:
    """The labels that contain ``pattern`` (all when None); BenchError naming every
    label when none does."""
    if not pattern:
        return list(labels)
    chosen = [label for label in labels if pattern in label]
    if not chosen:
        raise BenchError(
            f"--filter {pattern!r} matches no benchmark; there are: {', '.join(sorted(set(labels)))}"
        )
    return chosen


def run_interleaved(
    cases: Sequence[Case],
    count: int = 5,
    *,
    memory: bool = True,
    progress: bool = True,
    warmup: int = 1,
) -> list[Result]:
    """Measure every case ``count`` times, alternating the variant order each round."""
    if count < 1:
        raise BenchError(f"--count must be at least 1, not {count}")
    by_name: dict[str, list[Case]] = {}
    for case in cases:
        by_name.setdefault(case.name, []).append(case)
    results = {(c.name, c.variant): Result(c.name, c.variant) for c in cases}
    total = len(cases) * (count + warmup) + (len(cases) if memory else 0)

    from rich.progress import Progress

    # The caller's heap is not the cases' garbage: frozen, it is out of every collection,
    # so each sample's collection costs the same whatever imported the harness (a test
    # process holds a far larger heap than the CLI).
    gc.collect()
    gc.freeze()
    try:
        with Progress(transient=True, disable=not progress) as bar:
            _run_all(
                by_name,
                results,
                bar,
                bar.add_task("benchmarking", total=total),
                count,
                warmup,
                memory,
            )
    finally:
        gc.unfreeze()
    return list(results.values())


def _run_all(
    by_name: dict[str, list[Case]],
    results: dict[tuple[str, str], Result],
    bar: Any,
    task: Any,
    count: int,
    warmup: int,
    memory: bool,
) -> None:
    """Every round of every case, alternating the variant order each round."""
    for name, group in by_name.items():
        for rnd in range(warmup + count):
            order = group if rnd % 2 == 0 else list(reversed(group))
            for case in order:
                bar.update(task, description=f"{name}/{case.variant}")
                sample, result = measure_once(case)
                res = results[(case.name, case.variant)]
                if rnd >= warmup:
                    res.samples.append(sample)
                if case.extras is not None and not res.extras:
                    res.extras = dict(case.extras(result))
                del result
                bar.advance(task)
        if memory:
            for case in group:
                if case.trace_memory:
                    results[(case.name, case.variant)].peak_bytes = measure_peak(case)
                bar.advance(task)


def ratio(
    results: Iterable[Result], name: str, variant: str, baseline: str, attr: str = "wall_ns"
) -> float:
    """median(variant) / median(baseline) for one benchmark name (nan when missing)."""
    table = {(r.name, r.variant): r for r in results}
    a, b = table.get((name, variant)), table.get((name, baseline))
    if a is None or b is None:
        return float("nan")
    den = b.median(attr)
    return a.median(attr) / den if den else float("nan")


def _fmt_ns(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{ns:.0f} ns"


def _fmt_bytes(n: float | None) -> str:
    if n is None or n != n:
        return "-"
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _two_lines(name: str, width: int = 9) -> str:
    """A long benchmark name broken into lines of at most ``width`` characters where it
    reads best: after a slash or before a capital ("Encoding/" "root-dict", "BigInt"
    "GraphSave"), never mid-word; a word longer than ``width`` is left to the table."""
    words = re.findall(r"[^/A-Z]*/|[A-Z][^/A-Z]*|[^/A-Z]+", name)
    lines: list[str] = []
    for word in words:
        if lines and len(lines[-1]) + len(word) <= width:
            lines[-1] += word
        else:
            lines.append(word)
    return "\n".join(lines)


def render(results: Sequence[Result], *, baseline: str | None = None, title: str = "") -> Any:
    """Two rich tables, times then memory and bytes, each narrow enough for an 80-column
    terminal (long benchmark names fold onto a second line instead of being cut)."""
    from rich.console import Group
    from rich.table import Table

    vs = f"vs {baseline}" if baseline else "ratio"

    def table(heading: str, columns: tuple[str, ...]) -> Table:
        t = Table(title=heading or None, title_justify="left")
        t.add_column("benchmark", overflow="fold", max_width=16)
        t.add_column("variant", overflow="fold")
        for col in columns:
            t.add_column(col, justify="right")
        return t

    def fmt_ratio(x: float) -> str:
        return "-" if x != x else f"{x:.2f}"

    times = table(
        f"{title}: time (medians)" if title else "time (medians)",
        ("time", "±", vs, "cpu", f"cpu {vs}"),
    )
    space = table(
        f"{title}: memory and output" if title else "memory and output",
        ("peak mem", "blocks", "gc", "bytes", f"bytes {vs}"),
    )
    previous = None
    for r in results:
        name = _two_lines(r.name) if r.name != previous else ""
        t_ratio = ratio(results, r.name, r.variant, baseline) if baseline else float("nan")
        c_ratio = (
            ratio(results, r.name, r.variant, baseline, "cpu_ns") if baseline else float("nan")
        )
        b_ratio = (
            ratio(results, r.name, r.variant, baseline, "out_bytes") if baseline else float("nan")
        )
        times.add_row(
            name,
            r.variant,
            _fmt_ns(r.wall_ns),
            f"{r.spread() * 100:.0f}%",
            fmt_ratio(t_ratio),
            _fmt_ns(r.cpu_ns),
            fmt_ratio(c_ratio),
        )
        space.add_row(
            name,
            r.variant,
            _fmt_bytes(r.peak_bytes),
            f"{r.blocks:,.0f}",
            f"{r.gc_collections:.0f}",
            _fmt_bytes(r.out_bytes),
            fmt_ratio(b_ratio),
        )
        previous = r.name
    return Group(times, space)


def _go_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "/=._-" else "_" for ch in text)


def go_lines(results: Sequence[Result], prefix: str = "") -> list[str]:
    """Go benchmark format lines, one per result, for ``benchstat``.

    ``B/op`` is the peak traced memory and ``allocs/op`` the net allocated blocks;
    ``stream-B``, ``cpu-ns/op`` and ``gc/op`` are custom units benchstat also compares.
    """
    lines = []
    for r in results:
        name = _go_name(f"Benchmark{prefix}{r.name}/{r.variant}")
        parts = [name, str(len(r.samples)), f"{r.wall_ns:.0f} ns/op", f"{r.cpu_ns:.0f} cpu-ns/op"]
        if r.peak_bytes is not None:
            parts.append(f"{r.peak_bytes} B/op")
        parts.append(f"{r.blocks:.0f} allocs/op")
        parts.append(f"{r.gc_collections:.0f} gc/op")
        if r.out_bytes == r.out_bytes:
            parts.append(f"{r.out_bytes:.0f} stream-B")
        for key, value in r.extras.items():
            parts.append(f"{value:.0f} {_go_name(key)}")
        lines.append("\t".join(parts))
    return lines


def to_json(
    results: Sequence[Result], *, baseline: str | None = None, machine: bool = True
) -> dict:
    """All results as one JSON-able document (medians, spreads, ratios, samples)."""
    doc: dict[str, Any] = {"results": []}
    if machine:
        doc["machine"] = machine_info()
    for r in results:
        entry = {
            "name": r.name,
            "variant": r.variant,
            "n": len(r.samples),
            "wall_ns": r.wall_ns,
            "cpu_ns": r.cpu_ns,
            "spread": r.spread(),
            "gc_collections": r.gc_collections,
            "blocks": r.blocks,
            "peak_bytes": r.peak_bytes,
            "out_bytes": None if r.out_bytes != r.out_bytes else r.out_bytes,
            "extras": r.extras,
            "samples_wall_ns": [s.wall_ns for s in r.samples],
        }
        if baseline:
            entry[f"ratio_vs_{baseline}"] = ratio(results, r.name, r.variant, baseline)
            entry[f"bytes_ratio_vs_{baseline}"] = ratio(
                results, r.name, r.variant, baseline, "out_bytes"
            )
        doc["results"].append(entry)
    return doc


def machine_info() -> dict[str, Any]:
    """Where the figures were measured: CPU model, cores, Python, date."""
    import os
    import platform
    from datetime import UTC, datetime

    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
