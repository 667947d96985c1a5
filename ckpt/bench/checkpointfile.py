"""``ckpt bench checkpointfile``: gVisor's CheckpointFile, and per-type stats' cost.

CheckpointFile (gVisor's ``//test/benchmarks/checkpointfile``): build the idle ``nginx``
workload (a master and 4 workers), checkpoint it once per engine through the real
statefile writer (zstd compression, integrity tags, fsync and rename: not a counting
writer, so the engines pay what a user pays), then, repeated and interleaved (A B B A ...):

* ``Decode``: open that image and load the kernel from it (decompression included);
* ``Encode``: save the decoded kernel again through a fresh ``ImageWriter``;
* ``DecodeStream`` / ``EncodeStream``: the same from and to bytes in memory, which
  isolates the engines from the file and compression costs.

Bytes reported: state file (compressed ``checkpoint.img``), pages file, page metadata
and the encoded kernel (uncompressed object stream).  ``Files20000`` saves and loads the
``files:20000`` kernel (20000 open regular files, an object-heavy case) with the
typed engine, with per-type statistics on and off.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckpt import kernel, state, statefile
from ckpt.bench import harness

TARGETS = {
    "Encode": 0.25,
    "Decode": 0.36,
    "EncodeStream": 0.25,  # the same goals without the file, compression and fsync
    "DecodeStream": 0.36,
}
NATIVE_TARGETS = {"Encode": 0.10, "Decode": 0.15}  # the native engine's goals, vs reflect
STATE_FILE_TARGET = 0.63
STATS_TARGET = 1.15


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def write_image(k: kernel.Kernel, target: Path, engine: str, *, pages: bool) -> dict[str, float]:
    """Checkpoint ``k`` into ``target``; returns the sizes of what was written."""
    with statefile.ImageWriter(target, force=True, metadata={"workload": k.workload}) as img:
        result = state.save(k, img.state_file, engine=engine)
        if pages:
            img.write_pages(k.memory_file.pages())
    return {
        "state-file-B": _size(target / "checkpoint.img"),
        "pages-file-B": _size(target / "pages.img"),
        "pages-metadata-B": _size(target / "pages_meta.img"),
        "encoded-kernel-B": result.bytes,
        "objects": result.objects,
    }


def load_image(target: Path, engine: str) -> kernel.Kernel:
    return state.load(statefile.open_image(target).state_reader(), engine=engine)


def checkpointfile_cases(
    workdir: Path, workers: int = 4
) -> tuple[list[harness.Case], dict[str, dict[str, float]]]:
    """The CheckpointFile cases; images are written once per engine into ``workdir``."""
    k = kernel.build_workload("nginx", workers=workers)
    k.pause()
    sizes: dict[str, dict[str, float]] = {}
    cases: list[harness.Case] = []
    for engine in state.ENGINES:
        image = workdir / f"nginx-{engine}"
        sizes[engine] = write_image(k, image, engine, pages=True)
        stream = state.dumps(k, engine=engine)
        decoded = load_image(image, engine)
        again = workdir / f"encode-{engine}"
        figures = sizes[engine]
        cases += [
            harness.Case(
                "Decode",
                engine,
                _bind(load_image, image, engine),
                extras=_const(figures),
            ),
            harness.Case(
                "Encode",
                engine,
                _bind(_encode_to_image, decoded, again, engine),
                bytes_of=lambda n: n,
                extras=_const({"state-file-B": figures["state-file-B"]}),
            ),
            harness.Case("DecodeStream", engine, _bind(state.loads, stream, engine)),
            harness.Case(
                "EncodeStream",
                engine,
                _bind(state.dumps, decoded, engine),
                bytes_of=len,
                extras=_const({"encoded-kernel-B": len(stream)}),
            ),
        ]
    return cases, sizes


def _encode_to_image(k: kernel.Kernel, target: Path, engine: str) -> int:
    with statefile.ImageWriter(target, force=True) as img:
        state.save(k, img.state_file, engine=engine)
    return _size(target / "checkpoint.img")


def stats_cases(files: int = 20000) -> list[harness.Case]:
    """Save and load ``files:N`` with the typed engine, per-type stats on and off."""
    k = kernel.build_workload(f"files:{files}")
    k.pause()
    data = state.dumps(k, engine="typed")
    name = f"Files{files}"
    return [
        harness.Case(
            f"{name}Save", "stats-off", lambda: state.dumps(k, engine="typed"), bytes_of=len
        ),
        harness.Case(
            f"{name}Save",
            "stats-on",
            lambda: state.dumps(k, engine="typed", stats=state.Stats()),
            bytes_of=len,
        ),
        harness.Case(f"{name}Load", "stats-off", lambda: state.loads(data, engine="typed")),
        harness.Case(
            f"{name}Load",
            "stats-on",
            lambda: state.loads(data, engine="typed", stats=state.Stats()),
        ),
    ]


def _reachable(names: list[str], pattern: str | None) -> bool:
    return pattern is None or any(pattern in name for name in names)


def _bind(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return lambda: fn(*args)


def _const(values: dict[str, float]) -> Callable[[Any], dict[str, float]]:
    return lambda _result: dict(values)


def run(
    *,
    count: int = 5,
    filter: str | None = None,
    files: int = 20000,
    workers: int = 4,
    memory: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Run both suites; returns results, image sizes and the target rows."""
    stats_names = [
        f"Files{files}{op}/{v}" for op in ("Save", "Load") for v in ("stats-off", "stats-on")
    ]
    cpf_names = [f"{n}/{e}" for n in TARGETS for e in state.ENGINES]
    # Images go to tmpfs when there is one: the benchmark writes through the real
    # statefile writer (compression, integrity) but not to a disk, so fsync latency of a
    # shared disk would only hide the engines' difference behind a constant.
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-cpf-", dir=shm) as tmp:
        cases: list[harness.Case] = []
        sizes: dict[str, dict[str, float]] = {}
        # Build only the kernels a --filter can reach (files:20000 takes seconds).
        if _reachable(cpf_names, filter):
            cpf, sizes = checkpointfile_cases(Path(tmp), workers)
            cases += cpf
        if files > 0 and _reachable(stats_names, filter):
            cases += stats_cases(files)
        if not cases:
            names = ", ".join(cpf_names + (stats_names if files > 0 else []))
            raise harness.BenchError(
                f"--filter {filter!r} matches no benchmark; there are: {names}"
            )
        chosen = harness.select(cases, filter)
        results = harness.run_interleaved(chosen, count=count, memory=memory, progress=progress)
    cpf_results = [r for r in results if not r.name.startswith("Files")]
    stats_results = [r for r in results if r.name.startswith("Files")]
    return {
        "checkpointfile": cpf_results,
        "stats": stats_results,
        "sizes": sizes,
        "targets": target_rows(cpf_results, stats_results, sizes),
    }


