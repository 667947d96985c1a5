"""``ckpt bench scale``: what checkpoint and restore cost as a sandbox grows.

For each workload size — ``files:N`` and ``graph:N`` by object count, ``memory:N`` by
MiB — a real sandbox is booted, checkpointed (left running, so its RSS can be read
after) and restored eagerly into a new sandbox; ``memory:N`` is also restored with
``--background``, and its first answer is timed against the eager restore's.  Per size:

- boot, checkpoint and restore wall time and CPU (from the sandbox's cgroup, else the
  process), and the same per object (per N) or per MiB;
- the sandbox's RSS before the checkpoint, its peak growth during it (VmHWM after
  resetting it through ``/proc/PID/clear_refs``), and the restored sandbox's peak RSS;
- page throughput: stored page bytes over the checkpoint's page time, beside zstandard
  alone compressing the very same runs (read back from the image) at the same level on
  as many threads as the checkpoint's pool, in the same run.

Sizes run one after the other, each ``count`` times (medians); a size that fails (a
boot past the sandbox's 120 s limit, say) is reported as failed and the rest go on.

Why one file: as each suite under ``ckpt/bench/``, it is one module per
``ckpt bench`` command: measuring, summarizing, judging, rendering, Go benchmark lines
and the plot all read the same ``Point`` fields, so a new measure is added in one place.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ckpt.errors import CkptError

MiB = 1 << 20
DEFAULT_FILES = (1000, 10_000, 100_000)
DEFAULT_GRAPHS = (1000, 4000, 16_000, 100_000)
DEFAULT_MEMORY = (16, 64, 256, 1024)
RSS_GROWTH_TARGET = 64 * MiB
THROUGHPUT_TARGET = 0.50
BACKGROUND_TARGET = 0.20
PER_OBJECT_TARGET = 1.5


class ScaleError(CkptError):
    """A ``ckpt bench scale`` option that cannot be run."""


@dataclass
class Point:
    """One workload size, medians over its repetitions."""

    workload: str
    kind: str  # files, graph or memory
    size: int  # objects (N) or MiB
    reps: int = 0
    error: str | None = None
    boot_ns: float = 0.0
    boot_cpu_ns: float = 0.0  # the sandbox process's CPU from its start to booted
    checkpoint_ns: float = 0.0
    checkpoint_cpu_ns: float = 0.0
    restore_ns: float = 0.0
    restore_cpu_ns: float = 0.0
    rss_before: int = 0
    rss_growth: int = 0  # peak during the checkpoint, above rss_before
    restore_peak_rss: int = 0
    objects: int | None = None  # objects in the state stream
    state_bytes: int | None = None
    pages_stored: int = 0
    pages_img_bytes: int = 0
    pages_ns: float = 0.0  # the checkpoint's page dump and write
    zstd_ns: float = 0.0  # zstandard alone on the same runs
    eager_first_ns: float | None = None  # restore start to the first HTTP answer
    background_first_ns: float | None = None
    digest_ok: bool | None = None  # memory: the restored digests match the original
    samples: dict[str, list[float]] = field(default_factory=dict)

    @property
    def unit(self) -> str:
        return "MiB" if self.kind == "memory" else "obj"

    def per_unit(self, ns: float) -> float:
        return ns / self.size if self.size else float("nan")

    @property
    def stored_bytes(self) -> int:
        return self.pages_stored * 4096

    @property
    def pipeline_mibs(self) -> float | None:
        return self.stored_bytes / MiB / (self.pages_ns / 1e9) if self.pages_ns else None

    @property
    def zstd_mibs(self) -> float | None:
        return self.stored_bytes / MiB / (self.zstd_ns / 1e9) if self.zstd_ns else None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["unit"] = self.unit
        for name in ("boot_ns", "boot_cpu_ns", "checkpoint_ns", "restore_ns", "checkpoint_cpu_ns"):
            d[name.replace("_ns", "_ns_per_" + self.unit)] = self.per_unit(getattr(self, name))
        d["pipeline_mib_s"] = self.pipeline_mibs
        d["zstd_mib_s"] = self.zstd_mibs
        return d


def parse_sizes(text: str, what: str) -> list[int]:
    """``"1000,10000"`` as [1000, 10000]; empty means none."""
    sizes = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        if not part:
            continue
        try:
            value = int(part[:-1]) * 1000 if part[-1:] in "kK" else int(part)
        except ValueError:
            raise ScaleError(f"--{what}: {part!r} is not a size; give e.g. 1000,10k") from None
        if value < 1:
            raise ScaleError(f"--{what}: sizes must be at least 1, not {value}")
        sizes.append(value)
    return sizes


# -- measuring one sandbox ---------------------------------------------------------------


def _status_kib(pid: int, field_name: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _process_cpu_ns(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") * 1e9


def _reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (Linux ``clear_refs`` 5)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _get(st: Any, path: str = "/") -> dict[str, Any]:
    from ckpt.sandbox.host.http import get_json

    host, _, port = st.address.rpartition(":")
    status, body = get_json(host, int(port), path, timeout=300)
    if status != 200:
        raise ScaleError(f"{st.id}: GET {path} answered {status}")
    return body


def _zstd_alone(image: Path, level: int, threads: int) -> float:
    """Seconds zstandard alone takes to compress the image's stored runs (same runs,
    same level, ``threads`` threads taking runs in turn)."""
    import zstandard

    from ckpt import statefile

    loaded = statefile.open_image(image).open_pages()
    runs = [raw for _, raw in loaded.stored_runs()]
    if not runs:
        return 0.0
    lock = threading.Lock()
    todo = iter(runs)

    def work() -> None:
        cctx = zstandard.ZstdCompressor(level=level, write_content_size=True)
        while True:
            with lock:
                raw = next(todo, None)
            if raw is None:
                return
            cctx.compress(raw)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - t0


@dataclass
class _Rep:
    values: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def _one(root: Any, workdir: Path, workload: str, tag: str, say: Callable[[str], None]) -> _Rep:
    """Boot, checkpoint (left running), restore eagerly (and in the background for
    memory); every sandbox is deleted before returning."""
    from ckpt.sandbox.client import lifecycle
    from ckpt.statefile.chunks import workers
    from ckpt.statefile.format import DEFAULT_LEVEL

    rep = _Rep()
    v = rep.values
    serves = workload.startswith("memory:")
    ids = [f"scale-{tag}", f"scale-{tag}-r", f"scale-{tag}-b"]
    image = workdir / f"img-{tag}"
    try:
        say(f"{workload}: boot")
        run = lifecycle.run(root, ids[0], workload)
        v["boot_ns"] = run.timings.phases_ns["Run"]
        pid = run.state.pid
        v["boot_cpu_ns"] = _process_cpu_ns(pid)
        digest = _get(run.state, "/memory")["memory_sha256"] if serves else None
        v["rss_before"] = _status_kib(pid, "VmRSS")
        reset = _reset_peak(pid)
        say(f"{workload}: checkpoint")
        ck = lifecycle.checkpoint(root, ids[0], image, leave_running=True)
        peak = _status_kib(pid, "VmHWM")
        v["rss_growth"] = max(0, peak - v["rss_before"]) if reset else float("nan")
        v["checkpoint_ns"] = ck.timings.phases_ns["Checkpoint"]
        v["checkpoint_cpu_ns"] = ck.timings.cpu_usec * 1000
        c = ck.timings.counters
        v["pages_ns"] = float(c.get("memdump_memwrite_time_ms") or 0) * 1e6
        rep.info.update(
            objects=c.get("objects"),
            state_bytes=c.get("state_bytes"),
            pages_stored=int(c.get("pages_stored") or 0),
            pages_img_bytes=int(c.get("pages_img_bytes") or 0),
        )
        lifecycle.delete(root, ids[0], force=True)
        say(f"{workload}: restore")
        t0 = time.perf_counter_ns()
        rs = lifecycle.restore(root, ids[1], image)
        if serves:
            _get(rs.state)
            v["eager_first_ns"] = time.perf_counter_ns() - t0
        v["restore_ns"] = rs.timings.phases_ns["ResumeTotal"]
        v["restore_cpu_ns"] = rs.timings.cpu_usec * 1000
        v["restore_peak_rss"] = _status_kib(rs.state.pid, "VmHWM")
        ok = None
        if serves:
            ok = _get(rs.state, "/memory")["memory_sha256"] == digest
        lifecycle.delete(root, ids[1], force=True)
        if serves:
            say(f"{workload}: background restore")
            t0 = time.perf_counter_ns()
            bg = lifecycle.restore(root, ids[2], image, background=True)
            _get(bg.state)
            v["background_first_ns"] = time.perf_counter_ns() - t0
            ok = ok and _get(bg.state, "/memory")["memory_sha256"] == digest
            lifecycle.delete(root, ids[2], force=True)
            say(f"{workload}: zstandard alone on the same runs")
            v["zstd_ns"] = _zstd_alone(image, DEFAULT_LEVEL, workers()) * 1e9
        rep.info["digest_ok"] = ok
        return rep
    finally:
        for sid in ids:
            with contextlib.suppress(CkptError, OSError):
                if root.exists(sid):
                    lifecycle.delete(root, sid, force=True)
        shutil.rmtree(image, ignore_errors=True)


def measure(
    workload: str,
    count: int,
    root: Any,
    workdir: Path,
    say: Callable[[str], None],
) -> Point:
    """``count`` repetitions of one workload size, as medians."""
    kind, _, n = workload.partition(":")
    point = Point(workload, kind, int(n))
    reps: list[_Rep] = []
    for i in range(count):
        try:
            reps.append(_one(root, workdir, workload, f"{os.getpid()}-{kind}{n}-{i}", say))
        except CkptError as exc:
            point.error = str(exc).splitlines()[0][:200]
            say(f"{workload}: failed: {point.error}")
            break
    point.reps = len(reps)
    if not reps:
        return point
    for name in reps[0].values:
        samples = [r.values[name] for r in reps if name in r.values]
        point.samples[name] = samples
        value = statistics.median(samples)
        setattr(point, name, int(value) if isinstance(getattr(point, name), int) else value)
    for name, value in reps[-1].info.items():
        setattr(point, name, value)
    if any(r.info.get("digest_ok") is False for r in reps):
        point.digest_ok = False
    return point


def run(
    files: Sequence[int] = DEFAULT_FILES,
    graphs: Sequence[int] = DEFAULT_GRAPHS,
    memory: Sequence[int] = DEFAULT_MEMORY,
    *,
    count: int = 1,
    workdir: Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Every size of every kind; returns {"points": [...], "summary": {...}, "machine"}."""
    from ckpt.bench.harness import machine_info
    from ckpt.sandbox.wire.paths import Root

    if count < 1:
        raise ScaleError("--count must be at least 1")
    workloads = (
        [f"files:{n}" for n in files]
        + [f"graph:{n}" for n in graphs]
        + [f"memory:{n}" for n in memory]
    )
    if not workloads:
        raise ScaleError("nothing to run: give sizes to --files, --graphs or --memory")
    t_start = time.perf_counter()

    def say(msg: str) -> None:
        if progress:
            sys.stderr.write(f"[{time.perf_counter() - t_start:7.1f} s] scale: {msg}\n")
            sys.stderr.flush()

    own = workdir is None
    base = Path(tempfile.mkdtemp(prefix="ckpt-scale-")) if own else Path(workdir)  # type: ignore[arg-type]
    base.mkdir(parents=True, exist_ok=True)
    root = Root(base / "root")
    try:
        points = [measure(w, count, root, base, say) for w in workloads]
    finally:
        from ckpt.sandbox.client import template_client

        template_client.stop(root.path)  # restores fork from it; it must not outlive us
        if own:
            shutil.rmtree(base, ignore_errors=True)
    return {"points": points, "summary": summarize(points), "machine": machine_info()}


