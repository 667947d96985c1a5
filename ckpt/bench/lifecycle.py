"""``ckpt bench lifecycle``: each CLI command timed as a whole process, as a user waits.

A command is measured from exec to exit (``subprocess`` wall time, and the CPU of the
command's own process from ``wait4``), never from inside.  The unit is a bare
``python -c pass`` measured in the same run, interleaved with everything else, so a
figure reads "N times the cost of starting Python" whatever the machine's load.

Cases, for each workload and CPU quota:

* ``run`` cold (``--no-template``) and from the warm template;
* ``checkpoint`` (the sandbox stops afterwards);
* ``restore`` from the warm template and cold, with the in-sandbox phases
  (SandboxCreate, Restore, ResumeTotal) from the command's ``--json``;
* ``state`` of a running sandbox.

Each round runs the cases in a rotated order (A B C, B C A, ...) so drift hits all of
them alike.  Set-up between timed commands (deleting, re-running) is not timed.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpt.bench.harness import BenchError, Result, Sample, machine_info

QUOTAS = ("uncapped", "0.25")
WORKLOADS = ("http", "nginx")
SANDBOX_PHASES = ("SandboxCreate_ms", "Restore_ms", "ResumeTotal_ms", "Checkpoint_ms")


def ckpt_command() -> list[str]:
    """How a user runs ckpt here: the console script beside this interpreter (a shell's
    ``ckpt``, minus any version-manager shim in front of it), else ``python -m ckpt``."""
    script = Path(sys.executable).with_name("ckpt")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    from ckpt.pycommand import ckpt_argv

    return ckpt_argv()


@dataclass
class Timed:
    """One command's wall time (spawn to reap) and what it printed."""

    wall_ns: int
    stdout: str
    stderr: str
    returncode: int


def timed(argv: Sequence[str], env: dict[str, str] | None = None) -> Timed:
    """Run ``argv`` to completion and time it from spawn to reap."""
    t0 = time.perf_counter_ns()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env
    )
    out, errs = proc.communicate()
    t1 = time.perf_counter_ns()
    return Timed(
        t1 - t0, out.decode(errors="replace"), errs.decode(errors="replace"), proc.returncode
    )


@dataclass
class Case:
    """A timed command with untimed set-up before and clean-up after."""

    command: str  # run, checkpoint, restore, state, bare
    workload: str
    quota: str
    start: str  # template, cold, or "-"
    argv: Callable[[], list[str]]
    setup: Callable[[], None] | None = None
    cleanup: Callable[[], None] | None = None
    result: Result = field(init=False)
    phases: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.result = Result(self.label, self.start)

    @property
    def label(self) -> str:
        if self.command == "bare":
            return "bare"
        return f"{self.command}/{self.workload}/{self.quota}"


