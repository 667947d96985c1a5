"""``ckpt bench store``: a local image directory against an ``s3://`` image, on the same
sandbox, in one run.

Per round, on one sandbox, in alternating order (local first, then S3 first):

* checkpoint wall (``--leave-running``), local directory and S3;
* upload rate: the image's bytes over the S3 checkpoint's wall;
* a second S3 checkpoint of the unchanged sandbox, under another name: the bytes it
  adds to the store (chunks the store lacked), against the first's;
* a checkpoint into a repository all rounds share: from the second round on, the bytes
  a new sandbox of the same workload (and seed) adds;
* the same three checkpoints with ``--encrypt`` (one key for the run) into repositories
  of their own ("s3 enc"): chunks sealed convergently still deduplicate;
* restore, from each, into a fresh sandbox, eager and ``--background``: the wall of the
  eager restore, and for both the time to the first HTTP response (restore started to
  ``GET /`` answered).  A ``--background`` restore from S3 starts with an empty chunk
  cache of its own.  A ``memory:N`` sandbox's ``/memory`` digest is checked against the
  original's after each restore (once its pages are in).  A workload that serves no
  HTTP (nginx) has answered when its restore returned: its first response is that.

The store is a SeaweedFS started for the run.  On loopback by default; with ``netns``
(:class:`Link`), in a network namespace of its own behind a veth shaped by ``tc tbf``
and a delaying TCP relay (this kernel has no netem), while the rounds run in a second
namespace (ckpt/bench/netns.py): the traffic never leaves the namespaces the run made,
and they are removed on every exit.  Sandboxes are cold-started (no template), so both
sides pay the same interpreter start; the library is called in-process and timed around
each call.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckpt.bench.harness import BenchError, machine_info

BUCKET = "ckpt-bench"
SANDBOX = "bench-store"
FIRST_RESPONSE_S = 120.0  # deadline for a restored sandbox's first answer
FILL_S = 600.0  # deadline for a background restore's pages to be all in
NETNS_S = 3600.0  # deadline for all the rounds across the namespace link
MODES = ("eager", "bg")
SIDES = ("local", "s3", "s3enc")
SUFFIX = {"s3": "", "s3enc": "_enc"}  # the store sides' keys in a row


@dataclass(frozen=True)
class Link:
    """The shaped link to the store: ``rate`` a tc rate ("1gbit"), ``delay_ms`` added by
    the relay in each direction (so the round trip gains twice that)."""

    rate: str = "1gbit"
    delay_ms: float = 5.0


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _store_bytes(url: str) -> int:
    from ckpt.storage.repository import CHUNKS, Repository

    repo = Repository.open(url)
    return sum(obj.size for obj in repo.store.list(CHUNKS))


def _address(lifecycle: Any, root: Any) -> tuple[str, int] | None:
    """The sandbox's HTTP address; None for a workload that serves no HTTP."""
    address = lifecycle.state(root, SANDBOX).address
    if not address:
        return None
    host, _, port = address.rpartition(":")
    return host, int(port)


def _digest(lifecycle: Any, root: Any, workload: str) -> str | None:
    """The memory digest of a ``memory:N`` sandbox (every page read); None otherwise."""
    from ckpt.sandbox.host.http import get_json

    if not workload.startswith("memory:"):
        return None
    address = _address(lifecycle, root)
    if address is None:
        raise BenchError(f"the {workload} sandbox serves no HTTP")
    status, body = get_json(*address, "/memory", timeout=60)
    if status != 200:
        raise BenchError(f"GET /memory answered {status}")
    return str(body["memory_sha256"])


def _first_response(address: tuple[str, int] | None, deadline: float) -> None:
    """Wait for the sandbox to answer ``GET /`` (any status line counts); a sandbox
    that serves no HTTP (nginx) answered when its restore did."""
    while address is not None:
        try:
            with socket.create_connection(address, timeout=FIRST_RESPONSE_S) as conn:
                conn.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                if conn.recv(16).startswith(b"HTTP/1."):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise BenchError(f"the restored sandbox did not answer GET / on {address}")
        time.sleep(0.005)


def _filled(lifecycle: Any, root: Any, workload: str) -> None:
    """Wait until a memory:N sandbox's background fill is done."""
    from ckpt.sandbox.host.http import get_json

    if not workload.startswith("memory:"):
        return
    address = _address(lifecycle, root)
    deadline = time.monotonic() + FILL_S
    while address is not None and get_json(*address, "/", timeout=60)[1].get("pages_loading"):
        if time.monotonic() > deadline:
            raise BenchError(f"the background fill did not end within {FILL_S:g} s")
        time.sleep(0.05)


