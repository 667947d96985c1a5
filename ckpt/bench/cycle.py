"""``ckpt cycle``: the checkpoint/restore cycle harness.

For each CPU quota, the running sandbox is checkpointed (stopping it) and restored into
a new sandbox of the same ID, ``count`` times per engine, with engines interleaved ABBA
(A B B A A B ...) so drift on a shared machine hits them alike.  The sandbox's cgroup
quota is set before the first cycle of each quota, so both checkpoint and restore run
under it.  Per quota and phase it reports the median, the spread, the ratio to the first
(baseline) engine and a two-sided Mann-Whitney U p-value, as benchstat does; and
CPUPerCycle (checkpoint CPU + restore CPU, from the cgroup).  SandboxCreate is also
compared with the start of a bare ``python -c pass``.  Afterwards the sandbox is put
back under the quota it had before.

Go benchmark lines carry one line per cycle so benchstat can do its own statistics.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpt.engines import ENGINE_NAMES
from ckpt.errors import CkptError, SandboxError
from ckpt.sandbox.client import lifecycle
from ckpt.sandbox.wire.paths import Root
from ckpt.sandbox.wire.timings import (
    CHECKPOINT,
    RESTORE,
    RESUME_TOTAL,
    SANDBOX_CREATE,
    SUSPEND_TOTAL,
)

CPU_PER_CYCLE = "CPUPerCycle"
PHASES = (CHECKPOINT, SUSPEND_TOTAL, SANDBOX_CREATE, RESTORE, RESUME_TOTAL, CPU_PER_CYCLE)
# typed/reflect goals; SandboxCreate is checked against python start-up.
TARGETS = {CHECKPOINT: 0.50, RESTORE: 0.60, CPU_PER_CYCLE: 0.67}
SANDBOX_CREATE_TARGET = 3.0
# in-sandbox counters kept per cycle, to show where Checkpoint and ResumeTotal go
BREAKDOWN = (
    "state_dump_time_ms",
    "memdump_memwrite_time_ms",
    "commit_time_ms",
    "frozen_time_ms",
    "import_ms",
    "restore_state_ms",
    "restore_pages_ms",
)


def quota_label(quota: float | None) -> str:
    return "uncapped" if quota is None else f"{quota:g}"


@dataclass
class Plan:
    """What to run: validated options of ``ckpt cycle``."""

    sandbox_id: str
    image_dir: Path
    count: int
    quotas: list[float | None]
    hold: float
    engines: list[str]
    # restores fork from the warm template (ckpt --no-template turns it off)
    template: bool = True

    @property
    def start(self) -> str:
        return "warm template" if self.template else "cold start"

    @classmethod
    def parse(
        cls, sandbox_id: str, image_dir: Path, *, count: int, cpu: str, hold: float, engines: str
    ) -> Plan:
        quotas = [lifecycle.parse_cpu(q.strip()) for q in cpu.split(",") if q.strip()]
        names = [e.strip() for e in engines.split(",") if e.strip()]
        if not quotas:
            raise SandboxError("--cpu: give at least one quota, e.g. uncapped,1,0.25")
        if not names or len(set(names)) != len(names):
            raise SandboxError("--engines: give distinct engine names, e.g. typed,reflect")
        for name in names:
            if name not in ENGINE_NAMES:
                raise SandboxError(
                    f"--engines: unknown engine {name!r}; choose from {', '.join(ENGINE_NAMES)}"
                )
        if count < 1:
            raise SandboxError("--count must be at least 1")
        if hold < 0:
            raise SandboxError("--hold must not be negative")
        from ckpt.sandbox.client import template_client

        return cls(
            sandbox_id, Path(image_dir), count, quotas, hold, names, not template_client.disabled()
        )

    def order(self) -> list[str]:
        """ABBA: the engine order reverses every block (A B, B A, A B, ...)."""
        seq: list[str] = []
        for i in range(self.count):
            seq.extend(self.engines if i % 2 == 0 else reversed(self.engines))
        return seq


@dataclass
class Sample:
    quota: str
    engine: str
    values_ns: dict[str, float]
    # where the time went inside the sandbox (ms): state dump/load, pages, module import
    breakdown_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class Row:
    quota: str
    phase: str
    engine: str
    n: int
    median_ns: float
    spread: float
    ratio: float | None
    p_value: float | None
    target: float | None = None


@dataclass
class Report:
    plan: Plan
    samples: list[Sample] = field(default_factory=list)
    python_start_ns: list[float] = field(default_factory=list)

    def values(self, quota: str, engine: str, phase: str) -> list[float]:
        return [
            s.values_ns[phase]
            for s in self.samples
            if s.quota == quota and s.engine == engine and phase in s.values_ns
        ]

    def rows(self) -> list[Row]:
        base = self.plan.engines[0]
        out = []
        for quota in (quota_label(q) for q in self.plan.quotas):
            for phase in PHASES:
                base_vals = self.values(quota, base, phase)
                for engine in self.plan.engines:
                    vals = self.values(quota, engine, phase)
                    if not vals:
                        continue
                    med = statistics.median(vals)
                    ratio = p = None
                    if engine != base and base_vals and statistics.median(base_vals):
                        ratio = med / statistics.median(base_vals)
                        p = mann_whitney_p(vals, base_vals)
                    target = TARGETS.get(phase) if (engine, base) == ("typed", "reflect") else None
                    out.append(
                        Row(quota, phase, engine, len(vals), med, spread(vals), ratio, p, target)
                    )
        return out

    def sandbox_create_ratio(self, quota: str) -> float | None:
        """Median SandboxCreate over median bare-python start (all engines)."""
        vals = [s.values_ns[SANDBOX_CREATE] for s in self.samples if s.quota == quota]
        if not vals or not self.python_start_ns:
            return None
        return statistics.median(vals) / statistics.median(self.python_start_ns)

    def to_json(self) -> dict[str, Any]:
        from ckpt.bench.harness import machine_info

        return {
            "sandbox": self.plan.sandbox_id,
            "count": self.plan.count,
            "quotas": [quota_label(q) for q in self.plan.quotas],
            "engines": self.plan.engines,
            "baseline": self.plan.engines[0],
            "hold_s": self.plan.hold,
            "template": self.plan.template,
            "machine": machine_info(),
            "python_start_ns": self.python_start_ns,
            "sandbox_create_vs_python": {
                quota_label(q): self.sandbox_create_ratio(quota_label(q)) for q in self.plan.quotas
            },
            "rows": [r.__dict__ for r in self.rows()],
            "samples": [s.__dict__ for s in self.samples],
        }


# -- statistics ------------------------------------------------------------------------


def spread(values: Sequence[float]) -> float:
    """Half the interquartile range over the median (as the shared harness reports it)."""
    vals = sorted(values)
    med = statistics.median(vals)
    if len(vals) < 4:
        lo, hi = vals[0], vals[-1]
    else:
        q = statistics.quantiles(vals, n=4)
        lo, hi = q[0], q[2]
    return (hi - lo) / 2 / med if med else 0.0


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U test p-value (normal approximation, tie-corrected).

    benchstat uses this test to say whether two sets of runs differ; with few samples
    the normal approximation is rough but errs towards larger p-values.
    """
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    n = n1 + n2
    rank_sum_a = 0.0
    tie_term = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        avg_rank = (i + j) / 2 + 1
        t = j - i + 1
        tie_term += t**3 - t
        rank_sum_a += avg_rank * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        i = j + 1
    u1 = rank_sum_a - n1 * (n1 + 1) / 2
    mu = n1 * n2 / 2
    var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return 1.0
    z = max(0.0, abs(u1 - mu) - 0.5) / math.sqrt(var)
    return min(1.0, math.erfc(z / math.sqrt(2)))


