"""``ckpt bench frozen``: how long a checkpoint stops the sandbox, by mode and size.

For each workload (``memory:N``, ``kv:N``) and size, and each mode (``stop``,
``leave-running``, ``pre-copy``, ``chain``: a pre-dump then a final dump against it),
a sandbox is started through the CLI in a private root, a client on 127.0.0.1 loads it
while the checkpoint runs (``kv``: PUTs of new keys at ``rate`` bytes a second;
``memory``: ``GET /``), and the figures are:

* ``frozen_ms``: ``frozen_time_ms`` of the (final) dump, from its ``--json``;
* ``max_req_ms``: the longest request the client saw while the checkpoint ran;
* ``total_ms``: wall time of the checkpoint command(s), pre-dump included;
* ``image_bytes``: every file of the image (and of the chain's pre-dump);
* ``lost``: acknowledged writes missing after restoring the image (must be 0): every
  key acknowledged before the checkpoint began (for the modes that stop the sandbox,
  every key acknowledged at all), read back from the restored sandbox.

The client is bounded in count (``MAX_WRITES``) and time; one sample per cell (the
sizes that matter take seconds each, and the machine is shared).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ckpt.bench.harness import BenchError, machine_info
from ckpt.pycommand import ckpt_argv

MODES = ("stop", "leave-running", "pre-copy", "chain")
DEFAULT_SIZES = (64, 256, 1024)
MAX_WRITES = 20_000
VALUE_BYTES = 4096
TIMEOUT_S = 600.0


@dataclass
class Cell:
    """One workload, size and mode: what the checkpoint cost and what survived it."""

    workload: str
    mode: str
    frozen_ms: float = 0.0
    max_req_ms: float = 0.0
    total_ms: float = 0.0
    image_bytes: int = 0
    acked: int = 0
    lost: int = 0
    rounds: int = 0
    counters: dict[str, Any] = field(default_factory=dict)


class _Cli:
    """``python -m ckpt --root ROOT ...`` with a deadline; JSON out where asked."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, *args: str) -> str:
        cmd = [*ckpt_argv(), "--root", str(self.root), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        if proc.returncode != 0:
            raise BenchError(f"ckpt {' '.join(args)} failed: {proc.stderr.strip()[-300:]}")
        return proc.stdout

    def address(self, sid: str) -> tuple[str, int]:
        host, _, port = json.loads(self("state", sid))["address"].rpartition(":")
        return host, int(port)


class _Client(threading.Thread):
    """Loads the sandbox until stopped; remembers each acknowledged write and the
    longest request seen since ``mark()``."""

    def __init__(self, address: tuple[str, int], kv: bool, rate: int) -> None:
        super().__init__(name="bench-client", daemon=True)
        self.address, self.kv, self.rate = address, kv, rate
        self.acked: dict[str, bytes] = {}
        self.acked_before: set[str] = set()
        self.max_ns = 0
        self._marked = False
        self._halt = threading.Event()
        self._conn: http.client.HTTPConnection | None = None

    def mark(self) -> None:
        """The checkpoint starts: what was acknowledged so far must survive it."""
        self.acked_before = set(self.acked)
        self.max_ns, self._marked = 0, True

    def stop(self) -> None:
        """Stop now: a request parked by a stopping sandbox (its connection handed over
        for the restore) is cut rather than waited for; it was never acknowledged."""
        self._halt.set()
        sock = getattr(self._conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.join(TIMEOUT_S)

    def run(self) -> None:
        interval = VALUE_BYTES / self.rate if self.kv else 0.002
        deadline = time.monotonic() + TIMEOUT_S
        conn = self._conn = http.client.HTTPConnection(*self.address, timeout=30)
        try:
            for i in range(MAX_WRITES):
                if self._halt.is_set() or time.monotonic() > deadline:
                    return
                t = time.perf_counter_ns()
                if self.kv:
                    key, value = f"b{i}", (b"%08d" % i) * (VALUE_BYTES // 8)
                    conn.request("PUT", f"/kv/{key}", body=value)
                else:
                    conn.request("GET", "/")
                reply = conn.getresponse()
                reply.read()
                took = time.perf_counter_ns() - t
                if self._marked:
                    self.max_ns = max(self.max_ns, took)
                if self.kv and reply.status == 200:
                    self.acked[key] = value
                self._halt.wait(max(0.0, interval - took / 1e9))
        except (OSError, http.client.HTTPException):
            return  # the sandbox stopped serving: nothing after this was acknowledged
        finally:
            conn.close()


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _lost(cli: _Cli, sid: str, acked: dict[str, bytes], must: set[str]) -> int:
    conn = http.client.HTTPConnection(*cli.address(sid), timeout=60)
    lost = 0
    try:
        for key in must:
            conn.request("GET", f"/kv/{key}")
            reply = conn.getresponse()
            if (reply.status, reply.read()) != (200, acked[key]):
                lost += 1
    finally:
        conn.close()
    return lost


def run_cell(cli: _Cli, work: Path, workload: str, mode: str, rate: int) -> Cell:
    """Start, load, checkpoint in ``mode``, restore, count what was lost; clean up."""
    sid = f"frozen-{os.getpid()}"
    cell = Cell(workload, mode)
    kv = workload.startswith("kv:")
    image, pre = work / f"img-{mode}", work / f"pre-{mode}"
    cli("run", sid, "--workload", workload, "--port", "0")
    client = None
    try:
        client = _Client(cli.address(sid), kv, rate)
        client.start()
        time.sleep(0.5)  # the load is under way before the checkpoint starts
        client.mark()
        pre_ns = 0
        args = ["checkpoint", sid, "--image-path", str(image), "--json"]
        if mode == "chain":
            t = time.perf_counter_ns()
            cli("checkpoint", sid, "--image-path", str(pre), "--pre-dump", "--json")
            pre_ns = time.perf_counter_ns() - t
            time.sleep(0.2)  # the load goes on dirtying pages between the two (not timed)
            args += ["--parent-path", str(pre)]
        elif mode == "leave-running":
            args.append("--leave-running")
        elif mode == "pre-copy":
            args.append("--pre-copy")
        t0 = time.perf_counter_ns()
        reply = json.loads(cli(*args))
        cell.total_ms = (time.perf_counter_ns() - t0 + pre_ns) / 1e6
        client.stop()
        counters = reply["timings"].get("counters", {})
        cell.counters = {k: v for k, v in counters.items() if isinstance(v, int | float)}
        cell.frozen_ms = float(counters.get("frozen_time_ms", 0.0))
        cell.rounds = int(counters.get("rounds", 0))
        cell.max_req_ms = client.max_ns / 1e6
        cell.image_bytes = _tree_bytes(image) + (_tree_bytes(pre) if pre.exists() else 0)
        must = set(client.acked) if mode != "leave-running" else client.acked_before
        cell.acked = len(must)
        cli("delete", sid, "--force")
        cli("restore", sid, "--image-path", str(image))
        cell.lost = _lost(cli, sid, client.acked, must) if kv else 0
    finally:
        if client is not None:
            client.stop()
        subprocess.run(
            [*ckpt_argv(), "--root", str(cli.root), "delete", sid, "--force"],
            capture_output=True,
            timeout=TIMEOUT_S,
        )
        for p in (image, pre):
            shutil.rmtree(p, ignore_errors=True)
    return cell


def run(
    sizes: Sequence[int] = DEFAULT_SIZES,
    kinds: Sequence[str] = ("memory", "kv"),
    modes: Sequence[str] = MODES,
    rate: int = 2 << 20,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every cell, in a private root and work directory removed afterwards."""
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise BenchError(f"unknown mode {bad[0]!r}; choose from {', '.join(MODES)}")
    if any(k not in ("memory", "kv") for k in kinds):
        raise BenchError(f"unknown workload in {', '.join(kinds)}; choose memory, kv or both")
    if any(s <= 0 for s in sizes):
        raise BenchError("sizes are positive MiB counts, e.g. 64,256,1024")
    top = Path(tempfile.mkdtemp(prefix="ckpt-bench-frozen-"))
    cli = _Cli(top / "root")
    cells: list[Cell] = []
    try:
        for kind in kinds:
            for size in sizes:
                for mode in modes:
                    workload = f"{kind}:{size}"
                    if progress:
                        progress(f"{workload} {mode}")
                    cells.append(run_cell(cli, top, workload, mode, rate))
    finally:
        subprocess.run(
            [*ckpt_argv(), "--root", str(cli.root), "template", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(top, ignore_errors=True)
    return {"machine": machine_info(), "rate_bytes_s": rate, "cells": [asdict(c) for c in cells]}


def render(report: dict[str, Any]) -> Any:
    """The cells as one table that fits 80 columns."""
    from rich import box
    from rich.table import Table

    t = Table(
        title="bench frozen (one sample per cell; times in ms)",
        title_justify="left",
        caption="max req: longest client request; MiB: image; lost: of acknowledged",
        box=box.SIMPLE,
        pad_edge=False,
    )
    for name in ("workload", "mode"):
        t.add_column(name, no_wrap=True)
    for name in ("frozen", "max req", "total", "MiB", "lost"):
        t.add_column(name, justify="right", no_wrap=True)
    for c in report["cells"]:
        t.add_row(
            c["workload"],
            c["mode"],
            f"{c['frozen_ms']:.1f}",
            f"{c['max_req_ms']:.1f}",
            f"{c['total_ms']:.0f}",
            f"{c['image_bytes'] / 2**20:.1f}",
            f"{c['lost']}/{c['acked']}" if c["workload"].startswith("kv") else "-",
        )
    return t


def to_json(report: dict[str, Any]) -> dict[str, Any]:
    """The report is plain data already: it is its own JSON document."""
    return report


def go_lines(report: dict[str, Any]) -> list[str]:
    """``BenchmarkFrozen/kv_256/pre-copy 1 <frozen ns> ns/op ...`` for benchstat."""
    lines = []
    for c in report["cells"]:
        name = f"BenchmarkFrozen/{c['workload'].replace(':', '_')}/{c['mode']}"
        lines.append(
            "\t".join(
                [
                    name,
                    "1",
                    f"{c['frozen_ms'] * 1e6:.0f} ns/op",
                    f"{c['max_req_ms'] * 1e6:.0f} maxreq-ns",
                    f"{c['total_ms'] * 1e6:.0f} total-ns",
                    f"{c['image_bytes']} image-B",
                    f"{c['lost']} lost",
                ]
            )
        )
    return lines


def plot(report: dict[str, Any], path: Path) -> Path:
    """Frozen time and longest request against memory size, one line per workload kind
    and mode, on log axes; written as a PNG.  Check the path first with
    ``scale.check_plot`` so a long run never ends in a failed plot."""
    from ckpt.bench.scale import _pyplot

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    series: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in report["cells"]:
        series.setdefault((c["workload"].split(":")[0], c["mode"]), []).append(c)
    for ax, attr, title in (
        (axes[0], "frozen_ms", "frozen time"),
        (axes[1], "max_req_ms", "longest client request"),
    ):
        for (kind, mode), cells in sorted(series.items()):
            cells.sort(key=lambda c: int(c["workload"].split(":")[1]))
            ax.plot(
                [int(c["workload"].split(":")[1]) for c in cells],
                [max(c[attr], 0.01) for c in cells],
                marker="o" if kind == "kv" else "s",
                label=f"{kind} {mode}",
            )
        ax.set(xscale="log", yscale="log", xlabel="memory (MiB)", ylabel="ms")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.suptitle(f"ckpt bench frozen — {report['machine'].get('cpu', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path
