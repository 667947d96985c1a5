"""``ckpt bench state-scale``: what each engine costs per object as the graph grows.

For each size of ``ckpt bench state``'s random graph (20k, 100k and 400k nodes by
default; 1M on request) and each engine (``native`` where its C core is built,
``typed``, ``reflect`` and C ``pickle``), repeated and interleaved (A B C, C B A, ...):
save time and load time per node (medians), the stream's size, and in a separate,
untimed pass the peak memory of one save and one load, traced with ``tracemalloc``
(Python's allocators, C extensions' ``PyMem`` buffers included; not the process RSS).
An engine that stays linear keeps its time per node flat: the growth columns divide
each size's figure by the smallest size's (the goal: at most 1.3x).

Beside the engines, each size times a plain Python pass that reads every object's
attributes once (``walk``, no engine): the cost of merely touching the graph.  Its
growth is the machine's own (caches, TLB), the figure to read the engines' growth
against: on a host where the 20k graph fits in the last-level cache and 100k does not,
even this pass grows well past 1.3x.

C pickle runs at the interpreter's default recursion limit, as a user would run it; a
graph it cannot save (RecursionError) is reported as a failure, never retried with a
raised limit (that segfaults on the larger graphs).
"""

from __future__ import annotations

import gc
import pickle
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ckpt import state
from ckpt.bench import harness, state_models
from ckpt.bench.harness import BenchError, Case, Result
from ckpt.engines import ENGINE_NAMES

# what the benchmark compares: the engines this build runs, fastest first, then pickle
CONTENDERS = (*(e for e in ENGINE_NAMES if e in state.ENGINES), "pickle")
DEFAULT_SIZES = (20_000, 100_000, 400_000)
GROWTH_TARGET = 1.3  # goal: per-node cost at 400k (and 1M) over 20k
WALK = "walk"  # the reference pass, not an engine: reads every object's attributes


def touch(root: Any) -> int:
    """Read every graph object's attribute values once (their headers: ``type(v)``)."""
    seen = 0
    for group in (root.hubs, root.nodes, root.leaves):
        for obj in group:
            for value in obj.__dict__.values():
                seen += type(value) is int
    return seen


@dataclass
class Point:
    """One engine at one graph size."""

    nodes: int
    engine: str
    save: Result | None = None
    load: Result | None = None
    failure: str = ""  # why the engine could not run at this size
    extras: dict[str, float] = field(default_factory=dict)

    def per_node(self, which: str) -> float:
        r = self.save if which == "save" else self.load
        return r.wall_ns / self.nodes if r is not None and r.samples else float("nan")

    @property
    def stream_bytes(self) -> float:
        return self.save.out_bytes if self.save is not None else float("nan")


def parse_sizes(text: str) -> list[int]:
    """``"20k,100k,1M"`` -> ``[20000, 100000, 1000000]`` (plain integers work too)."""
    sizes = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        scale = {"k": 1_000, "m": 1_000_000}.get(part[-1].lower(), 1)
        digits = part[:-1] if scale > 1 else part
        try:
            n = int(digits) * scale
        except ValueError:
            raise BenchError(
                f"--sizes: {part!r} is not a node count (write e.g. 20000, 100k or 1M)"
            ) from None
        if n < 100:
            raise BenchError(f"--sizes: {n} nodes is too few for a per-node cost (use >= 100)")
        sizes.append(n)
    if not sizes:
        raise BenchError("--sizes is empty; give at least one node count")
    return sorted(set(sizes))


def parse_engines(text: str) -> list[str]:
    """``"typed,pickle"`` -> those engines; empty: every engine available here."""
    chosen = [e.strip() for e in text.split(",") if e.strip()]
    if not chosen:
        return list(CONTENDERS)
    if "native" in chosen and "native" not in state.ENGINES:
        raise BenchError(
            f"--engines: the native engine is unavailable here ({state.native_status()[1]})"
        )
    unknown = [e for e in chosen if e not in CONTENDERS]
    if unknown:
        raise BenchError(
            f"--engines: unknown {', '.join(unknown)}; choose from {', '.join(CONTENDERS)}"
        )
    return list(dict.fromkeys(chosen))


def _codecs(engine: str) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    if engine == "pickle":
        return (lambda o: pickle.dumps(o, 5)), pickle.loads
    return (lambda o: state.dumps(o, engine)), (lambda d: state.loads(d, engine))


def _try_save(dumps: Callable[[Any], bytes], root: Any) -> tuple[bytes | None, str]:
    try:
        return dumps(root), ""
    except RecursionError:
        return None, f"RecursionError at the default limit ({sys.getrecursionlimit()})"


