"""``ckpt bench load``: real HTTP clients keep a sandbox busy across checkpoint/restore.

N client threads send keep-alive GETs to an ``http`` sandbox on 127.0.0.1 while the
main thread runs ``ckpt checkpoint`` → ``ckpt restore`` cycles through the CLI (as
separate processes, as a user would), once with the warm template (drain and socket
handover) and once with ``--no-template`` (the port is bound anew).  Every request ends
as one of:

* answered: a complete response;
* refused: the connection was refused (no process listened);
* dropped: the request was sent and the connection closed without a response;
* failed: anything else (a timeout, a malformed reply).

The server's own request count, read before and after, is compared with the clients'
answered count: equal means every request was answered exactly once.  Loops are
bounded in count and in time, and they only ever target 127.0.0.1.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpt.bench.harness import BenchError, machine_info
from ckpt.bench.lifecycle import ckpt_command

HOST = "127.0.0.1"
MAX_REQUESTS_PER_CLIENT = 1_000_000
CLIENT_TIMEOUT_S = 30.0
SETTLE_S = 0.5


@dataclass
class Tally:
    """What one client saw."""

    answered: int = 0
    refused: int = 0
    dropped: int = 0
    failed: int = 0
    latencies_s: list[float] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.answered += other.answered
        self.refused += other.refused
        self.dropped += other.dropped
        self.failed += other.failed
        self.latencies_s += other.latencies_s


def _client(port: int, stop: threading.Event, deadline: float, out: Tally) -> None:
    conn: http.client.HTTPConnection | None = None
    for _ in range(MAX_REQUESTS_PER_CLIENT):
        if stop.is_set() or time.monotonic() > deadline:
            break
        if conn is None:
            conn = http.client.HTTPConnection(HOST, port, timeout=CLIENT_TIMEOUT_S)
        t0 = time.perf_counter()
        try:
            try:
                if conn.sock is None:
                    conn.connect()
            except ConnectionRefusedError:
                out.refused += 1
                conn.close()
                conn = None
                time.sleep(0.005)  # a client's back-off before it tries again
                continue
            conn.request("GET", "/")
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                out.failed += 1
                continue
            out.answered += 1
            out.latencies_s.append(time.perf_counter() - t0)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            out.dropped += 1
            conn.close()
            conn = None
        except (OSError, http.client.HTTPException):
            out.failed += 1
            conn.close()
            conn = None
    if conn is not None:
        conn.close()


def _get_count(port: int) -> int:
    from ckpt.sandbox.host.http import get_json

    status, body = get_json(HOST, port, "/", timeout=CLIENT_TIMEOUT_S)
    if status != 200:
        raise BenchError(f"the sandbox answered {status} to a plain GET")
    return int(body["requests"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run_mode(template: bool, *, clients: int, cycles: int, progress: Any = None) -> dict[str, Any]:
    """One sandbox, ``clients`` threads, ``cycles`` checkpoint/restore cycles."""
    root = Path(tempfile.mkdtemp(prefix="ckpt-bench-load-"))
    base = [*ckpt_command(), "--root", str(root), *([] if template else ["--no-template"])]
    env = {**os.environ, "CKPT_TEMPLATE": "1" if template else "0"}
    env.pop("CKPT_FAULT", None)
    port = _free_port()

    def ckpt(*args: str) -> None:
        proc = subprocess.run([*base, *args], capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise BenchError(f"ckpt {' '.join(args)} failed: {proc.stderr.strip()}")

    tallies = [Tally() for _ in range(clients)]
    stop = threading.Event()
    cycle_s: list[float] = []
    try:
        if template:
            ckpt("template", "start")
        ckpt("run", "load", "--workload", "http", "--port", str(port))
        before = _get_count(port)
        deadline = time.monotonic() + max(60.0, cycles * 30.0)
        threads = [
            threading.Thread(target=_client, args=(port, stop, deadline, t), daemon=True)
            for t in tallies
        ]
        for t in threads:
            t.start()
        time.sleep(SETTLE_S)
        image = root / "image"
        for i in range(cycles):
            if progress is not None:
                progress(f"{'template' if template else 'cold'}: cycle {i + 1}/{cycles}")
            t0 = time.perf_counter()
            ckpt("checkpoint", "load", "--image-path", str(image), "--force")
            ckpt("restore", "load", "--image-path", str(image))
            cycle_s.append(time.perf_counter() - t0)
        time.sleep(SETTLE_S)
        stop.set()
        for t in threads:
            t.join(CLIENT_TIMEOUT_S + 5)
        after = _get_count(port)
    finally:
        stop.set()
        subprocess.run([*base, "delete", "--force", "load"], capture_output=True, env=env)
        subprocess.run([*base, "template", "stop"], capture_output=True, env=env)
        shutil.rmtree(root, ignore_errors=True)
    total = Tally()
    for t in tallies:
        total.add(t)
    lat = total.latencies_s
    server = after - before - 1  # the final GET counts itself
    return {
        "start": "template" if template else "cold",
        "clients": clients,
        "cycles": cycles,
        "answered": total.answered,
        "refused": total.refused,
        "dropped": total.dropped,
        "failed": total.failed,
        "server_count": server,
        "exactly_once": server == total.answered,
        "p50_ms": _percentile(lat, 0.50) * 1e3,
        "p99_ms": _percentile(lat, 0.99) * 1e3,
        "max_ms": max(lat) * 1e3 if lat else float("nan"),
        "cycle_ms": statistics.median(cycle_s) * 1e3 if cycle_s else float("nan"),
    }


def modes_allowed(modes: tuple[str, ...], *, template_off: bool) -> tuple[str, ...]:
    """The modes to run: ``ckpt --no-template`` (``CKPT_TEMPLATE=0``) rules out the template.

    Asked for together with the template mode alone, it is a contradiction to report, not
    a run to start and silently change."""
    if not template_off:
        return modes
    left = tuple(m for m in modes if m != "template")
    if not left:
        raise BenchError(
            "--no-template leaves bench load nothing to run: drop it or pass --modes cold"
        )
    return left


def template_disabled() -> bool:
    """Whether the global ``--no-template`` (or ``CKPT_TEMPLATE=0``) is in force."""
    from ckpt.sandbox.client.template_client import disabled

    return disabled()


def run(
    *,
    clients: int = 8,
    cycles: int = 8,
    modes: tuple[str, ...] = ("template", "cold"),
    progress: bool = True,
) -> dict[str, Any]:
    """Each mode in turn; under ``--no-template`` only the cold one (see modes_allowed)."""
    if clients < 1 or cycles < 1:
        raise BenchError("--clients and --cycles must be at least 1")
    modes = modes_allowed(modes, template_off=template_disabled())
    from rich.progress import Progress

    rows = []
    with Progress(transient=True, disable=not progress) as bar:
        task = bar.add_task("load", total=None)
        for mode in modes:
            rows.append(
                run_mode(
                    mode == "template",
                    clients=clients,
                    cycles=cycles,
                    progress=lambda text: bar.update(task, description=text),
                )
            )
    return {"machine": machine_info(), "rows": rows}


def render(report: dict[str, Any]) -> Any:
    """Two tables of at most 8 columns each, so they fit an 80-column terminal."""
    from rich.console import Group
    from rich.table import Table

    counts = Table(
        title="ckpt bench load: requests across checkpoint → restore cycles", title_justify="left"
    )
    for col in ("start", "answered", "refused", "dropped", "failed", "server", "once"):
        counts.add_column(col, justify="left" if col == "start" else "right")
    times = Table(title="latency and cycle time", title_justify="left")
    for col in ("start", "p50", "p99", "max", "cycle"):
        times.add_column(col, justify="left" if col == "start" else "right")
    for r in report["rows"]:
        counts.add_row(
            r["start"],
            f"{r['answered']:,}",
            f"{r['refused']:,}",
            f"{r['dropped']:,}",
            f"{r['failed']:,}",
            f"{r['server_count']:,}",
            "yes" if r["exactly_once"] else "NO",
        )
        times.add_row(
            r["start"],
            f"{r['p50_ms']:.1f} ms",
            f"{r['p99_ms']:.1f} ms",
            f"{r['max_ms']:.0f} ms",
            f"{r['cycle_ms']:.0f} ms",
        )
    first = report["rows"][0] if report["rows"] else {}
    counts.caption = (
        f"{first.get('clients', 0)} keep-alive clients, {first.get('cycles', 0)} cycles. "
        "server: the sandbox's own count; once: server == answered."
    )
    return Group(counts, times)


def to_json(report: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(report, default=float))


def go_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for r in report["rows"]:
        lines.append(
            "\t".join(
                [
                    f"BenchmarkLoad/start={r['start']}/clients={r['clients']}",
                    str(r["cycles"]),
                    f"{r['cycle_ms'] * 1e6:.0f} ns/op",
                    f"{r['answered']} answered",
                    f"{r['refused']} refused",
                    f"{r['dropped']} dropped",
                    f"{r['p99_ms'] * 1e6:.0f} p99-ns",
                    f"{r['max_ms'] * 1e6:.0f} max-ns",
                ]
            )
        )
    return lines