class Suite:
    """Builds the cases for one run in a private root, and removes everything after."""

    def __init__(self, workloads: Sequence[str], quotas: Sequence[str], root: Path) -> None:
        self.root = root
        self.image = root / "images"
        self.base = [*ckpt_command(), "--root", str(root)]
        self.env = {**os.environ, "CKPT_TEMPLATE": "1"}
        self.workloads = list(workloads)
        self.quotas = list(quotas)
        self._prepare: list[Callable[[], None]] = []
        self.cases: list[Case] = [
            Case("bare", "-", "-", "-", lambda: [sys.executable, "-c", "pass"])
        ]
        for w in self.workloads:
            for q in self.quotas:
                self._add(w, q)

    def _ckpt(self, *args: str, template: bool = True) -> list[str]:
        return [*self.base, *([] if template else ["--no-template"]), *args]

    def _quiet(self, *args: str) -> None:
        proc = subprocess.run(
            self._ckpt(*args), capture_output=True, text=True, env=self.env, check=False
        )
        if proc.returncode != 0:
            raise BenchError(f"ckpt {' '.join(args)} failed: {proc.stderr.strip()}")

    def _gone(self, sid: str) -> None:
        subprocess.run(
            self._ckpt("delete", "--force", sid), capture_output=True, env=self.env, check=False
        )

    def _cpu(self, q: str) -> list[str]:
        return [] if q == "uncapped" else ["--cpu", q]

    def _add(self, w: str, q: str) -> None:
        tag = f"{w.replace(':', '')}-{q.replace('.', '')}"
        img = str(self.image / tag)
        run_id, live_id, ck_id, rs_id = (f"{p}-{tag}" for p in ("run", "live", "ck", "rs"))

        # the image every restore loads, and a sandbox that stays up for `state`
        def prepare() -> None:
            self._quiet("run", live_id, "--workload", w, *self._cpu(q))
            self._quiet("run", ck_id, "--workload", w, *self._cpu(q))
            self._quiet("checkpoint", ck_id, "--image-path", img, "--force")
            self._gone(ck_id)

        self._prepare.append(prepare)
        for start in ("template", "cold"):
            self.cases.append(
                Case(
                    "run",
                    w,
                    q,
                    start,
                    lambda start=start: self._ckpt(
                        "run", run_id, "--workload", w, *self._cpu(q), template=start == "template"
                    ),
                    cleanup=lambda: self._gone(run_id),
                )
            )
        self.cases.append(
            Case(
                "checkpoint",
                w,
                q,
                "-",
                lambda: self._ckpt(
                    "checkpoint", ck_id, "--image-path", img + "-ck", "--force", "--json"
                ),
                setup=lambda: self._quiet("run", ck_id, "--workload", w, *self._cpu(q)),
                cleanup=lambda: self._gone(ck_id),
            )
        )
        for start in ("template", "cold"):
            self.cases.append(
                Case(
                    "restore",
                    w,
                    q,
                    start,
                    lambda start=start: self._ckpt(
                        "restore",
                        rs_id,
                        "--image-path",
                        img,
                        *self._cpu(q),
                        "--json",
                        template=start == "template",
                    ),
                    cleanup=lambda: self._gone(rs_id),
                )
            )
        self.cases.append(Case("state", w, q, "-", lambda: self._ckpt("state", live_id)))

    def prepare(self) -> None:
        self._quiet("template", "start")
        for fn in self._prepare:
            fn()

    def close(self) -> None:
        for sid in self._ids():
            self._gone(sid)
        subprocess.run(self._ckpt("template", "stop"), capture_output=True, check=False)

    def _ids(self) -> list[str]:
        return [p.name for p in self.root.iterdir() if (p / "state.json").exists()]


def _measure(case: Case, env: dict[str, str]) -> None:
    if case.setup is not None:
        case.setup()
    before = os.times()
    t = timed(case.argv(), env)
    after = os.times()  # the command's own CPU: it is the only child reaped meanwhile
    cpu_ns = int(
        (
            after.children_user
            - before.children_user
            + after.children_system
            - before.children_system
        )
        * 1e9
    )
    if case.cleanup is not None:
        case.cleanup()
    if t.returncode != 0:
        raise BenchError(
            f"{case.label} ({case.start}) exited {t.returncode}: {t.stderr.strip()[-300:]}"
        )
    case.result.samples.append(Sample(t.wall_ns, cpu_ns, 0, 0))
    if t.stdout.lstrip().startswith("{"):
        timings = json.loads(t.stdout).get("timings") or {}
        for key in SANDBOX_PHASES:
            if key in timings:
                case.phases.setdefault(key, []).append(float(timings[key]))


