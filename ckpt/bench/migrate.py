"""``ckpt bench migrate``: what a live migration costs a sandbox under load.

For each workload (``kv:N``, ``memory:N``) a sandbox runs in a private source root and
``ckpt serve`` in a private destination root, both on 127.0.0.1 (the destination binds
a port chosen beforehand, so a client knows where to go).  A client writes to it
(``kv``: PUTs of new 4 KiB values at ``rate`` bytes a second; ``memory``: ``GET /``)
and, when a request fails, retries every ``RETRY_S`` at the source, then the
destination.  ``ckpt migrate --json`` moves it, and the figures are:

* ``frozen_ms``: the source frozen until its final image was written;
* ``downtime_ms``: from the freeze until the destination said it runs (the CLI's);
* ``gap_ms``: the longest time the client went without an answer (what a user sees);
* ``total_ms``: wall time of ``ckpt migrate``;
* ``sent_ratio``: bytes sent over the memory's size;
* ``rounds``, ``lost``: acknowledged writes missing on the destination (must be 0);
* ``mode``: ``pre-copy``, ``post-copy`` or ``auto`` (``ckpt migrate``'s choice);
  post-copy adds ``last_page_ms`` (from the freeze until the destination held every
  page) and the pages faulted and pushed;
* ``baseline_ms``: the same sandbox, now on the destination, under the same load, moved
  through a local directory instead: one ``checkpoint --pre-copy`` and one ``restore``
  (wall time of both commands); ``ratio`` is ``total_ms`` over it.

The ``write`` load is the one client above; ``keepalive`` adds ``KEEPALIVE_CLIENTS``
clients that each keep one HTTP/1.1 connection open and ``GET /`` every
``KEEPALIVE_INTERVAL_S``, and ``gap_ms`` is the longest any of them waited.

With ``link="netns"`` the sandbox moves between two hosts of a LAN in network
namespaces, with its own address and its connections, under clients that follow it:
``ckpt.bench.lanmigrate`` (its own figures, table and benchmark lines).

On loopback, one sample per cell: the sizes that matter take seconds each, and the machine is shared.
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

DEFAULT_SIZES = (64, 256)
LOADS = ("write", "keepalive")
MODES = {"pre-copy": (), "post-copy": ("--post-copy",), "auto": ("--auto",)}
KEEPALIVE_CLIENTS = 4
KEEPALIVE_INTERVAL_S = 0.01
RETRY_S = 0.005
VALUE_BYTES = 4096
MAX_REQUESTS = 200_000
TIMEOUT_S = 600.0
HOST = "127.0.0.1"


@dataclass
class Cell:
    workload: str
    frozen_ms: float = 0.0
    downtime_ms: float = 0.0
    gap_ms: float = 0.0
    total_ms: float = 0.0
    bytes_sent: int = 0
    memory_bytes: int = 0
    sent_ratio: float = 0.0
    rounds: int = 0
    acked: int = 0
    lost: int = 0
    failed_requests: int = 0
    counters: dict[str, Any] = field(default_factory=dict)
    round_detail: list[dict[str, Any]] = field(default_factory=list)
    load: str = "write"
    clients: int = 1
    client_gaps_ms: list[float] = field(default_factory=list)  # each client's longest
    baseline_ms: float = 0.0  # 0: not measured
    ratio: float = 0.0
    mode: str = "pre-copy"
    chosen: str = "pre-copy"  # what ran: auto picks one
    last_page_ms: float = 0.0  # post-copy: freeze -> every page held there
    window: list[list[float]] = field(default_factory=list)  # post-copy: [ms, bytes left]
    # memory:N without a writer: does the destination's memory digest equal the
    # source's before the move (None: not checkable, the memory changes meanwhile)
    same_memory: bool | None = None


class _Client(threading.Thread):
    """Loads the sandbox at ``addresses[0]``; on a failed request, retries every
    ``RETRY_S`` on each address in turn.  Records acknowledged writes and the longest
    time between two answers."""

    def __init__(
        self,
        addresses: list[tuple[str, int]],
        kv: bool,
        rate: int,
        interval: float | None = None,
    ) -> None:
        super().__init__(name="bench-client", daemon=True)
        self.addresses, self.kv, self.rate = addresses, kv, rate
        self.interval = interval  # between GETs (None: 2 ms); kv paces by ``rate``
        self.acked: dict[str, bytes] = {}
        self.gap_ns = 0
        self.failures = 0
        self._gone_after = MAX_REQUESTS  # failures before giving up (the netns writer: 1)
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(60)

    def run_until_gone(self, lifetime: float) -> None:
        """Load until the one address stops answering (or ``lifetime``), in this thread."""
        self.addresses = self.addresses[:1]
        self._gone_after = 1
        timer = threading.Timer(lifetime, self._halt.set)
        timer.start()
        try:
            self.run()
        finally:
            timer.cancel()

    def _one(self, conn: http.client.HTTPConnection, i: int) -> bool:
        if self.kv:
            key, value = f"m{i}", (b"%08d" % i) * (VALUE_BYTES // 8)
            conn.request("PUT", f"/kv/{key}", body=value)
        else:
            conn.request("GET", "/")
        reply = conn.getresponse()
        reply.read()
        if reply.status != 200:
            return False
        if self.kv:
            self.acked[key] = value
        return True

    def run(self) -> None:
        interval = VALUE_BYTES / self.rate if self.kv else (self.interval or 0.002)
        deadline = time.monotonic() + TIMEOUT_S
        which = 0
        conn: http.client.HTTPConnection | None = None
        last_ok = time.perf_counter_ns()
        for i in range(MAX_REQUESTS):
            if self._halt.is_set() or time.monotonic() > deadline:
                break
            t = time.perf_counter_ns()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(*self.addresses[which], timeout=60)
                ok = self._one(conn, i)
            except (OSError, http.client.HTTPException):
                ok = False
                with contextlib.suppress(OSError):
                    conn.close() if conn else None
                conn = None
            now = time.perf_counter_ns()
            if ok:
                self.gap_ns = max(self.gap_ns, now - last_ok)
                last_ok = now
                self._halt.wait(max(0.0, interval - (now - t) / 1e9))
            else:
                self.failures += 1
                if self.failures >= self._gone_after:
                    break
                which = (which + 1) % len(self.addresses)
                self._halt.wait(RETRY_S)
        if conn is not None:
            conn.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _ckpt(root: Path, *args: str, timeout: float = TIMEOUT_S) -> str:
    cmd = [*ckpt_argv(), "--root", str(root), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise BenchError(f"ckpt {' '.join(args[:2])} failed: {proc.stderr.strip()[-300:]}")
    return proc.stdout


def _memory_digest(address: tuple[str, int]) -> str:
    """The sandbox's ``GET /memory`` digest (every page of its memory)."""
    from ckpt.sandbox.host.http import get_json

    status, body = get_json(*address, "/memory", timeout=TIMEOUT_S)
    if status != 200:
        raise BenchError(f"GET /memory at {address[0]}:{address[1]} answered {status}")
    return str(body["memory_sha256"])