def _restore(
    lifecycle: Any, root: Any, image: Any, background: bool, cache: Path, key: bytes | None
) -> tuple:
    """(restore wall, first response) in ms; a ``--background`` restore gets the empty
    chunk cache ``cache`` (the sandbox is cold-started: it inherits this environment)."""
    with _env({"CKPT_CHUNK_CACHE_DIR": str(cache)}):
        t0 = time.perf_counter()
        lifecycle.restore(root, SANDBOX, image, background=background, template=False, key=key)
        t1 = time.perf_counter()
        _first_response(_address(lifecycle, root), time.monotonic() + FIRST_RESPONSE_S)
        t2 = time.perf_counter()
    return (t1 - t0) * 1e3, (t2 - t0) * 1e3


def _timed(fn: Any, *args: Any, **kw: Any) -> float:
    t0 = time.perf_counter()
    fn(*args, **kw)
    return (time.perf_counter() - t0) * 1e3


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def _round(
    lifecycle: Any, root: Any, work: Path, base: str, workload: str, n: int, key: bytes
) -> dict:
    """One round on a fresh sandbox (odd rounds S3 first) and a repository of its own;
    figures in ms and bytes.  Last, the sandbox is also checkpointed into a repository
    that every round shares: from the second round on, what that uploads is what a new
    sandbox of the same workload adds."""
    from ckpt.storage.repository import Repository

    repo = f"{base}/round-{n}"
    shared = f"{base}/shared"
    lifecycle.run(root, SANDBOX, workload, port=0, template=False)
    digest = _digest(lifecycle, root, workload)
    local = work / f"local-{n}"
    images = {"local": local, "s3": f"{repo}/img-{n}", "s3enc": f"{repo}-enc/img-{n}"}
    repos = {"s3": repo, "s3enc": f"{repo}-enc"}
    keys = {"s3enc": key}
    row: dict[str, Any] = {}
    order = SIDES[n % len(SIDES) :] + SIDES[: n % len(SIDES)]

    def checkpoint(side: str, image: Any) -> float:
        enc = {"options": {"encrypt": True}} if side in keys else {}
        return _timed(
            lifecycle.checkpoint, root, SANDBOX, image, leave_running=True,
            key=keys.get(side), **enc,
        )  # fmt: skip

    for side in order:
        before = _store_bytes(repos[side]) if side in repos else 0
        row[f"checkpoint_{side}_ms"] = checkpoint(side, images[side])
        if side in repos:
            row[f"uploaded_first{SUFFIX[side]}"] = _store_bytes(repos[side]) - before
    row["image_bytes"] = Repository.open(repo).read_manifest(f"img-{n}").size
    row["local_bytes"] = _dir_bytes(local)
    for side, end in SUFFIX.items():
        before = _store_bytes(repos[side])
        checkpoint(side, f"{images[side]}-again")
        row[f"uploaded_second{end}"] = _store_bytes(repos[side]) - before
        where = f"{shared}{end.replace('_', '-')}"
        before = _store_bytes(where)
        checkpoint(side, f"{where}/img-{n}")
        row[f"uploaded_new_sandbox{end}"] = _store_bytes(where) - before
    lifecycle.delete(root, SANDBOX, force=True)
    modes = MODES if n % 2 == 0 else MODES[::-1]
    for side in order:
        for mode in modes:
            image = images[side]
            cache = work / f"chunks-{n}-{side}-{mode}"
            wall, first = _restore(lifecycle, root, image, mode == "bg", cache, keys.get(side))
            if mode == "eager":
                row[f"restore_{side}_ms"] = wall
            row[f"first_{side}_{mode}_ms"] = first
            if mode == "bg":
                _filled(lifecycle, root, workload)
            if _digest(lifecycle, root, workload) != digest:
                raise BenchError(f"restore ({mode}) from {image} changed the memory digest")
            lifecycle.delete(root, SANDBOX, force=True)
            shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(local, ignore_errors=True)
    return row


def _rounds(work: Path, base: str, workload: str, count: int) -> list[dict[str, Any]]:
    """``count`` rounds in a root under ``work``, against the store the AWS variables of
    this process name."""
    from ckpt.sandbox.client import lifecycle
    from ckpt.sandbox.wire.paths import Root

    root = Root(work / "root")
    root.ensure()
    rows = []
    key = os.urandom(32)  # the encrypted side's, one for the run: its chunks deduplicate
    for n in range(count):
        try:
            rows.append(_round(lifecycle, root, work, base, workload, n, key))
        finally:
            with contextlib.suppress(Exception):
                lifecycle.delete(root, SANDBOX, force=True)
    return rows


