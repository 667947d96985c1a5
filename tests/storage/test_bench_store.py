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

import pytest
from rich.console import Console

from ckpt.bench import store
from ckpt.errors import CkptError


@pytest.mark.slow
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


def test_bench_store_reports_a_failed_round_in_one_line() -> None:
    from ckpt.errors import CkptError

    with pytest.raises(CkptError, match="no-such-workload"):
        store.run(workload="no-such-workload", count=1)


def _ours() -> set[str]:
    from ckpt.bench import netns

    return {n for n in netns.list_namespaces() if n.startswith(f"{netns.PREFIX}{os.getpid()}-")}


@pytest.mark.slow
@pytest.mark.watchdog_s(150)  # a store behind a shaped link, every size measured
def test_bench_store_across_the_namespace_link(tmp_path: os.PathLike[str]) -> None:
    """One small round with the store behind the shaped link: every row is there, the
    traffic crossed the relay, and the namespaces are gone after, as after a failure."""
    from ckpt.bench import netns

    reason = netns.unavailable_reason()
    if reason is not None:
        pytest.skip(f"needs network namespaces: {reason}")
    report = store.run(workload="memory:2", count=1, link=store.Link("1gbit", 1.0))
    assert report["link"] == "netns 1gbit, +1 ms each way"
    (row,) = report["rounds"]
    for side in ("local", "s3"):
        for mode in store.MODES:
            assert row[f"first_{side}_{mode}_ms"] > 0
    assert row["uploaded_second"] <= 0.2 * row["uploaded_first"]
    assert _ours() == set()
    with pytest.raises(CkptError):
        store.run(workload="no-such-workload", count=1, link=store.Link("1gbit", 1.0))
    assert _ours() == set()
