"""``ckpt bench store``: a local image directory against an ``s3://`` image, on the same
sandbox (``memory:N``), in one run.

Per round, on one sandbox, in alternating order (local first, then S3 first):

* checkpoint wall (``--leave-running``), local directory and S3;
* upload rate: the image's bytes over the S3 checkpoint's wall;
* a second S3 checkpoint of the unchanged sandbox, under another name: the bytes it
  adds to the store (chunks the store lacked), against the first's;
* a checkpoint into a repository all rounds share: from the second round on, the bytes
  a new sandbox of the same workload (and seed) adds;
* restore wall (eager), from each, into a fresh sandbox, whose ``/memory`` digest is
  checked against the original's.

The store is a SeaweedFS started for the run on loopback (``ckpt.storage.seaweed``),
stopped after.  Sandboxes are cold-started (no template), so both sides pay the same
interpreter start; the library is called in-process and timed around each call.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ckpt.bench.harness import BenchError, machine_info

BUCKET = "ckpt-bench"
SANDBOX = "bench-store"


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


def _digest(lifecycle: Any, root: Any) -> str:
    from ckpt.sandbox.http import get_json

    host, _, port = lifecycle.state(root, SANDBOX).address.rpartition(":")
    status, body = get_json(host, int(port), "/memory", timeout=60)
    if status != 200:
        raise BenchError(f"GET /memory answered {status}")
    return str(body["memory_sha256"])


def _timed(fn: Any, *args: Any, **kw: Any) -> float:
    t0 = time.perf_counter()
    fn(*args, **kw)
    return (time.perf_counter() - t0) * 1e3


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def _round(lifecycle: Any, root: Any, work: Path, base: str, workload: str, n: int) -> dict:
    """One round on a fresh sandbox (odd rounds S3 first) and a repository of its own;
    figures in ms and bytes.  Last, the sandbox is also checkpointed into a repository
    that every round shares: from the second round on, what that uploads is what a new
    sandbox of the same workload adds."""
    from ckpt.storage.repository import Repository

    repo = f"{base}/round-{n}"
    shared = f"{base}/shared"
    lifecycle.run(root, SANDBOX, workload, port=0, template=False)
    digest = _digest(lifecycle, root)
    local = work / f"local-{n}"
    s3 = f"{repo}/img-{n}"
    row: dict[str, Any] = {}
    order = ("s3", "local") if n % 2 else ("local", "s3")
    for side in order:
        image = s3 if side == "s3" else local
        before = _store_bytes(repo) if side == "s3" else 0
        row[f"checkpoint_{side}_ms"] = _timed(
            lifecycle.checkpoint, root, SANDBOX, image, leave_running=True
        )
        if side == "s3":
            row["uploaded_first"] = _store_bytes(repo) - before
    row["image_bytes"] = Repository.open(repo).read_manifest(f"img-{n}").size
    row["local_bytes"] = _dir_bytes(local)
    before = _store_bytes(repo)
    lifecycle.checkpoint(root, SANDBOX, f"{s3}-again", leave_running=True)
    row["uploaded_second"] = _store_bytes(repo) - before
    before = _store_bytes(shared)
    lifecycle.checkpoint(root, SANDBOX, f"{shared}/img-{n}", leave_running=True)
    row["uploaded_new_sandbox"] = _store_bytes(shared) - before
    lifecycle.delete(root, SANDBOX, force=True)
    for side in order:
        image = s3 if side == "s3" else local
        row[f"restore_{side}_ms"] = _timed(lifecycle.restore, root, SANDBOX, image)
        if _digest(lifecycle, root) != digest:
            raise BenchError(f"restore from {image} changed the memory digest")
        lifecycle.delete(root, SANDBOX, force=True)
    shutil.rmtree(local, ignore_errors=True)
    return row


def run(workload: str = "memory:64", count: int = 3) -> dict[str, Any]:
    """Start SeaweedFS, run ``count`` rounds on ``workload``, stop everything."""
    from ckpt.sandbox import lifecycle
    from ckpt.sandbox.paths import Root
    from ckpt.storage import seaweed

    if not workload.startswith("memory:"):
        raise BenchError(f"--workload {workload!r}: use memory:N (its /memory digest is checked)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-store-") as temp:
        work = Path(temp)
        root = Root(work / "root")
        root.ensure()
        server = seaweed.start(buckets=(BUCKET,))
        try:
            with _env(server.env()):
                base = f"s3://{BUCKET}/bench-{os.getpid()}"
                for n in range(count):
                    try:
                        rows.append(_round(lifecycle, root, work, base, workload, n))
                    finally:
                        with contextlib.suppress(Exception):
                            lifecycle.delete(root, SANDBOX, force=True)
        finally:
            server.stop()
    return {"machine": machine_info(), "workload": workload, "count": count, "rounds": rows}


def summary(report: dict[str, Any]) -> dict[str, float]:
    """Medians over the rounds, and the ratios the figures are judged by."""
    rounds = report["rounds"]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    med["upload_mb_s"] = med["image_bytes"] / 1e6 / (med["checkpoint_s3_ms"] / 1e3)
    med["checkpoint_ratio"] = med["checkpoint_s3_ms"] / med["checkpoint_local_ms"]
    med["restore_ratio"] = med["restore_s3_ms"] / med["restore_local_ms"]
    med["second_pct"] = 100.0 * med["uploaded_second"] / max(1, med["uploaded_first"])
    later = [r["uploaded_new_sandbox"] for r in rounds[1:]]  # round 0 filled the store
    med["uploaded_new_sandbox"] = statistics.median(later) if later else float("nan")
    med["new_sandbox_pct"] = 100.0 * med["uploaded_new_sandbox"] / max(1, med["uploaded_first"])
    return med


def render(report: dict[str, Any]) -> Any:
    """One table, 80 columns: a row per measure, local and S3 side by side."""
    from rich.table import Table

    m = summary(report)
    table = Table(
        title=f"ckpt bench store: {report['workload']}, medians of {report['count']}",
        title_justify="left",
    )
    for col in ("measure", "local dir", "s3", "s3 / local"):
        table.add_column(col, justify="left" if col == "measure" else "right")
    table.add_row(
        "checkpoint wall ms",
        f"{m['checkpoint_local_ms']:.1f}",
        f"{m['checkpoint_s3_ms']:.1f}",
        f"{m['checkpoint_ratio']:.2f}x",
    )
    table.add_row(
        "restore wall ms (eager)",
        f"{m['restore_local_ms']:.1f}",
        f"{m['restore_s3_ms']:.1f}",
        f"{m['restore_ratio']:.2f}x",
    )
    table.add_row("image bytes", f"{m['local_bytes']:.0f}", f"{m['image_bytes']:.0f}", "")
    table.add_row("upload MB/s (image / wall)", "", f"{m['upload_mb_s']:.1f}", "")
    table.add_row("bytes uploaded, 1st ckpt", "", f"{m['uploaded_first']:.0f}", "")
    table.add_row(
        "bytes uploaded, 2nd ckpt", "", f"{m['uploaded_second']:.0f}", f"{m['second_pct']:.1f}%"
    )
    table.add_row(
        "bytes uploaded, new sandbox",
        "",
        f"{m['uploaded_new_sandbox']:.0f}",
        f"{m['new_sandbox_pct']:.1f}%",
    )
    return table


def to_json(report: dict[str, Any]) -> dict[str, Any]:
    return {**report, "summary": summary(report)}


def go_lines(report: dict[str, Any]) -> list[str]:
    m = summary(report)
    name = f"BenchmarkStore/{report['workload'].replace(':', '')}"
    n = str(report["count"])
    return [
        f"{name}/checkpoint/local\t{n}\t{m['checkpoint_local_ms'] * 1e6:.0f} ns/op",
        f"{name}/checkpoint/s3\t{n}\t{m['checkpoint_s3_ms'] * 1e6:.0f} ns/op"
        f"\t{m['upload_mb_s']:.1f} MB/s",
        f"{name}/restore/local\t{n}\t{m['restore_local_ms'] * 1e6:.0f} ns/op",
        f"{name}/restore/s3\t{n}\t{m['restore_s3_ms'] * 1e6:.0f} ns/op",
        f"{name}/second-checkpoint/s3\t{n}\t{m['uploaded_second']:.0f} B/op"
        f"\t{m['second_pct']:.2f} pct-of-first",
        f"{name}/new-sandbox-checkpoint/s3\t{n}\t{m['uploaded_new_sandbox']:.0f} B/op"
        f"\t{m['new_sandbox_pct']:.2f} pct-of-first",
    ]