def _lost(address: tuple[str, int], acked: dict[str, bytes]) -> int:
    conn = http.client.HTTPConnection(*address, timeout=60)
    lost = 0
    try:
        for key, value in acked.items():
            conn.request("GET", f"/kv/{key}")
            reply = conn.getresponse()
            if (reply.status, reply.read()) != (200, value):
                lost += 1
    finally:
        conn.close()
    return lost


def _clients(addresses: list[tuple[str, int]], kv: bool, rate: int, load: str) -> list[_Client]:
    """The load of one cell, started: the writer (or reader), plus the keep-alive ones."""
    clients = [_Client(addresses, kv, rate)]
    if load == "keepalive":
        clients += [
            _Client(addresses, False, rate, interval=KEEPALIVE_INTERVAL_S)
            for _ in range(KEEPALIVE_CLIENTS)
        ]
    for c in clients:
        c.start()
    return clients


def _stop(clients: list[_Client]) -> None:
    for c in clients:
        c.stop()


def baseline(root: Path, sid: str, image: Path, clients: list[_Client]) -> float:
    """Wall ms of one local ``checkpoint --pre-copy`` and one ``restore`` of ``sid``,
    under ``clients``' load (stopped here); the image is removed."""
    try:
        t0 = time.perf_counter_ns()
        _ckpt(root, "checkpoint", sid, "--pre-copy", "--image-path", str(image))
        _ckpt(root, "restore", sid, "--image-path", str(image))
        return (time.perf_counter_ns() - t0) / 1e6
    finally:
        _stop(clients)
        shutil.rmtree(image, ignore_errors=True)


