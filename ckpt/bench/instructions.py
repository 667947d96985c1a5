"""``ckpt bench instructions``: instructions per operation, counted by callgrind.

Wall clocks on a shared 2-core VM move by ±20% between runs, and the hosts this project
has been measured on differ in cache sizes by 2× and more; an instruction count moves
by neither.  Each case (a benchmark of ``bench state``, one variant) runs in its own
interpreter under ``valgrind --tool=callgrind``, which is told to count only what
runs inside ``functools.reduce`` (``--toggle-collect=functools_reduce``).  The child
builds its shape, writes the stream, runs one operation to warm up (typed generates
its code then), and then calls each counted operation through ``functools.reduce``:
imports, building, the warm-up and the ``gc.collect()`` before each operation are not
counted; cyclic GC that starts inside an operation is, as in the wall-clock bench.

A count is not a time: a cache miss is one instruction and a hundred cycles, which is
why native's wall ratios on large graphs are worse than its instruction ratios.  Quote
both.  The interpreter must keep its local symbols (pyenv and python.org builds do;
a stripped distribution build counts nothing, and this says so).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ckpt import state
from ckpt.bench.harness import BenchError, _go_name, _two_lines, machine_info
from ckpt.pycommand import python_argv

TOGGLE = "functools_reduce"  # the C function of functools.reduce in CPython
VARIANTS = (*(("native",) if state.native_status()[0] else ()), "typed", "reflect", "pickle")
# 20k-node shapes: one counted op is enough
BIG = ("Graph", "BigIntGraph", "People", "Flat", "Mixed")
_SUMMARY = re.compile(rb"^(?:summary|totals):\s*(\d+)", re.MULTILINE)


@dataclass(frozen=True)
class Count:
    """Instructions per operation of one benchmark and variant."""

    name: str
    variant: str
    ops: int
    instructions: int  # in all ops

    @property
    def per_op(self) -> float:
        return self.instructions / self.ops


def parse_callgrind(data: bytes) -> int:
    """The event total of a callgrind output file (its ``summary:`` or ``totals:`` line)."""
    m = _SUMMARY.search(data)
    if m is None:
        raise BenchError("callgrind wrote no summary line: its output file is incomplete")
    return int(m.group(1))


def benchmark_names(graph_nodes: int = 20000, pattern: str | None = None) -> list[str]:
    """``bench state``'s benchmark names that contain ``pattern`` (all when None)."""
    from ckpt.bench import harness, state_bench

    names = [name for save, load, _ in state_bench.shapes(graph_nodes) for name in (save, load)]
    return harness.matching(names, pattern)


def _ops_for(name: str, ops: int | None) -> int:
    if ops is not None:
        return ops
    return 1 if name.startswith(BIG) else 5


def _command(valgrind: str, out_file: str, args: Sequence[str]) -> list[str]:
    return [
        valgrind,
        "--tool=callgrind",
        "--collect-atstart=no",
        f"--toggle-collect={TOGGLE}",
        f"--callgrind-out-file={out_file}",
        *python_argv("-m", "ckpt.bench.instructions"),
        *args,
    ]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = "0"  # the same dict and set layouts in every run
    return env


