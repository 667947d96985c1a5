"""``ckpt bench migrate --link netns``: a sandbox with its own address moves from host
A to host B of one LAN (``ckpt.bench.lan``) while clients on the LAN keep talking to it.

The sandbox runs on A with an address on the LAN (``ckpt run --bridge sbr --ip``),
``ckpt serve`` on B takes it, A's uplink is shaped by ``tc tbf`` to ``shape``.  In the
client's namespace, ``lanload`` keeps ``KEEPALIVE`` keep-alive connections asking
``GET /`` and, for ``kv:N``, a writer PUTting numbered writes over half the store's
keys, all to the sandbox's address; ``ckpt migrate`` moves it (its address, MAC and connections) to B meanwhile.
Afterwards every key written is read back from the address, now B's, and compared
with its last acknowledged value.

Per run: frozen time and downtime (``ckpt migrate --json``), total time, and what the
clients saw (``lantally``): resets, refusals, reconnects, timeouts, non-200
answers, lost acknowledged writes, and each client's longest gap between two answers
(the longest and the median over the clients).  A cell is ``runs`` runs of one workload: times are medians,
counts are totals (a single reset in five runs shows).

Every wait is bounded; the LAN, the sandboxes and their namespaces are removed on any
exit (``lan`` removes its namespaces and what is named in ``made``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ckpt.bench import lanload, lantally, migrate
from ckpt.bench.harness import BenchError, machine_info
from ckpt.pycommand import ckpt_argv

DEFAULT_RUNS = 5
SERVE_PORT = 7070
RELAY_PORT = 7071
HTTP_PORT = 8080
INTERVAL_S = 0.01  # between a keep-alive client's GETs
SETTLE_S = 0.5  # load before the move, and after it before the clients stop
STEP_TIMEOUT_S = 180.0  # one ckpt command
MIGRATE_TIMEOUT_S = 600.0
CLIENT_LIFETIME_S = MIGRATE_TIMEOUT_S + 120.0
READY_TIMEOUT_S = lanload.READY_TIMEOUT_S + 10.0
RESULT_TIMEOUT_S = 120.0
SERVE_WAIT_S = 60.0
FIRST_IP = 10  # sandboxes get lan.sandbox_ip(FIRST_IP + n)
MAX_SAMPLES = 140  # addresses left in the /24 above FIRST_IP
SERVED = ("kv:", "memory:", "http")  # workloads whose sandbox answers HTTP
FAILS = ("resets", "refusals", "reconnects", "timeouts", "errors")
TIMES = ("frozen_ms", "downtime_ms", "total_ms", "gap_max_ms", "gap_median_ms", "last_page_ms")
COUNTS = ("resets", "refusals", "reconnects", "timeouts", "errors", "lost", "acked")


def check_workloads(workloads: Sequence[str]) -> None:
    """Refuse, before anything starts, a workload whose sandbox serves no HTTP."""
    if not workloads:
        raise BenchError("no workload: give e.g. --workloads kv:256")
    for w in workloads:
        slots_of(w)  # a kv:N with no N is refused here too
        if not any(w == s or (s.endswith(":") and w.startswith(s)) for s in SERVED):
            served = "kv:N, memory:N or http"
            why = " (nginx's master and workers serve nothing over the network)"
            raise BenchError(
                f"workload {w!r} answers no HTTP to measure; give {served}"
                + (why if w == "nginx" else "")
            )


def slots_of(workload: str) -> int:
    """The writer's keys for ``kv:N``: half the store's 4 KiB values, so that it never
    fills however long the run (0: no writer)."""
    if not workload.startswith("kv:"):
        return 0
    try:
        mib = int(workload[3:])
    except ValueError:
        raise BenchError(f"bad workload {workload!r}: give kv:N, N in MiB") from None
    return max(1, mib * (1 << 20) // lanload.VALUE_BYTES // 2)


def _ckpt_argv(root: Path, *args: str) -> list[str]:
    return ckpt_argv("--root", str(root), *args)


def _in(host: Any, argv: list[str]) -> list[str]:
    """``argv`` in ``host``'s network namespace only (the mounts stay: /sys, cgroups)."""
    return ["nsenter", f"--net=/run/netns/{host.netns}", *argv]


def _ckpt(host: Any, root: Path, *args: str, timeout: float = STEP_TIMEOUT_S) -> str:
    from ckpt.bench.netns import child_env

    argv = _in(host, _ckpt_argv(root, *args))
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=child_env()
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"ckpt {' '.join(args[:2])} did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        raise BenchError(f"ckpt {' '.join(args[:2])} failed: {proc.stderr.strip()[-300:]}")
    return proc.stdout