# -- running ---------------------------------------------------------------------------


def python_start_ns(repeats: int) -> list[float]:
    """Wall time of ``python -c pass`` (spawn to exit), the SandboxCreate yardstick."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        out.append(float(time.perf_counter_ns() - t0))
    return out


def _set_quota(root: Root, sandbox_id: str, quota: float | None) -> bool:
    """Put the running sandbox under ``quota``; returns whether it uses a cgroup."""
    return lifecycle.set_cpu(root, sandbox_id, quota).cgroup is not None


def run(root: Root, plan: Plan, console: Any = None) -> Report:
    """Run every cycle; show a rich progress bar on ``console`` when given."""
    st = lifecycle.state(root, plan.sandbox_id)
    if st.status != "running":
        raise SandboxError(f"sandbox {plan.sandbox_id} is {st.status}; cycle needs it running")
    plan.image_dir.mkdir(parents=True, exist_ok=True)
    report = Report(plan)
    report.python_start_ns = python_start_ns(max(3, plan.count))
    order = plan.order()
    total = len(plan.quotas) * len(order)
    progress = None
    if console is not None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        progress = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        progress.start()
    task = progress.add_task("cycles", total=total) if progress else None
    n = 0
    try:
        for quota in plan.quotas:
            with_cgroup = _set_quota(root, plan.sandbox_id, quota)
            for engine in order:
                label = quota_label(quota)
                if progress is not None:
                    progress.update(task, description=f"cpu={label} {engine}")
                image = plan.image_dir / f"cycle-{n}"
                n += 1
                ck = lifecycle.checkpoint(root, plan.sandbox_id, image, engine=engine, force=True)
                rs = lifecycle.restore(
                    root,
                    plan.sandbox_id,
                    image,
                    cpus=quota,
                    engine=engine,
                    ignore_cgroups=not with_cgroup,
                    template=plan.template,
                )
                shutil.rmtree(image, ignore_errors=True)
                values = {k: float(v) for k, v in ck.timings.phases_ns.items()}
                values.update({k: float(v) for k, v in rs.timings.phases_ns.items()})
                if ck.timings.cpu_usec is not None and rs.timings.cpu_usec is not None:
                    values[CPU_PER_CYCLE] = float(ck.timings.cpu_usec + rs.timings.cpu_usec) * 1e3
                breakdown = {
                    k: float(v)
                    for k, v in {**ck.timings.counters, **rs.timings.counters}.items()
                    if k in BREAKDOWN and isinstance(v, int | float)
                }
                report.samples.append(Sample(label, engine, values, breakdown))
                if progress is not None:
                    progress.advance(task)
                if plan.hold:
                    time.sleep(plan.hold)
    finally:
        if progress is not None:
            progress.stop()
        _put_back(root, plan.sandbox_id, st.cpu)
    return report


def _put_back(root: Root, sandbox_id: str, quota: float | None) -> None:
    """Leave the sandbox under the quota it had before the cycles (the last ``--cpu``
    is a measuring condition, not a setting); quiet when it no longer runs."""
    with contextlib.suppress(CkptError):
        lifecycle.set_cpu(root, sandbox_id, quota)


# -- rendering -------------------------------------------------------------------------


def _fmt_ns(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{ns:.0f} ns"


def render(report: Report) -> Any:
    """A rich table per quota: phase, engine, median, ±, ratio, p, target."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    base = report.plan.engines[0]
    parts: list[Any] = []
    rows = report.rows()
    for quota in (quota_label(q) for q in report.plan.quotas):
        table = Table(
            title=f"cycle cpu={quota}, {report.plan.count} per engine (baseline {base}; "
            f"restores: {report.plan.start})",
            title_justify="left",
        )
        for col, justify in (
            ("phase", "left"),
            ("engine", "left"),
            ("median", "right"),
            ("±", "right"),
            (f"vs {base}", "right"),
            ("p", "right"),
            ("target", "right"),
        ):
            table.add_column(col, justify=justify)
        previous = None
        for r in (r for r in rows if r.quota == quota):
            target = ""
            if r.target is not None and r.ratio is not None:
                ok = r.ratio <= r.target
                target = f"[{'green' if ok else 'red'}]≤ {r.target:.2f} {'✓' if ok else '✗'}[/]"
            table.add_row(
                r.phase if r.phase != previous else "",
                r.engine,
                _fmt_ns(r.median_ns),
                f"{r.spread * 100:.0f}%",
                "-" if r.ratio is None else f"{r.ratio:.2f}",
                "-" if r.p_value is None else f"{r.p_value:.3f}",
                target,
            )
            previous = r.phase
        parts.append(table)
        parts.append(_breakdown_text(report, quota))
        ratio = report.sandbox_create_ratio(quota)
        if ratio is not None:
            ok = ratio <= SANDBOX_CREATE_TARGET
            parts.append(
                Text(
                    f"SandboxCreate = {ratio:.2f}× `python -c pass` "
                    f"({_fmt_ns(statistics.median(report.python_start_ns))}); target ≤ "
                    f"{SANDBOX_CREATE_TARGET:g}× {'✓' if ok else '✗'}",
                    style="green" if ok else "red",
                )
            )
    return Group(*parts)