def rounds_in_child(work: str, base: str, workload: str, count: int, env: dict, out: str) -> None:
    """``_rounds`` in a fresh interpreter inside the client's namespace
    (``HostNetwork.python``): the rows, or the error, as JSON in ``out``."""
    os.environ.update(env)
    try:
        result: dict[str, Any] = {"rounds": _rounds(Path(work), base, workload, count)}
    except Exception as exc:  # reported by the parent, in one line
        result = {"error": f"{type(exc).__name__}: {exc}"}
    Path(out).write_text(json.dumps(result))


def serve_store(address: str, delay_ms: float, ready: str, lifetime: float) -> None:
    """Inside the store's namespace: a SeaweedFS on its loopback, reachable only through
    a ``DelayRelay`` on ``address``; its AWS variables go to ``ready`` (JSON).  Runs until
    SIGTERM or ``lifetime``, then stops the server."""
    from ckpt.bench import seaweed
    from ckpt.bench.netns import DelayRelay

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = seaweed.start(buckets=(BUCKET,))
    try:
        target = ("127.0.0.1", server.ports["s3.port"])
        with DelayRelay(
            (address, 0), target, delay_ms, max_connections=256, lifetime=lifetime
        ) as relay:
            env = {**server.env(), "AWS_ENDPOINT_URL": f"http://{address}:{relay.address[1]}"}
            temp = Path(ready + ".tmp")
            temp.write_text(json.dumps(env))
            temp.rename(ready)
            stop.wait(lifetime)
    finally:
        server.stop()