def run(
    names: Sequence[str],
    variants: Sequence[str] = VARIANTS,
    *,
    ops: int | None = None,
    graph_nodes: int = 20000,
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Count]:
    """Count every (benchmark, variant), ``jobs`` children at a time (default: cores)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise BenchError(
            "valgrind is not installed: instruction counts need callgrind "
            "(Debian: apt-get install valgrind)"
        )
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise BenchError(f"unknown variant {unknown[0]!r}; choose from {', '.join(VARIANTS)}")
    todo = [(name, variant) for name in names for variant in variants]
    jobs = max(1, jobs or os.cpu_count() or 1)
    counts: dict[tuple[str, str], Count] = {}
    with tempfile.TemporaryDirectory(prefix="ckpt-callgrind-") as tmp:
        running: list[tuple[str, str, int, str, subprocess.Popen[bytes]]] = []
        started = time.monotonic()
        while todo or running:
            while todo and len(running) < jobs:
                name, variant = todo.pop(0)
                n = _ops_for(name, ops)
                out_file = os.path.join(tmp, f"{len(counts) + len(running)}.out")
                args = (name, variant, str(n), str(graph_nodes))
                proc = subprocess.Popen(
                    _command(valgrind, out_file, args),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    env=_child_env(),
                )
                running.append((name, variant, n, out_file, proc))
            name, variant, n, out_file, proc = running.pop(0)
            _, err = proc.communicate()
            if proc.returncode != 0:
                last = [line for line in err.decode(errors="replace").splitlines() if line]
                raise BenchError(
                    f"{name}/{variant}: the counted run failed (exit {proc.returncode}): "
                    f"{last[-1] if last else 'no message'}"
                )
            with open(out_file, "rb") as f:
                total = parse_callgrind(f.read())
            if total == 0:
                raise BenchError(
                    f"callgrind counted nothing inside {TOGGLE}: this interpreter "
                    f"({sys.executable}) has no local symbols; use a build that keeps them"
                )
            counts[(name, variant)] = Count(name, variant, n, total)
            if progress is not None:
                done = len(counts)
                progress(
                    f"instructions: {done}/{done + len(todo) + len(running)} {name} {variant} "
                    f"({time.monotonic() - started:.0f} s)"
                )
    return [counts[(name, variant)] for name in names for variant in variants]


# -- the child: one case under callgrind ---------------------------------------------


def _child(argv: Sequence[str]) -> None:
    """``python -m ckpt.bench.instructions NAME VARIANT OPS NODES``: run OPS counted ops."""
    import functools
    import gc
    import threading

    from ckpt.bench import state_bench

    name, variant, n, nodes = argv[0], argv[1], int(argv[2]), int(argv[3])
    found = [(s, m) for s, ld, m in state_bench.shapes(nodes) if name in (s, ld)]
    if not found:
        raise SystemExit(f"unknown benchmark {name!r}")
    save, make = found[0]
    dumps, loads = state_bench._codecs(variant)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            root = make()
            data = dumps(root)
            op: Callable[[], Any] = (lambda: dumps(root)) if name == save else (lambda: loads(data))
            op()  # warm-up: generated code, plans, caches
            call = lambda _acc, fn: fn()  # noqa: E731  (reduce's function: run the op)
            for _ in range(n):
                gc.collect()
                kept = functools.reduce(call, (op,), None)  # counted: inside reduce only
                del kept  # freed outside the count, before the next op's collect
        except BaseException as exc:
            errors.append(exc)

    # pickle recurses per nested object, as in bench state: a big stack, a high limit
    sys.setrecursionlimit(200_000)
    threading.stack_size(1 << 30)
    t = threading.Thread(target=work, name="bench-instructions")
    t.start()
    t.join()
    if errors:
        raise errors[0]


# -- rendering -------------------------------------------------------------------------


def _mi(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:.2f}M"


def _ratio(table: dict[tuple[str, str], Count], name: str, a: str, b: str) -> float | None:
    x, y = table.get((name, a)), table.get((name, b))
    return None if x is None or y is None else x.per_op / y.per_op


RATIOS = (("native", "reflect"), ("native", "pickle"), ("typed", "reflect"), ("typed", "pickle"))


def render(counts: Sequence[Count]) -> list[Any]:
    """Two tables that fit 80 columns: instructions per op, then the ratios."""
    from rich.table import Table

    names = list(dict.fromkeys(c.name for c in counts))
    variants = list(dict.fromkeys(c.variant for c in counts))
    table = {(c.name, c.variant): c for c in counts}
    per_op = Table(title="instructions per operation (callgrind)")
    per_op.add_column("benchmark")
    for v in variants:
        per_op.add_column(v, justify="right")
    for name in names:
        cells = [_mi(table[(name, v)].per_op) if (name, v) in table else "-" for v in variants]
        per_op.add_row(_two_lines(name, 12), *cells)
    ratios = Table(title="instruction ratios")
    ratios.add_column("benchmark")
    pairs = [(a, b) for a, b in RATIOS if a in variants and b in variants]
    for a, b in pairs:
        ratios.add_column(f"{a}/\n{b}", justify="right")
    for name in names:
        cells = [_ratio(table, name, a, b) for a, b in pairs]
        ratios.add_row(_two_lines(name, 12), *("-" if r is None else f"{r:.3f}" for r in cells))
    return [per_op, ratios] if pairs else [per_op]


def to_json(counts: Sequence[Count]) -> dict[str, Any]:
    table = {(c.name, c.variant): c for c in counts}
    return {
        "machine": machine_info(),
        "counter": f"valgrind callgrind, --toggle-collect={TOGGLE}",
        "results": [
            {
                "name": c.name,
                "variant": c.variant,
                "ops": c.ops,
                "instructions_per_op": c.per_op,
                **{
                    f"ratio_vs_{b}": _ratio(table, c.name, c.variant, b)
                    for b in ("reflect", "pickle")
                    if b != c.variant
                },
            }
            for c in counts
        ],
    }


def go_lines(counts: Sequence[Count]) -> list[str]:
    return [
        f"{_go_name(f'BenchmarkInstructions/{c.name}/{c.variant}')}\t{c.ops}\t"
        f"{c.per_op:.0f} instr/op"
        for c in counts
    ]


if __name__ == "__main__":
    _child(sys.argv[1:])