# -- what the figures say -----------------------------------------------------------


def _growth(points: Sequence[Point], kind: str, attr: str) -> dict[str, Any] | None:
    """Per-unit cost at the largest size over the smallest (1.0: linear)."""
    ok = [p for p in points if p.kind == kind and p.reps and getattr(p, attr)]
    if len(ok) < 2:
        return None
    lo, hi = ok[0], ok[-1]
    ratio = hi.per_unit(getattr(hi, attr)) / lo.per_unit(getattr(lo, attr))
    return {"from": lo.workload, "to": hi.workload, "ratio": ratio}


def _marginal(points: Sequence[Point], kind: str, attr: str) -> dict[str, Any] | None:
    """Cost of one more object between the two largest sizes over that between the two
    smallest: the fixed cost of a sandbox (spawn, imports) cancels out, so 1.0 is
    linear even where a small sandbox's per-object figure is mostly fixed cost."""
    ok = [p for p in points if p.kind == kind and p.reps and getattr(p, attr)]
    if len(ok) < 3:
        return None

    def slope(a: Point, b: Point) -> float:
        return (getattr(b, attr) - getattr(a, attr)) / (b.size - a.size)

    lo, hi = slope(ok[0], ok[1]), slope(ok[-2], ok[-1])
    return {
        "from": f"{_n(ok[0].size)}..{_n(ok[1].size)}",
        "to": f"{_n(ok[-2].size)}..{_n(ok[-1].size)}",
        "ns_from": lo,
        "ns_to": hi,
        "ratio": hi / lo if lo > 0 else float("nan"),
    }


