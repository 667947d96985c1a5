"""``ckpt bench store`` end to end, small: one round on memory:2 against a SeaweedFS it
starts itself.  The figures are not judged (no timing is asserted); what is checked is
that both sides ran on the same sandbox (the memory digest is checked inside), that the
second checkpoint of the unchanged sandbox reuses the store's chunks, and the output."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from rich.console import Console

from ckpt.bench import store


def test_bench_store_one_round(tmp_path: os.PathLike[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["CKPT_ROOT"] = str(tmp_path)
    args = ["bench", "store", "--workload", "memory:2", "-n", "1", "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt", *args],
        capture_output=True,
        text=True,
        timeout=55,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    (row,) = report["rounds"]
    assert row["image_bytes"] > 0 and row["uploaded_first"] > row["image_bytes"] // 2
    # The unchanged sandbox again: only chunks holding the new image's ID are new.
    assert row["uploaded_second"] <= 0.2 * row["uploaded_first"], row
    summary = report["summary"]
    assert summary["second_pct"] <= 20 and summary["upload_mb_s"] > 0
    assert row["uploaded_new_sandbox"] >= 0.9 * row["uploaded_first"]  # the first in its store
    buf = io.StringIO()
    Console(file=buf, width=80).print(store.render(report))
    assert "checkpoint wall ms" in buf.getvalue()
    assert max(len(line) for line in buf.getvalue().splitlines()) <= 80
    lines = store.go_lines(report)
    assert all(line.startswith("BenchmarkStore/memory2/") for line in lines)
    assert any("pct-of-first" in line for line in lines)


def test_bench_store_refuses_other_workloads() -> None:
    from ckpt.bench.harness import BenchError

    try:
        store.run(workload="nginx", count=1)
    except BenchError as exc:
        assert "memory:N" in str(exc)
    else:
        raise AssertionError("nginx was accepted")