def _say(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


def run(
    sizes: Sequence[int] = DEFAULT_SIZES,
    engines: Sequence[str] = CONTENDERS,
    count: int = 3,
    memory: bool = True,
    progress: bool = True,
) -> list[Point]:
    """Measure every engine at every size; progress lines go to stderr."""
    if count < 1:
        raise BenchError(f"--count must be at least 1, not {count}")
    codecs = {e: _codecs(e) for e in engines}
    warm = state_models.make_graph(1000)
    for e in engines:  # generated code, plans and caches: built before any timing
        dumps, loads = codecs[e]
        data, _ = _try_save(dumps, warm)
        if data is not None:
            loads(data)
    del warm
    points: list[Point] = []
    for n in sizes:
        _say(progress, f"state-scale: building the {n:,}-node graph")
        root = state_models.make_graph(n)
        streams: dict[str, bytes] = {}
        here: dict[str, Point] = {}
        for e in engines:
            point = Point(n, e)
            data, point.failure = _try_save(codecs[e][0], root)
            if data is not None:
                streams[e] = data
                point.save, point.load = Result("GraphSave", e), Result("GraphLoad", e)
            here[e] = point
            points.append(point)
        walk = Point(n, WALK, save=Result("Walk", WALK))
        live = [e for e in engines if e in streams]
        for rnd in range(count):
            order = live if rnd % 2 == 0 else live[::-1]
            _say(progress, f"state-scale: {n:,} nodes, {WALK}, round {rnd + 1}/{count}")
            sample, _ = harness.measure_once(Case("Walk", WALK, lambda r=root: touch(r)))
            walk.save.samples.append(sample)
            for e in order:
                _say(progress, f"state-scale: {n:,} nodes, {e}, round {rnd + 1}/{count}")
                dumps, loads = codecs[e]
                size = len(streams[e])
                for res, case in (
                    (
                        here[e].save,
                        Case("GraphSave", e, lambda d=dumps, r=root: d(r), bytes_of=len),
                    ),
                    (
                        here[e].load,
                        Case(
                            "GraphLoad",
                            e,
                            lambda ld=loads, s=streams[e]: ld(s),
                            bytes_of=lambda _r, k=size: k,
                        ),
                    ),
                ):
                    sample, result = harness.measure_once(case)
                    del result
                    res.samples.append(sample)
        if memory:
            for e in live:
                _say(progress, f"state-scale: {n:,} nodes, {e}, peak memory (traced)")
                dumps, loads = codecs[e]
                here[e].save.peak_bytes = harness.measure_peak(
                    Case("GraphSave", e, lambda d=dumps, r=root: d(r))
                )
                here[e].load.peak_bytes = harness.measure_peak(
                    Case("GraphLoad", e, lambda ld=loads, s=streams[e]: ld(s))
                )
        points.append(walk)
        del root, streams
        gc.collect()
    return points


def growth(points: Sequence[Point], point: Point, which: str) -> float:
    """This point's per-node cost over the same engine's at the smallest size."""
    base = min((p for p in points if p.engine == point.engine), key=lambda p: p.nodes)
    b = base.per_node(which)
    return point.per_node(which) / b if b == b and b else float("nan")


def target_rows(points: Sequence[Point]) -> list[dict[str, Any]]:
    """The linearity check for the typed and native engines: per-node growth <= 1.3x,
    each beside the walk's growth at the same size (the machine's)."""
    walks = {p.nodes: growth(points, p, "save") for p in points if p.engine == WALK}
    rows = []
    for p in points:
        if p.engine not in ("typed", "native") or p.failure:
            continue
        smallest = min(q.nodes for q in points if q.engine == p.engine)
        if p.nodes == smallest:
            continue
        for which in ("save", "load"):
            g = growth(points, p, which)
            rows.append(
                {
                    "engine": p.engine,
                    "op": which,
                    "nodes": p.nodes,
                    "from": smallest,
                    "growth": g,
                    "target": GROWTH_TARGET,
                    "met": g <= GROWTH_TARGET,
                    "walk_growth": walks.get(p.nodes, float("nan")),
                }
            )
    return rows


def _us(ns: float) -> str:
    return "-" if ns != ns else f"{ns / 1e3:.2f}"


def _x(v: float) -> str:
    return "-" if v != v else f"{v:.2f}x"


def _mib(n: float | None) -> str:
    return "-" if n is None or n != n else f"{n / (1 << 20):.1f}"


def render(points: Sequence[Point]) -> Any:
    """Three tables, each under 80 columns: time per node, memory, and the targets."""
    from rich.console import Group
    from rich.table import Table

    times = Table(title="state-scale: time per node (medians, µs)", title_justify="left")
    for col in ("nodes", "engine", "save", "±", "growth", "load", "±", "growth"):
        times.add_column(col, justify="left" if col == "engine" else "right")
    space = Table(title="state-scale: peak traced memory and stream (MiB)", title_justify="left")
    for col in ("nodes", "engine", "save peak", "load peak", "stream", "B/node", "gc"):
        space.add_column(col, justify="left" if col == "engine" else "right")
    previous = None
    failures: dict[str, list[str]] = {}
    for p in points:
        label = f"{p.nodes:,}" if p.nodes != previous else ""
        previous = p.nodes
        if p.failure:
            times.add_row(label, p.engine, "[red]failed[/]", "", "", "[red]failed[/]", "", "")
            space.add_row(label, p.engine, "-", "-", "-", "-", "-")
            failures.setdefault(f"{p.engine}: {p.failure}", []).append(f"{p.nodes:,}")
            continue
        walk = p.engine == WALK  # the walk has a save column only, and no stream
        times.add_row(
            label,
            f"[dim]{WALK}[/]" if walk else p.engine,
            _us(p.per_node("save")),
            f"{p.save.spread() * 100:.0f}%",
            _x(growth(points, p, "save")),
            "-" if walk else _us(p.per_node("load")),
            "" if walk else f"{p.load.spread() * 100:.0f}%",
            "" if walk else _x(growth(points, p, "load")),
        )
        if walk:
            continue
        space.add_row(
            label,
            p.engine,
            _mib(p.save.peak_bytes),
            _mib(p.load.peak_bytes),
            _mib(p.stream_bytes),
            f"{p.stream_bytes / p.nodes:.0f}",
            f"{p.save.gc_collections:.0f}/{p.load.gc_collections:.0f}",
        )
    notes = [f"{why} (at {', '.join(at)})" for why, at in failures.items()]
    if any(p.engine == WALK for p in points):
        notes.append(f"{WALK}: Python reads every object's attributes once (no engine)")
    if notes:
        times.caption = "; ".join(notes)
    parts: list[Any] = [times, space]
    rows = target_rows(points)
    if rows:
        targets = Table(title="targets (per-node growth)", title_justify="left")
        for col in ("engine", "op", "nodes", "growth", WALK, "target", ""):
            targets.add_column(col, justify="left" if col in ("engine", "op") else "right")
        for r in rows:
            targets.add_row(
                r["engine"],
                r["op"],
                f"{r['from']:,} → {r['nodes']:,}",
                _x(r["growth"]),
                _x(r["walk_growth"]),
                f"≤ {r['target']:.2f}x",
                "[green]met[/]" if r["met"] else "[red]short[/]",
            )
        parts.append(targets)
    return Group(*parts)


def to_json(points: Sequence[Point]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "machine": harness.machine_info(),
        "memory": "tracemalloc peak of one run, separate untimed pass",
        "points": [],
        "targets": target_rows(points),
    }
    for p in points:
        entry: dict[str, Any] = {"nodes": p.nodes, "engine": p.engine, "failure": p.failure}
        if p.engine == WALK:
            entry.update(
                {
                    "walk_ns_per_node": p.per_node("save"),
                    "walk_growth": growth(points, p, "save"),
                    "samples_walk_ns": [s.wall_ns for s in p.save.samples],
                }
            )
        elif not p.failure:
            entry.update(
                {
                    "save_ns_per_node": p.per_node("save"),
                    "load_ns_per_node": p.per_node("load"),
                    "save_growth": growth(points, p, "save"),
                    "load_growth": growth(points, p, "load"),
                    "save_spread": p.save.spread(),
                    "load_spread": p.load.spread(),
                    "save_peak_bytes": p.save.peak_bytes,
                    "load_peak_bytes": p.load.peak_bytes,
                    "stream_bytes": p.stream_bytes,
                    "save_gc_collections": p.save.gc_collections,
                    "load_gc_collections": p.load.gc_collections,
                    "samples_save_ns": [s.wall_ns for s in p.save.samples],
                    "samples_load_ns": [s.wall_ns for s in p.load.samples],
                }
            )
        doc["points"].append(entry)
    return doc


def go_lines(points: Sequence[Point]) -> list[str]:
    """Go benchmark lines for benchstat: one per (size, engine, save/load)."""
    lines = []
    for p in points:
        if p.failure:
            continue
        walk = p.engine == WALK  # one line, no memory pass, no stream
        runs = (
            [(f"Walk/nodes={p.nodes}", p.save)]
            if walk
            else [
                (f"{op}/nodes={p.nodes}/{p.engine}", r)
                for op, r in (("GraphSave", p.save), ("GraphLoad", p.load))
            ]
        )
        for what, res in runs:
            name = harness._go_name(f"BenchmarkStateScale/{what}")
            parts = [
                name,
                str(len(res.samples)),
                f"{res.wall_ns:.0f} ns/op",
                f"{res.wall_ns / p.nodes:.1f} ns/node",
            ]
            if res.peak_bytes is not None:
                parts.append(f"{res.peak_bytes} B/op")
            if not walk:
                parts.append(f"{p.stream_bytes:.0f} stream-B")
            lines.append("\t".join(parts))
    return lines
