"""The examples run as documented."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import cgroup_dirs, sandbox_processes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_state_engine_example() -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "state_engine.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "reflect:" in proc.stdout and "typed:" in proc.stdout
    assert "alice has 85 after a deposit" in proc.stdout
    assert "Account x2" in proc.stdout


@pytest.mark.slow
def test_cycle_script_count_continues_and_cleans_up() -> None:
    env = {**os.environ, "PYTHON": sys.executable, "COLUMNS": "200"}
    env.pop("CKPT_TEMPLATE", None)
    proc = subprocess.run(
        ["sh", str(EXAMPLES / "cycle.sh")], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # its checkpoint comes right after the root's first run, while the template warms up
    assert "listener handed over" in proc.stdout, proc.stdout
    bodies = [ast.literal_eval(m) for m in re.findall(r"^(\{.*'requests'.*\})$", proc.stdout, re.M)]
    counts = [b["requests"] for b in bodies]
    assert len(counts) == 5
    assert counts == list(range(counts[0], counts[0] + 5))  # continues across the restore
    assert [b["restores"] for b in bodies] == [0, 0, 0, 1, 1]
    sandbox_id = re.search(r"sandbox (example-\d+) running", proc.stdout)
    assert sandbox_id is not None
    assert cgroup_dirs(sandbox_id.group(1)) == []


@pytest.mark.slow
def test_demo_tours_and_cleans_up() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "requests before checkpoint: 3, after restore: 6; restores: 1; same address: True"
        in proc.stdout
    )
    assert "checkpoint timings" in proc.stdout and "restore timings" in proc.stdout
    assert "per-type state statistics" in proc.stdout
    sandbox_id = re.search(r"sandbox (demo-\d+): pid", proc.stdout)
    assert sandbox_id is not None
    assert cgroup_dirs(sandbox_id.group(1)) == []
    tmp = re.search(r"removed the sandbox, its cgroup, the template and (\S+)", proc.stdout)
    assert tmp is not None and not Path(tmp.group(1)).exists()
    assert "forked from the template: True; listening socket: handed over" in proc.stdout
    assert sandbox_processes(Path(tmp.group(1)) / "root") == []  # the template too