def _line(proc: subprocess.Popen[bytes], timeout: float, what: str) -> str:
    """One line of ``proc``'s stdout, within ``timeout``."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise BenchError(f"{what} said nothing within {timeout:g} s")
    return proc.stdout.readline().decode(errors="replace").strip()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


class Bench:
    """One LAN, one ``ckpt serve`` on B, the runs; everything removed by ``close``."""

    def __init__(self, bed: Any, top: Path, shape: str, delay_ms: float, rate: int) -> None:
        self.bed, self.top = bed, top
        self.src, self.dst = top / "src", top / "dst"
        self.key = top / "key"
        self.key.write_bytes(os.urandom(32))
        os.chmod(self.key, 0o600)
        self.shape, self.delay_ms, self.rate = shape, delay_ms, rate
        self.to = f"{bed.b.address}:{SERVE_PORT}"
        self.numbers = itertools.count(FIRST_IP)

    def start(self) -> None:
        from ckpt.bench import migrate, netns

        bed = self.bed
        log = open(self.top / "serve.log", "wb")  # noqa: SIM115  (the server writes it)
        argv = _ckpt_argv(self.dst, "serve", "--listen", self.to, "--key-file", str(self.key),
                          "--bridge", bed.bridge)  # fmt: skip
        serve = bed.nsenter(bed.b, argv, stdout=log, stderr=log, env=netns.child_env())
        log.close()
        migrate._wait_listening(self.top / "serve.log", serve)
        if self.delay_ms > 0:  # the migration's stream, delayed by a relay on A
            argv = netns.python_argv(
                netns.run_relay, "127.0.0.1", RELAY_PORT, bed.b.address, SERVE_PORT,
                self.delay_ms, MIGRATE_TIMEOUT_S,
            )  # fmt: skip
            relay = bed.nsenter(bed.a, argv, stdout=subprocess.PIPE, env=netns.child_env())
            if _line(relay, SERVE_WAIT_S, "the delaying relay") != "ready":
                raise BenchError("the delaying relay did not start")
            self.to = f"127.0.0.1:{RELAY_PORT}"

    def _forget(self, sid: str) -> None:
        """Name the sandbox's namespace on both sides for ``lan`` to remove at exit."""
        from ckpt.sandbox.wire import netns
        from ckpt.sandbox.wire.paths import Root

        for root in (self.src, self.dst):
            tag = netns.root_hash(Root(root).cgroup_parent())
            self.bed.made.append(netns.names(tag, sid)[0])

    def once(self, workload: str, mode: str = "pre-copy") -> dict[str, Any]:
        """Run, load, migrate A → B, read back, count; the sandbox deleted after."""
        from ckpt.bench import netns

        n = next(self.numbers)
        sid, ip = f"lan-{os.getpid()}-{n}", self.bed.sandbox_ip(n)
        self._forget(sid)
        client: subprocess.Popen[bytes] | None = None
        try:
            _ckpt(self.bed.a, self.src, "run", sid, "--workload", workload, "--bridge",
                  self.bed.bridge, "--ip", f"{ip}/24", "--port", str(HTTP_PORT))  # fmt: skip
            write_every = lanload.VALUE_BYTES / self.rate
            argv = netns.python_argv(lanload.main, ip, HTTP_PORT, INTERVAL_S, write_every,
                                     CLIENT_LIFETIME_S, slots_of(workload))  # fmt: skip
            client = self.bed.nsenter(self.bed.client, argv, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, env=netns.child_env())  # fmt: skip
            if (said := _line(client, READY_TIMEOUT_S, "the clients")) != "ready":
                raise BenchError(f"the clients did not get answers from {ip}: {said}")
            time.sleep(SETTLE_S)
            tcp0 = tcp_counters(self.bed.client)
            t0 = time.monotonic_ns()
            out = _ckpt(self.bed.a, self.src, "migrate", sid, "--to", self.to, "--key-file",
                        str(self.key), "--json", *migrate.MODES[mode],
                        timeout=MIGRATE_TIMEOUT_S)  # fmt: skip
            t1 = time.monotonic_ns()
            time.sleep(SETTLE_S)  # the clients are answered from B for a while
            tcp1 = tcp_counters(self.bed.client)
            assert client.stdin is not None
            client.stdin.write(b"stop\n")
            client.stdin.flush()
            seen = json.loads(_line(client, RESULT_TIMEOUT_S, "the clients' results"))
            moved = json.loads(out)
            where = json.loads(_ckpt(self.bed.b, self.dst, "state", sid))
            if where.get("status") != "running":
                raise BenchError(f"{sid} is {where.get('status')} on B after the move")
            figures = sample(moved, seen, t0, t1)
            figures["client_tcp"] = {k: tcp1[k] - tcp0.get(k, 0) for k in tcp1}
            return figures
        finally:
            if client is not None:
                _stop(client)
            for host, root in ((self.bed.a, self.src), (self.bed.b, self.dst)):
                with contextlib.suppress(BenchError):
                    if root.is_dir() and _has(root, sid):
                        _ckpt(host, root, "delete", sid, "--force")

    def close(self) -> None:
        for host, root in ((self.bed.a, self.src), (self.bed.b, self.dst)):
            if root.is_dir():
                with contextlib.suppress(BenchError):
                    _ckpt(host, root, "template", "stop", timeout=60)