def run(
    *,
    count: int = 5,
    workloads: Sequence[str] = WORKLOADS,
    quotas: Sequence[str] = QUOTAS,
    commands: Sequence[str] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Measure every case ``count`` times (after one warm-up round), interleaved."""
    if count < 1:
        raise BenchError(f"--count must be at least 1, not {count}")
    root = Path(tempfile.mkdtemp(prefix="ckpt-bench-lifecycle-"))
    suite = Suite(workloads, quotas, root)
    cases = [c for c in suite.cases if commands is None or c.command in ("bare", *commands)]
    from rich.progress import Progress

    try:
        suite.prepare()
        total = len(cases) * (count + 1)
        with Progress(transient=True, disable=not progress) as bar:
            task = bar.add_task("lifecycle", total=total)
            for rnd in range(count + 1):
                shift = rnd % len(cases)
                for case in cases[shift:] + cases[:shift]:
                    bar.update(task, description=f"{case.label} {case.start}")
                    _measure(case, suite.env)
                    if rnd == 0:  # warm-up round: not counted
                        case.result.samples.clear()
                        case.phases.clear()
                    bar.advance(task)
    finally:
        suite.close()
        shutil.rmtree(root, ignore_errors=True)
    return {"cases": cases, "command": ckpt_command(), "machine": machine_info()}


def _bare_ns(cases: Sequence[Case]) -> float:
    return next(c.result.wall_ns for c in cases if c.command == "bare")


def rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    cases: list[Case] = report["cases"]
    bare = _bare_ns(cases)
    out = []
    for c in cases:
        r = c.result
        out.append(
            {
                "command": c.command,
                "workload": c.workload,
                "cpu": c.quota,
                "start": c.start,
                "n": len(r.samples),
                "wall_ms": r.wall_ns / 1e6,
                "spread": r.spread(),
                "x_bare": r.wall_ns / bare if bare else float("nan"),
                "cli_cpu_ms": r.cpu_ns / 1e6,
                **{k: statistics.median(v) for k, v in c.phases.items() if v},
                "samples_wall_ms": [s.wall_ns / 1e6 for s in r.samples],
            }
        )
    return out


def render(report: dict[str, Any]) -> Any:
    """A table that fits 80 columns: one row per command, workload, quota and start."""
    from rich.table import Table

    table = Table(title="ckpt bench lifecycle (whole commands, exec to exit)", title_justify="left")
    # "checkpoint" is the longest cell of the first column: it stays whole, and the
    # two-word headers take two lines, so the table fits 80 columns.
    table.add_column("command", no_wrap=True, min_width=len("checkpoint"))
    for col, justify in (
        ("load", "left"),
        ("cpu", "left"),
        ("start", "left"),
        ("wall", "right"),
        ("±", "right"),
        ("×\nbare", "right"),
        ("CLI\ncpu", "right"),
        ("inside", "right"),
    ):
        table.add_column(col, justify=justify, overflow="fold")
    for row in rows(report):
        inside = row.get("ResumeTotal_ms") or row.get("Checkpoint_ms")
        table.add_row(
            row["command"],
            row["workload"],
            "max" if row["cpu"] == "uncapped" else row["cpu"],
            {"template": "warm"}.get(row["start"], row["start"]),
            f"{row['wall_ms']:.0f} ms",
            f"{row['spread'] * 100:.0f}%",
            f"{row['x_bare']:.1f}",
            f"{row['cli_cpu_ms']:.0f} ms",
            "-" if inside is None else f"{inside:.0f} ms",
        )
    table.caption = (
        "cpu: the sandbox's quota (max: uncapped). start: forked from the warm template or "
        "a cold interpreter. × bare: wall over `python -c pass` in the same run. inside: "
        "ResumeTotal (restore) or Checkpoint (checkpoint), from the command's --json."
    )
    return table


def to_json(report: dict[str, Any]) -> dict[str, Any]:
    return {"machine": report["machine"], "command": report["command"], "results": rows(report)}


def go_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for row in rows(report):
        name = "BenchmarkLifecycle/" + "/".join(
            str(row[k]).replace(":", "") for k in ("command", "workload", "cpu", "start")
        ).replace("/-", "")
        parts = [name, str(row["n"]), f"{row['wall_ms'] * 1e6:.0f} ns/op"]
        parts.append(f"{row['x_bare']:.2f} x-bare")
        if "ResumeTotal_ms" in row:
            parts.append(f"{row['ResumeTotal_ms'] * 1e6:.0f} resume-ns/op")
        lines.append("\t".join(parts))
    return lines