def _wait_file(path: Path, proc: subprocess.Popen[Any], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise BenchError(f"{what} exited ({proc.returncode}) before it was ready")
        if time.monotonic() > deadline:
            raise BenchError(f"{what} was not ready within {timeout:g} s")
        time.sleep(0.05)


def _rounds_across(link: Link, work: Path, base: str, workload: str, count: int) -> list:
    """The rounds in one namespace, the store in another, across the shaped link."""
    from ckpt.bench import netns

    netns.remove_stale()  # what a SIGKILLed run left
    with netns.host_network(2, rate=link.rate) as bed:
        store_host, client_host = bed.hosts
        ready = work / "store-env.json"
        logs = open(work / "netns.log", "wb")  # noqa: SIM115  (closed below)
        try:
            store = bed.python(
                store_host, serve_store, store_host.address, link.delay_ms, str(ready),
                NETNS_S, stdout=logs, stderr=logs,
            )  # fmt: skip
            _wait_file(ready, store, "the store in its namespace", 90.0)
            env = json.loads(ready.read_text())
            out = work / "rounds.json"
            client = bed.python(
                client_host, rounds_in_child, str(work), base, workload, count, env, str(out),
                stdout=logs, stderr=logs,
            )  # fmt: skip
            try:
                client.wait(NETNS_S)
            except subprocess.TimeoutExpired:
                raise BenchError(f"the rounds did not end within {NETNS_S:g} s") from None
        finally:
            logs.close()
        if not out.exists():
            tail = (work / "netns.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise BenchError(f"the rounds in their namespace failed: {' | '.join(tail)}")
        result = json.loads(out.read_text())
    if "error" in result:
        raise BenchError(f"across the namespace link: {result['error']}")
    return list(result["rounds"])


def run(workload: str = "memory:64", count: int = 3, link: Link | None = None) -> dict[str, Any]:
    """Start SeaweedFS (on loopback, or across ``link``), run ``count`` rounds on
    ``workload``, stop and remove everything."""
    from ckpt.bench import seaweed

    rows = []
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-store-") as temp:
        work = Path(temp)
        base = f"s3://{BUCKET}/bench-{os.getpid()}"
        if link is not None:
            rows = _rounds_across(link, work, base, workload, count)
        else:
            server = seaweed.start(buckets=(BUCKET,))
            try:
                with _env(server.env()):
                    rows = _rounds(work, base, workload, count)
            finally:
                server.stop()
    where = "loopback" if link is None else f"netns {link.rate}, +{link.delay_ms:g} ms each way"
    return {
        "machine": machine_info(),
        "workload": workload,
        "count": count,
        "link": where,
        "rounds": rows,
    }


def summary(report: dict[str, Any]) -> dict[str, float]:
    """Medians over the rounds, and the ratios the figures are judged by."""
    rounds = report["rounds"]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    med["upload_mb_s"] = med["image_bytes"] / 1e6 / (med["checkpoint_s3_ms"] / 1e3)
    med["checkpoint_ratio"] = med["checkpoint_s3_ms"] / med["checkpoint_local_ms"]
    med["restore_ratio"] = med["restore_s3_ms"] / med["restore_local_ms"]
    for mode in MODES:
        med[f"first_{mode}_ratio"] = med[f"first_s3_{mode}_ms"] / med[f"first_local_{mode}_ms"]
        med[f"first_{mode}_extra_ms"] = med[f"first_s3_{mode}_ms"] - med[f"first_local_{mode}_ms"]
    for end in SUFFIX.values():
        first = max(1, med[f"uploaded_first{end}"])
        med[f"second{end}_pct"] = 100.0 * med[f"uploaded_second{end}"] / first
        later = [r[f"uploaded_new_sandbox{end}"] for r in rounds[1:]]  # round 0 filled it
        med[f"uploaded_new_sandbox{end}"] = statistics.median(later) if later else float("nan")
        med[f"new_sandbox{end}_pct"] = 100.0 * med[f"uploaded_new_sandbox{end}"] / first
    med["checkpoint_enc_ratio"] = med["checkpoint_s3enc_ms"] / med["checkpoint_s3_ms"]
    med["restore_enc_ratio"] = med["restore_s3enc_ms"] / med["restore_s3_ms"]
    return med


def render(report: dict[str, Any]) -> Any:
    """One table, 80 columns: a row per measure, local, S3 and encrypted S3 side by
    side, with S3 against local and encrypted against plain S3."""
    from rich.table import Table

    m = summary(report)
    table = Table(
        title=f"ckpt bench store: {report['workload']}, medians of {report['count']},"
        f" {report.get('link', 'loopback')}",
        title_justify="left",
    )
    for col in ("measure", "local dir", "s3", "s3 enc", "s3/local", "enc/s3"):
        table.add_column(col, justify="left" if col == "measure" else "right")

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else ""

    for label, key in (("checkpoint wall ms", "checkpoint"), ("restore ms (eager)", "restore")):
        local, s3, enc = (m[f"{key}_{side}_ms"] for side in SIDES)
        table.add_row(
            label, f"{local:.1f}", f"{s3:.1f}", f"{enc:.1f}", ratio(s3, local), ratio(enc, s3)
        )
    for mode, label in (("eager", "eager"), ("bg", "bg")):
        local, s3, enc = (m[f"first_{side}_{mode}_ms"] for side in SIDES)
        table.add_row(
            f"1st answer ms, {label}",
            f"{local:.1f}",
            f"{s3:.1f}",
            f"{enc:.1f}",
            ratio(s3, local),
            ratio(enc, s3),
        )
    table.add_row("image bytes", f"{m['local_bytes']:.0f}", f"{m['image_bytes']:.0f}", "", "", "")
    table.add_row("upload MB/s", "", f"{m['upload_mb_s']:.1f}", "", "", "")
    first, first_enc = m["uploaded_first"], m["uploaded_first_enc"]
    table.add_row(
        "uploaded, 1st ckpt", "", f"{first:.0f}", f"{first_enc:.0f}", "", ratio(first_enc, first)
    )
    for label, key in (("uploaded, 2nd ckpt", "second"), ("uploaded, new sbx", "new_sandbox")):
        table.add_row(
            label,
            "",
            f"{m[f'{key}_pct']:.1f}%",
            f"{m[f'{key}_enc_pct']:.1f}%",
            "",
            "",
        )
    return table


def to_json(report: dict[str, Any]) -> dict[str, Any]:
    return {**report, "summary": summary(report)}


def go_lines(report: dict[str, Any]) -> list[str]:
    m = summary(report)
    name = f"BenchmarkStore/{report['workload'].replace(':', '')}"
    if report.get("link", "loopback") != "loopback":
        name += "/netns"
    n = str(report["count"])
    return [
        f"{name}/checkpoint/local\t{n}\t{m['checkpoint_local_ms'] * 1e6:.0f} ns/op",
        f"{name}/checkpoint/s3\t{n}\t{m['checkpoint_s3_ms'] * 1e6:.0f} ns/op"
        f"\t{m['upload_mb_s']:.1f} MB/s",
        f"{name}/restore/local\t{n}\t{m['restore_local_ms'] * 1e6:.0f} ns/op",
        f"{name}/restore/s3\t{n}\t{m['restore_s3_ms'] * 1e6:.0f} ns/op",
        *(
            f"{name}/first-response-{mode}/{side}\t{n}\t{m[f'first_{side}_{mode}_ms'] * 1e6:.0f} ns/op"
            for mode in MODES
            for side in SIDES
        ),
        *(
            f"{name}/{what}-checkpoint/{side}\t{n}\t{m[f'uploaded_{key}{end}']:.0f} B/op"
            f"\t{m[f'{key}{end}_pct']:.2f} pct-of-first"
            for side, end in SUFFIX.items()
            for what, key in (("second", "second"), ("new-sandbox", "new_sandbox"))
        ),
        f"{name}/checkpoint/s3enc\t{n}\t{m['checkpoint_s3enc_ms'] * 1e6:.0f} ns/op",
        f"{name}/restore/s3enc\t{n}\t{m['restore_s3enc_ms'] * 1e6:.0f} ns/op",
    ]