TCP_COUNTERS = ("TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPLossProbes", "TcpExtTCPSynRetrans")


def tcp_counters(host: Any) -> dict[str, int]:
    """The kernel's TCP counters of ``host``'s namespace that say why a client waited
    (retransmissions, retransmission timeouts); empty without ``nstat`` (iproute2)."""
    if shutil.which("nstat") is None:
        return {}
    try:
        out = subprocess.run(_in(host, ["nstat", "-asz", *TCP_COUNTERS]), capture_output=True,
                             text=True, timeout=15).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_nstat(out)


def parse_nstat(out: str) -> dict[str, int]:
    """``nstat -a`` lines (``Name value rate``), the ones named in ``TCP_COUNTERS``."""
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in TCP_COUNTERS and parts[1].isdigit():
            found[parts[0]] = int(parts[1])
    return found


def _has(root: Path, sid: str) -> bool:
    from ckpt.sandbox.wire.paths import Root

    return sid in Root(root).ids()


def sample(moved: dict[str, Any], seen: dict[str, Any], t0: int, t1: int) -> dict[str, Any]:
    """One run's figures from ``ckpt migrate --json`` and the clients' events; ``t0``,
    ``t1``: when the migration started and ended (monotonic ns, the clients' clock)."""
    events = [tuple(e) for e in seen["events"]]
    acked_keys = [e[4] for e in events if e[0] == "answer" and e[4]]
    digests = {k: lanload.digest(lanload.value_of(lanload.write_of(k)[1])) for k in acked_keys}
    t = lantally.tally(events, digests)  # type: ignore[arg-type]
    readback = {k: (int(v[0]), str(v[1])) for k, v in seen["readback"].items()}
    longest = max(t.longest_at_ns, key=lambda g: g[1] - g[0], default=(t0, t0))
    final = next((r for r in moved.get("rounds", []) if r.get("final")), {})
    return {
        "frozen_ms": float(moved["frozen_time_ms"]),
        "downtime_ms": float(moved["downtime_ms"]),
        "total_ms": round((t1 - t0) / 1e6, 3),
        "gap_max_ms": t.gap_max_ms,
        "gap_median_ms": t.gap_median_ms,
        "client_gaps_ms": t.gaps_ms,
        # where the longest gap lies, from the start of ``ckpt migrate``
        "gap_from_ms": round((longest[0] - t0) / 1e6, 3),
        "gap_to_ms": round((longest[1] - t0) / 1e6, 3),
        "resets": t.resets,
        "refusals": t.refusals,
        "reconnects": t.reconnects,
        "timeouts": t.timeouts,
        "errors": t.errors,
        "answers": t.answers,
        "acked": t.acked_writes,
        "lost": lantally.lost_writes(t.acked, readback),
        "rounds": len(moved.get("rounds", [])),
        "mode": str(moved.get("mode") or "pre-copy"),
        "last_page_ms": float(moved.get("last_page_ms") or 0.0),
        "window": moved.get("postcopy_window") or [],
        "final_round": final,
        "counters": {k: v for k, v in moved.items() if isinstance(v, int | float)},
    }


def cell(workload: str, samples: list[dict[str, Any]], mode: str = "pre-copy") -> dict[str, Any]:
    """Medians of the times, totals of the counts, and every sample."""
    out: dict[str, Any] = {"workload": workload, "mode": mode, "runs": len(samples)}
    for name in TIMES:
        out[name] = round(statistics.median(s[name] for s in samples), 3) if samples else 0.0
    for name in COUNTS:
        out[name] = sum(int(s[name]) for s in samples)
    out["samples"] = samples
    return out


