"""``checkpoint --force`` over an image its chain still needs, on a real sandbox: refused
in one line, the sandbox serving on and the chain restoring as before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import Cli

pytestmark = pytest.mark.slow
SID = f"fp-{os.getpid()}"


def test_force_over_a_parent_is_refused_and_the_chain_still_restores(
    cli: Cli, tmp_path: Path
) -> None:
    cli("run", SID, "--workload", "kv:2", "--port", "0", timeout=120)
    p0, p1 = tmp_path / "p0", tmp_path / "p1"
    cli("checkpoint", SID, "--image-path", str(p0), "--pre-dump", timeout=120)
    cli("checkpoint", SID, "--image-path", str(p1), "--parent-path", str(p0),
        "--leave-running", timeout=120)  # fmt: skip
    proc = cli("checkpoint", SID, "--image-path", str(p0), "--force", check=False, timeout=120)
    assert proc.returncode == 4  # refused as unsafe
    assert proc.stderr.splitlines() == [
        f"error: {p0} is the parent of the image {p1}; replacing it would break that "
        "chain: write to another path, or pass --force-children"
    ]
    assert cli.state(SID)["status"] == "running"
    cli("delete", SID, "--force", timeout=60)
    cli("restore", SID, "--image-path", str(p1), timeout=120)
    assert cli.state(SID)["status"] == "running"