def target_rows(
    cpf: list[harness.Result], stats: list[harness.Result], sizes: dict[str, dict[str, float]]
) -> list[dict[str, Any]]:
    """The CheckpointFile and stats goals, with what this run measured."""
    rows = []
    goals = [("typed", n, g) for n, g in TARGETS.items()]
    goals += [("native", n, g) for n, g in NATIVE_TARGETS.items()]
    for engine, name, goal in goals:
        for attr in ("wall_ns", "cpu_ns"):
            value = harness.ratio(cpf, name, engine, "reflect", attr)
            if value == value:
                label = "time" if attr == "wall_ns" else "CPU"
                rows.append(_row(f"{name} {label} {engine}/reflect", value, goal))
    if "typed" in sizes and "reflect" in sizes:
        value = sizes["typed"]["state-file-B"] / sizes["reflect"]["state-file-B"]
        rows.append(_row("state file typed/reflect", value, STATE_FILE_TARGET))
    for op in ("Save", "Load"):
        names = {r.name for r in stats if r.name.endswith(op)}
        for name in sorted(names):
            for attr, label in (("wall_ns", "time"), ("cpu_ns", "CPU")):
                value = harness.ratio(stats, name, "stats-on", "stats-off", attr)
                if value == value:
                    rows.append(_row(f"{name} {label} stats on/off", value, STATS_TARGET))
    return rows


def _row(what: str, value: float, goal: float) -> dict[str, Any]:
    return {"target": what, "measured": round(value, 3), "goal": f"<= {goal}", "met": value <= goal}


def render_targets(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="targets")
    for col in ("target", "measured", "goal", "met"):
        table.add_column(col)
    for row in rows:
        table.add_row(
            row["target"], f"{row['measured']:.3f}", row["goal"], "yes" if row["met"] else "NO"
        )
    return table


def render_sizes(sizes: dict[str, dict[str, float]]) -> Any:
    from rich.table import Table

    table = Table(title="checkpoint of idle nginx (written once per engine), bytes")
    keys = ["state-file-B", "pages-file-B", "pages-metadata-B", "encoded-kernel-B", "objects"]
    heads = ["checkpoint.img", "pages.img", "page meta", "stream (raw)", "objects"]
    table.add_column("engine")
    for head in heads:  # short headers: the table fits 80 columns
        table.add_column(head, justify="right", overflow="fold")
    for engine, figures in sizes.items():
        table.add_row(engine, *(f"{figures[k]:,.0f}" for k in keys))
    return table