def _breakdown_text(report: Report, quota: str) -> Any:
    """One dim line: median in-sandbox state dump / load and module import per engine."""
    from rich.text import Text

    items = []
    for engine in report.plan.engines:
        vals = [s.breakdown_ms for s in report.samples if s.quota == quota and s.engine == engine]

        def med(key: str, vals: list[dict[str, float]] = vals) -> str:
            xs = [v[key] for v in vals if key in v]
            return f"{statistics.median(xs):.1f}" if xs else "-"

        items.append(
            f"{engine}: state dump {med('state_dump_time_ms')} ms, state load "
            f"{med('restore_state_ms')} ms, module import {med('import_ms')} ms"
        )
    return Text("inside the sandbox (medians): " + "; ".join(items), style="dim")


def go_lines(report: Report) -> list[str]:
    """One Go benchmark line per cycle: ``BenchmarkCycle/cpu=Q/engine=E 1 <v> Phase-ns/op``."""
    lines = []
    for s in report.samples:
        start = "template" if report.plan.template else "cold"
        parts = [f"BenchmarkCycle/start={start}/cpu={s.quota}/engine={s.engine}", "1"]
        parts += [f"{s.values_ns[p]:.0f} {p}-ns/op" for p in PHASES if p in s.values_ns]
        lines.append("\t".join(parts))
    return lines