def run(
    workloads: Sequence[str],
    runs: int = DEFAULT_RUNS,
    rate: int = 2 << 20,
    progress: Callable[[str], None] | None = None,
    *,
    shape: str = "1gbit",
    delay_ms: float = 0.0,
    modes: Sequence[str] = ("pre-copy",),
) -> dict[str, Any]:
    """Every workload ``runs`` times in each mode on one LAN, removed afterwards."""
    from ckpt.bench import netns
    from ckpt.bench.lan import lan

    check_workloads(workloads)
    cases = len(workloads) * len(modes)
    if not 1 <= runs * cases <= MAX_SAMPLES:
        raise BenchError(f"--runs {runs}: give 1 to {MAX_SAMPLES // cases} runs")
    reason = netns.unavailable_reason()
    if reason is not None:
        raise BenchError(f"--link netns: {reason}")
    top = Path(tempfile.mkdtemp(prefix="ckpt-bench-lan-"))
    cells = []
    try:
        with lan(rate=shape) as bed:
            bench = Bench(bed, top, shape, delay_ms, rate)
            try:
                bench.start()
                for workload in workloads:
                    for mode in modes:
                        samples = []
                        for i in range(runs):
                            if progress:
                                progress(f"{workload} {mode} run {i + 1}/{runs} ({shape})")
                            samples.append(bench.once(workload, mode))
                        cells.append(cell(workload, samples, mode))
            finally:
                bench.close()
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return {
        "machine": machine_info(),
        "link": f"lan-{shape}" + (f"+{delay_ms:g}ms" if delay_ms else ""),
        "rate_bytes_s": rate,
        "runs": runs,
        "clients": lanload.KEEPALIVE,
        "cells": cells,
    }


def render(report: dict[str, Any]) -> Any:
    """The cells as one table that fits 80 columns."""
    from rich import box
    from rich.table import Table

    t = Table(
        title=(
            f"bench migrate over a LAN ({report['link']}): medians of {report['runs']} runs, ms"
        ),
        title_justify="left",
        caption=(
            f"gap: the longest wait between two answers of one client ({report['clients']} "
            "keep-alive, and a writer for kv:N), max and median (~) over them; fails: "
            "resets/refusals/"
            "reconnects/timeouts/non-200 answers and lost/acked writes, totals; total in s"
        ),
        box=box.SIMPLE,
        pad_edge=False,
    )
    t.add_column("workload", no_wrap=True)
    for name in ("frozen", "down", "gap", "gap~", "last", "total", "fails", "lost"):
        t.add_column(name, justify="right", overflow="fold")  # a long count folds, whole
    for c in report["cells"]:
        fails = "/".join(str(c[k]) for k in FAILS)
        t.add_row(
            migrate._label(c),
            f"{c['frozen_ms']:.0f}",
            f"{c['downtime_ms']:.0f}",
            f"{c['gap_max_ms']:.0f}",
            f"{c['gap_median_ms']:.0f}",
            f"{c['last_page_ms']:.0f}" if c.get("last_page_ms") else "-",
            f"{c['total_ms'] / 1e3:.1f}",
            fails,
            f"{c['lost']}/{c['acked']}" if c["workload"].startswith("kv:") else "-",
        )
    return t


def to_json(report: dict[str, Any]) -> dict[str, Any]:
    """The report is plain data already: it is its own JSON document."""
    return report


def go_lines(report: dict[str, Any]) -> list[str]:
    """One line per run, ``BenchmarkMigrate/lan-1gbit/kv_256 1 <total ns> ns/op ...``:
    benchstat takes the medians."""
    lines = []
    for c in report["cells"]:
        name = f"BenchmarkMigrate/{report['link']}/{c['workload'].replace(':', '_')}"
        if c.get("mode", "pre-copy") != "pre-copy":
            name += "_" + c["mode"].replace("-", "")
        for s in c["samples"]:
            lines.append(
                "\t".join([
                    name, "1", f"{s['total_ms'] * 1e6:.0f} ns/op",
                    f"{s['frozen_ms'] * 1e6:.0f} frozen-ns",
                    f"{s['downtime_ms'] * 1e6:.0f} downtime-ns",
                    f"{s['gap_max_ms'] * 1e6:.0f} gap-max-ns",
                    f"{s['gap_median_ms'] * 1e6:.0f} gap-median-ns",
                    f"{s['resets']} resets", f"{s['refusals']} refusals",
                    f"{s['reconnects']} reconnects", f"{s['errors']} errors",
                    f"{s['lost']} lost",
                ])
            )  # fmt: skip
    return lines