def run_cell(
    top: Path,
    key: Path,
    workload: str,
    rate: int,
    serve_at: str,
    load: str = "write",
    with_baseline: bool = True,
    mode: str = "pre-copy",
    encrypt: bool = False,
) -> Cell:
    """Run, load, migrate, count what was lost, time the local baseline; remove both
    sandboxes."""
    sid = f"mig-{os.getpid()}"
    src, dst = top / "src", top / "dst"
    cell = Cell(workload, mode=mode, load=load)
    kv = workload.startswith("kv:")
    _ckpt(src, "run", sid, "--workload", workload, "--port", "0")
    clients: list[_Client] = []
    try:
        state = json.loads(_ckpt(src, "state", sid))
        host, _, port = state["address"].rpartition(":")
        new_port = _free_port()
        clients = _clients([(host, int(port)), (HOST, new_port)], kv, rate, load)
        quiet = workload.startswith("memory:") and "@" not in workload  # GETs change nothing
        before = _memory_digest((host, int(port))) if quiet else None
        time.sleep(0.5)  # the load is under way before the migration starts
        t0 = time.perf_counter_ns()
        out = _ckpt(src, "migrate", sid, "--to", serve_at, "--key-file", str(key),
                    "--port", str(new_port), "--json", *MODES[mode],
                    *_sealing(encrypt))  # fmt: skip
        cell.total_ms = (time.perf_counter_ns() - t0) / 1e6
        time.sleep(0.3)  # the clients find the destination
        _stop(clients)
        writer = clients[0]
        cell.clients = len(clients)
        report = json.loads(out)
        cell.chosen = str(report.get("mode") or "pre-copy")
        cell.last_page_ms = float(report.get("last_page_ms") or 0.0)
        cell.window = list(report.get("postcopy_window") or [])
        cell.frozen_ms = float(report["frozen_time_ms"])
        cell.downtime_ms = float(report["downtime_ms"])
        cell.client_gaps_ms = [round(c.gap_ns / 1e6, 3) for c in clients]
        cell.gap_ms = max(cell.client_gaps_ms)
        cell.bytes_sent = int(report["bytes_sent"])
        cell.memory_bytes = int(report["memory_bytes"])
        cell.sent_ratio = round(cell.bytes_sent / max(1, cell.memory_bytes), 3)
        cell.rounds = len(report["rounds"])
        cell.round_detail = report["rounds"]
        cell.failed_requests = sum(c.failures for c in clients)
        cell.counters = {k: v for k, v in report.items() if isinstance(v, int | float)}
        cell.acked = len(writer.acked)
        cell.lost = _lost((HOST, new_port), writer.acked) if kv else 0
        if before is not None:
            cell.same_memory = _memory_digest((HOST, new_port)) == before
        if with_baseline:
            clients = _clients([(HOST, new_port)], kv, rate, load)
            time.sleep(0.5)
            cell.baseline_ms = baseline(dst, sid, top / "baseline", clients)
            cell.ratio = round(cell.total_ms / cell.baseline_ms, 3)
    finally:
        _stop(clients)
        for root in (src, dst):
            with contextlib.suppress(subprocess.SubprocessError, BenchError):
                _ckpt(root, "delete", sid, "--force", timeout=120)
    return cell