def summarize(points: Sequence[Point]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("files", "graph", "memory"):
        for attr in ("boot_ns", "boot_cpu_ns", "checkpoint_ns", "restore_ns"):
            g = _growth(points, kind, attr)
            if g is not None:
                out[f"{kind}_{attr[:-3]}_per_unit_growth"] = g
            m = _marginal(points, kind, attr)
            if m is not None:
                out[f"{kind}_{attr[:-3]}_marginal_growth"] = m
    mem = [p for p in points if p.kind == "memory" and p.reps]
    if mem:
        big = mem[-1]
        out["rss_growth_largest"] = {"workload": big.workload, "bytes": big.rss_growth}
        ratios = [
            (p.workload, p.pipeline_mibs / p.zstd_mibs)
            for p in mem
            if p.pipeline_mibs and p.zstd_mibs
        ]
        if ratios:
            out["throughput_vs_zstd"] = dict(ratios)
        bg = [
            (p.workload, p.background_first_ns / p.eager_first_ns)
            for p in mem
            if p.background_first_ns and p.eager_first_ns
        ]
        if bg:
            out["background_first_vs_eager"] = dict(bg)
        out["digests_ok"] = all(p.digest_ok for p in mem)
    return out


def verdicts(summary: dict[str, Any]) -> list[str]:
    """One line per scale goal: the figure, the target, met or not."""
    lines = []
    g = summary.get("graph_boot_per_unit_growth")
    if g:
        lines.append(
            f"boot per object {g['from']} -> {g['to']}: {g['ratio']:.2f}x "
            f"(<= {PER_OBJECT_TARGET}x) {_mark(g['ratio'] <= PER_OBJECT_TARGET)}"
        )
    for kind in ("files", "graph"):
        for phase in ("boot", "boot_cpu", "checkpoint", "restore"):
            g = summary.get(f"{kind}_{phase}_per_unit_growth")
            what = phase.replace("_cpu", " CPU")
            if g and (kind, phase) != ("graph", "boot"):
                lines.append(f"{what} per object {g['from']} -> {g['to']}: {g['ratio']:.2f}x")
            m = summary.get(f"{kind}_{phase}_marginal_growth")
            if m and m["ns_from"] > 0 and m["ns_to"] > 0:
                lines.append(
                    f"  one more object: {_t(m['ns_from'])} ({m['from']}) -> "
                    f"{_t(m['ns_to'])} ({m['to']}): {m['ratio']:.2f}x"
                )
    r = summary.get("rss_growth_largest")
    if r and r["bytes"] == r["bytes"]:
        ok = r["bytes"] <= RSS_GROWTH_TARGET
        lines.append(
            f"RSS growth in checkpoint, {r['workload']}: {r['bytes'] / MiB:.1f} MiB "
            f"(<= 64 MiB) {_mark(ok)}"
        )
    for workload, ratio in (summary.get("throughput_vs_zstd") or {}).items():
        lines.append(
            f"page throughput, {workload}: {ratio:.0%} of zstd alone "
            f"(>= {THROUGHPUT_TARGET:.0%}) {_mark(ratio >= THROUGHPUT_TARGET)}"
        )
    for workload, ratio in (summary.get("background_first_vs_eager") or {}).items():
        lines.append(
            f"--background 1st answer, {workload}: {ratio:.2f}x eager "
            f"(<= {BACKGROUND_TARGET}x) {_mark(ratio <= BACKGROUND_TARGET)}"
        )
    if "digests_ok" in summary:
        lines.append(f"restored memory digests match: {_mark(summary['digests_ok'])}")
    return lines


def _mark(ok: bool) -> str:
    return "ok" if ok else "MISSED"


# -- rendering --------------------------------------------------------------------------


def _n(size: int) -> str:
    """1000 as 1k, 1000000 as 1M: sizes short enough for one verdict line."""
    for div, suffix in ((1_000_000, "M"), (1000, "k")):
        if size >= div and size % div == 0:
            return f"{size // div}{suffix}"
    return str(size)


def _t(ns: float | None) -> str:
    if ns is None or ns != ns:
        return "-"
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def _b(n: float | None) -> str:
    if n is None or n != n:
        return "-"
    return f"{n / MiB:.1f} MiB"


def _r(x: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if x is None or x != x else fmt.format(x)


def render(result: dict[str, Any]) -> Any:
    """Rich tables (each within 80 columns) and the verdict lines."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    points: list[Point] = result["points"]
    times = Table(title="bench scale: wall and CPU (medians)", title_justify="left")
    for col in ("workload", "boot", "ckpt", "ckpt CPU", "restore", "restore CPU"):
        times.add_column(col, justify="left" if col == "workload" else "right")
    unit = Table(title="per object (files, graph) or per MiB (memory)", title_justify="left")
    for col in ("workload", "boot", "boot CPU", "ckpt", "restore", "objects"):
        unit.add_column(col, justify="left" if col == "workload" else "right")
    rss = Table(title="sandbox memory", title_justify="left")
    for col in ("workload", "RSS before", "ckpt growth", "restored peak"):
        rss.add_column(col, justify="left" if col == "workload" else "right")
    for p in points:
        if not p.reps:
            times.add_row(Text(p.workload), "failed", "", "", "", "")
            continue
        times.add_row(
            Text(p.workload),
            _t(p.boot_ns),
            _t(p.checkpoint_ns),
            _t(p.checkpoint_cpu_ns),
            _t(p.restore_ns),
            _t(p.restore_cpu_ns),
        )
        unit.add_row(
            Text(f"{p.workload} /{p.unit}"),
            _t(p.per_unit(p.boot_ns)),
            _t(p.per_unit(p.boot_cpu_ns)),
            _t(p.per_unit(p.checkpoint_ns)),
            _t(p.per_unit(p.restore_ns)),
            _r(p.objects),
        )
        rss.add_row(Text(p.workload), _b(p.rss_before), _b(p.rss_growth), _b(p.restore_peak_rss))
    parts: list[Any] = [times, unit, rss]
    mem = [p for p in points if p.kind == "memory" and p.reps]
    if mem:
        pages = Table(title="pages at checkpoint, and --background", title_justify="left")
        for col in ("workload", "stored", "ckpt MiB/s", "zstd MiB/s", "ratio", "bg/eager 1st"):
            pages.add_column(col, justify="left" if col == "workload" else "right")
        for p in mem:
            ratio = p.pipeline_mibs / p.zstd_mibs if p.pipeline_mibs and p.zstd_mibs else None
            bg = (
                p.background_first_ns / p.eager_first_ns
                if p.background_first_ns and p.eager_first_ns
                else None
            )
            pages.add_row(
                Text(p.workload),
                _b(p.stored_bytes),
                _r(p.pipeline_mibs),
                _r(p.zstd_mibs),
                _r(ratio, "{:.0%}"),
                _r(bg, "{:.2f}x"),
            )
        parts.append(pages)
    failed = [f"{p.workload}: failed: {p.error}" for p in points if not p.reps]
    parts.append(Text("\n".join(failed + verdicts(result["summary"]))))
    return Group(*parts)


def go_lines(result: dict[str, Any]) -> list[str]:
    """Go benchmark lines (one per phase and size) for benchstat."""
    from ckpt.bench.harness import _go_name

    lines = []
    for p in result["points"]:
        if not p.reps:
            continue
        name = _go_name(p.workload.replace(":", "="))
        u = p.unit
        lines.append(
            f"BenchmarkScaleBoot/{name}\t{p.reps}\t{p.boot_ns:.0f} ns/op\t"
            f"{p.boot_cpu_ns:.0f} cpu-ns/op\t{p.per_unit(p.boot_ns):.0f} ns/{u}"
        )
        lines.append(
            f"BenchmarkScaleCheckpoint/{name}\t{p.reps}\t{p.checkpoint_ns:.0f} ns/op\t"
            f"{p.checkpoint_cpu_ns:.0f} cpu-ns/op\t{p.per_unit(p.checkpoint_ns):.0f} ns/{u}\t"
            f"{p.rss_growth if p.rss_growth == p.rss_growth else 0:.0f} rss-growth-B"
        )
        lines.append(
            f"BenchmarkScaleRestore/{name}\t{p.reps}\t{p.restore_ns:.0f} ns/op\t"
            f"{p.restore_cpu_ns:.0f} cpu-ns/op\t{p.per_unit(p.restore_ns):.0f} ns/{u}\t"
            f"{p.restore_peak_rss:.0f} peak-rss-B"
        )
        if p.pipeline_mibs and p.zstd_mibs:
            lines.append(
                f"BenchmarkScalePages/{name}\t{p.reps}\t{p.pages_ns:.0f} ns/op\t"
                f"{p.pipeline_mibs * MiB / 1e6:.1f} MB/s"
            )
            lines.append(
                f"BenchmarkScaleZstd/{name}\t{p.reps}\t{p.zstd_ns:.0f} ns/op\t"
                f"{p.zstd_mibs * MiB / 1e6:.1f} MB/s"
            )
        if p.background_first_ns and p.eager_first_ns:
            lines.append(
                f"BenchmarkScaleFirstAnswer/{name}/eager\t{p.reps}\t{p.eager_first_ns:.0f} ns/op"
            )
            lines.append(
                f"BenchmarkScaleFirstAnswer/{name}/background\t{p.reps}\t"
                f"{p.background_first_ns:.0f} ns/op"
            )
    return lines


def to_json(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "machine": result["machine"],
        "points": [p.as_dict() for p in result["points"]],
        "summary": result["summary"],
        "verdicts": verdicts(result["summary"]),
    }


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or a one-line error saying how."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ScaleError(
            "--plot needs matplotlib: pip install 'ckpt[plot]' (or pip install matplotlib)"
        ) from None
    return plt


def check_plot(path: Path) -> Path:
    """Where ``--plot PATH`` will write its PNG, checked before a run that can take minutes.

    matplotlib must import and PATH's directory must exist, so a long run never ends in a
    failed plot.  A PATH without a suffix gets ``.png``; another suffix is refused."""
    path = Path(path)
    if path.suffix == "":
        path = path.with_suffix(".png")
    elif path.suffix.lower() != ".png":
        raise ScaleError(f"--plot {path}: the plot is a PNG; give a path ending in .png")
    parent = path.resolve().parent
    if not parent.is_dir():
        raise ScaleError(f"--plot {path}: directory {parent} does not exist; create it first")
    _pyplot()
    return path.resolve()


def plot(result: dict[str, Any], path: Path) -> Path:
    """Cost against size on log axes, written as a PNG; returns the file written.

    Call check_plot(path) before the run and pass what it returned."""
    plt = _pyplot()
    points: list[Point] = [p for p in result["points"] if p.reps]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    phases = (
        ("boot_ns", "boot"),
        ("boot_cpu_ns", "boot CPU"),
        ("checkpoint_ns", "checkpoint"),
        ("restore_ns", "restore"),
    )
    ax = axes[0]
    for kind, marker in (("files", "o"), ("graph", "s")):
        pts = [p for p in points if p.kind == kind]
        for attr, label in phases:
            if pts:
                ax.plot(
                    [p.size for p in pts],
                    [p.per_unit(getattr(p, attr)) / 1e3 for p in pts],
                    marker=marker,
                    label=f"{kind} {label}",
                )
    ax.set(xscale="log", yscale="log", xlabel="objects (N)", ylabel="µs per object")
    ax.set_title("cost per object")
    ax.legend(fontsize=7)
    mem = [p for p in points if p.kind == "memory"]
    ax = axes[1]
    for attr, label in phases:
        if mem:
            ax.plot(
                [p.size for p in mem],
                [p.per_unit(getattr(p, attr)) / 1e6 for p in mem],
                marker="o",
                label=label,
            )
    if mem:
        ax.plot(
            [p.size for p in mem],
            [p.rss_growth / MiB for p in mem],
            marker="^",
            linestyle="--",
            label="RSS growth in ckpt (MiB)",
        )
    ax.set(xscale="log", yscale="log", xlabel="memory (MiB)", ylabel="ms per MiB")
    ax.set_title("cost per MiB")
    ax.legend(fontsize=7)
    ax = axes[2]
    if mem:
        sizes = [p.size for p in mem]
        ax.plot(sizes, [p.pipeline_mibs or float("nan") for p in mem], marker="o", label="ckpt")
        ax.plot(sizes, [p.zstd_mibs or float("nan") for p in mem], marker="s", label="zstd alone")
    ax.set(xscale="log", xlabel="memory (MiB)", ylabel="MiB/s of stored pages")
    ax.set_title("page throughput")
    ax.legend(fontsize=7)
    fig.suptitle(f"ckpt bench scale — {result['machine'].get('cpu', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return Path(path)