def run(
    sizes: Sequence[int] = DEFAULT_SIZES,
    kinds: Sequence[str] = ("kv", "memory"),
    rate: int = 2 << 20,
    progress: Callable[[str], None] | None = None,
    *,
    link: str = "loopback",
    shape: str = "1gbit",
    delay_ms: float = 0.0,
    loads: Sequence[str] = ("write",),
    with_baseline: bool = True,
    runs: int | None = None,
    modes: Sequence[str] = ("pre-copy",),
    encrypt: bool = False,
) -> dict[str, Any]:
    """Every cell, in private roots removed afterwards, with one ``ckpt serve``.
    ``kinds``: ``kv`` and ``memory`` (each at every size) or whole workloads
    (``kv:256``; over netns also ``http``)."""
    if not sizes or any(s <= 0 for s in sizes):
        raise BenchError("sizes are positive MiB counts, e.g. 64,256")
    workloads = workloads_of(kinds, sizes)
    if not modes or any(x not in MODES for x in modes):
        raise BenchError(f"unknown mode in {', '.join(modes)}; choose {', '.join(MODES)}")
    if link == "netns":
        from ckpt.bench import lanmigrate

        if encrypt:
            raise BenchError("--encrypt is for the loopback link; leave it out with --link netns")
        if tuple(loads) != ("write",):
            raise BenchError(
                "--loads is for the loopback link: over netns, 4 keep-alive clients "
                "and a writer always run"
            )
        return lanmigrate.run(
            workloads, runs or lanmigrate.DEFAULT_RUNS, rate, progress,
            shape=shape, delay_ms=delay_ms, modes=modes,
        )  # fmt: skip
    if link != "loopback":
        raise BenchError(f"unknown link {link!r}; choose loopback or netns")
    if runs not in (None, 1):
        raise BenchError("--runs is for --link netns; loopback takes one sample per cell")
    if any(not w.startswith(("kv:", "memory:")) for w in workloads):
        raise BenchError(f"unknown workload in {', '.join(kinds)}; choose memory, kv or both")
    if not loads or any(x not in LOADS for x in loads):
        raise BenchError(f"unknown load in {', '.join(loads)}; choose {' or '.join(LOADS)}")
    top = Path(tempfile.mkdtemp(prefix="ckpt-bench-migrate-"))
    key = top / "key"
    key.write_bytes(os.urandom(32))
    os.chmod(key, 0o600)
    log = open(top / "serve.log", "wb")  # noqa: SIM115  (the server writes it)
    serve = subprocess.Popen(
        [*ckpt_argv(), "--root", str(top / "dst"), "serve",
         "--listen", f"{HOST}:0", "--key-file", str(key), *_sealing(encrypt)],
        stdout=log,
        stderr=log,
    )  # fmt: skip
    log.close()
    cells: list[Cell] = []
    try:
        serve_at = _wait_listening(top / "serve.log", serve)
        _warm_up(top)
        for workload in workloads:
            for load in loads:
                for mode in modes:
                    if progress:
                        progress(f"{workload} ({load}, {mode})")
                    cells.append(
                        run_cell(
                            top, key, workload, rate, serve_at, load, with_baseline, mode, encrypt
                        )
                    )
    finally:
        serve.terminate()
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait(10)
        for root in (top / "src", top / "dst"):
            subprocess.run(
                [*ckpt_argv(), "--root", str(root), "template", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(top, ignore_errors=True)
    return {
        "machine": machine_info(),
        "link": "loopback",
        "encrypt": encrypt,
        "rate_bytes_s": rate,
        "cells": [asdict(c) for c in cells],
    }


def _sealing(encrypt: bool) -> list[str]:
    """The option that seals the channel, on both ends (``--encrypt``)."""
    return ["--encrypt"] if encrypt else []


def _warm_up(top: Path) -> None:
    """One throwaway checkpoint in the source root before the cells: the first state
    save after a root's template starts builds what later ones reuse (15-18 ms more,
    measured), which would otherwise land in the first cell's frozen time only."""
    sid = f"warm-{os.getpid()}"
    _ckpt(top / "src", "run", sid, "--workload", "kv:1", "--port", "0")
    try:
        _ckpt(top / "src", "checkpoint", sid, "--image-path", str(top / "warm"))
    finally:
        with contextlib.suppress(subprocess.SubprocessError, BenchError):
            _ckpt(top / "src", "delete", sid, "--force", timeout=120)
        shutil.rmtree(top / "warm", ignore_errors=True)


def _wait_listening(log: Path, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("listening on "):
                return line.split()[2]
        if proc.poll() is not None:
            raise BenchError(f"ckpt serve exited: {log.read_text(errors='replace')[-300:]}")
        time.sleep(0.05)
    raise BenchError("ckpt serve did not listen within 60 s")


def workloads_of(kinds: Sequence[str], sizes: Sequence[int]) -> list[str]:
    """``kv`` and ``memory`` at every size, in order; a whole workload (``kv:256``,
    ``http``) as it is."""
    out: list[str] = []
    for kind in kinds:
        if kind in ("kv", "memory"):
            out += [f"{kind}:{size}" for size in sizes]
        elif kind:
            out.append(kind)
    return list(dict.fromkeys(out))


SHORT_MODES = {"pre-copy": "", "post-copy": " post", "auto": " a"}


def _label(c: dict[str, Any]) -> str:
    """The workload, its load and its mode: ``kv:256+ka post``; auto says what it chose."""
    mode = SHORT_MODES.get(c.get("mode", "pre-copy"), "")
    if c.get("mode") == "auto":
        mode += ":post" if c.get("chosen") == "post-copy" else ":pre"
    return c["workload"] + ("+ka" if c.get("load") == "keepalive" else "") + mode


def render(report: dict[str, Any]) -> Any:
    """The cells as one table that fits 80 columns."""
    if _lan(report):
        from ckpt.bench import lanmigrate

        return lanmigrate.render(report)
    from rich import box
    from rich.table import Table

    cells = report["cells"]
    paged = any(c.get("last_page_ms") for c in cells)  # columns only for what was run
    based = not paged and any(c.get("baseline_ms") for c in cells)  # in --json if both
    notes = ["gap: longest a client retrying every 5 ms waited"]
    if paged:
        notes.append("last: post-copy's last page held there")
    if based:
        notes.append("base: local checkpoint --pre-copy + restore; x: total/base")
    notes.append("sent: bytes/memory; +ka: keep-alive; lost: writes, or memory not as it left")
    t = Table(
        title=f"bench migrate over {report['link']}"
        + (", --encrypt" if report.get("encrypt") else "")
        + " (one sample per cell; ms)",
        title_justify="left",
        caption="\n".join(notes),
        box=box.SIMPLE,
        pad_edge=False,
    )
    t.add_column("workload", overflow="fold")  # a long name folds; numbers never do
    names = ["frozen", "down", "gap", *(["last"] if paged else []), "total"]
    names += [*(["base", "x"] if based else []), "sent", "rnd", "lost"]
    for name in names:
        t.add_column(name, justify="right", no_wrap=True, min_width=min(len(name), 5))
    for c in cells:
        base = c.get("baseline_ms") or 0.0
        row = [_label(c), f"{c['frozen_ms']:.0f}", f"{c['downtime_ms']:.0f}", f"{c['gap_ms']:.0f}"]
        if paged:
            row.append(f"{c['last_page_ms']:.0f}" if c.get("last_page_ms") else "-")
        row.append(f"{c['total_ms']:.0f}")
        if based:
            row += [f"{base:.0f}" if base else "-", f"{c['ratio']:.2f}" if base else "-"]
        row += [
            f"{c['sent_ratio']:.2f}",
            str(c["rounds"]),
            _lost_cell(c),
        ]
        t.add_row(*row)
    return t


def _lost_cell(c: dict[str, Any]) -> str:
    """kv: acknowledged writes lost of those made; quiet memory: whether its memory
    arrived as it left ("0" or "BAD")."""
    if c["workload"].startswith("kv"):
        return f"{c['lost']}/{c['acked']}"
    if c.get("same_memory") is not None:
        return "0" if c["same_memory"] else "BAD"
    return "-"


def _lan(report: dict[str, Any]) -> bool:
    """Is it ``lanmigrate``'s report (``--link netns``)?"""
    return str(report.get("link", "")).startswith("lan-")


def to_json(report: dict[str, Any]) -> dict[str, Any]:
    """The report is plain data already: it is its own JSON document."""
    return report


def go_lines(report: dict[str, Any]) -> list[str]:
    """``BenchmarkMigrate/loopback/kv_256 1 <downtime ns> ns/op ...`` for benchstat."""
    if _lan(report):
        from ckpt.bench import lanmigrate

        return lanmigrate.go_lines(report)
    lines = []
    for c in report["cells"]:
        name = f"BenchmarkMigrate/{report['link']}/{c['workload'].replace(':', '_')}"
        if c.get("load") == "keepalive":
            name += "_keepalive"
        if c.get("mode", "pre-copy") != "pre-copy":
            name += "_" + c["mode"].replace("-", "")
        fields = [
            name,
            "1",
            f"{c['downtime_ms'] * 1e6:.0f} ns/op",
            f"{c['frozen_ms'] * 1e6:.0f} frozen-ns",
            f"{c['gap_ms'] * 1e6:.0f} gap-ns",
            f"{c['total_ms'] * 1e6:.0f} total-ns",
        ]
        if c.get("baseline_ms"):
            fields.append(f"{c['baseline_ms'] * 1e6:.0f} baseline-ns")
        if c.get("last_page_ms"):
            fields.append(f"{c['last_page_ms'] * 1e6:.0f} last-page-ns")
        fields += [f"{c['bytes_sent']} sent-B", f"{c['lost']} lost"]
        if c.get("same_memory") is not None:
            fields.append(f"{0 if c['same_memory'] else 1} wrong-memory")
        lines.append("\t".join(fields))
    return lines


def plot(report: dict[str, Any], path: Path) -> Path:
    """Per cell, frozen time, downtime and client-visible gap (left) and total time
    against the local baseline (middle), as grouped bars, and post-copy's window
    (right: bytes still only on the source over time); written as a PNG.  Check the
    path first with ``scale.check_plot`` so a long run never ends in a failed plot."""
    from ckpt.bench.scale import _pyplot

    plt = _pyplot()
    cells = report["cells"]
    labels = [_label(c) for c in cells]
    at = range(len(cells))
    windows = [c for c in cells if c.get("window")]
    fig, axes = plt.subplots(1, 3 if windows else 2, figsize=(16 if windows else 11, 4.4))
    if windows:  # post-copy: what is still only on the source, over time
        ax = axes[2]
        for c in windows:
            ax.plot(
                [w[0] for w in c["window"]],
                [w[1] / (1 << 20) for w in c["window"]],
                label=_label(c),
            )
        ax.set(xlabel="ms after the freeze", ylabel="MiB still on the source")
        ax.set_title("post-copy's window: memory split between hosts")
        ax.legend(fontsize=7)
    for ax, bars, title in (
        (
            axes[0],
            (("frozen_ms", "frozen"), ("downtime_ms", "downtime"), ("gap_ms", "client gap")),
            "the freeze, as the source and a client see it",
        ),
        (
            axes[1],
            (("total_ms", "migration"), ("baseline_ms", "local pre-copy + restore")),
            "total time",
        ),
    ):
        width = 0.8 / len(bars)
        for i, (attr, name) in enumerate(bars):
            ax.bar(
                [x + i * width for x in at],
                [float(c.get(attr) or 0.0) for c in cells],
                width,
                label=name,
            )
        ax.set_xticks([x + width * (len(bars) - 1) / 2 for x in at], labels, fontsize=7)
        ax.set(ylabel="ms")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"ckpt bench migrate over {report['link']} — {report['machine'].get('cpu', '')}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path
