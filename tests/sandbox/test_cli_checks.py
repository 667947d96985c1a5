"""Options checked before anything starts: ports in range, a --root that is a directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def ckpt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "CKPT_TEMPLATE": "0"}
    return subprocess.run(
        [sys.executable, "-m", "ckpt", *args], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
@pytest.mark.parametrize("verb", ["run", "restore"])
def test_port_out_of_range_is_refused_at_parse_time(tmp_path: Path, verb: str, port: str) -> None:
    root = tmp_path / "root"
    how = ["--workload", "http"] if verb == "run" else ["--image-path", str(tmp_path / "img")]
    out = ckpt("--root", str(root), verb, "a", *how, "--port", port)
    assert out.returncode == 2, out.stderr
    assert "--port" in out.stderr and "0<=x<=65535" in out.stderr
    assert "Traceback" not in out.stderr
    assert not root.exists()  # refused before anything was made


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["list", "--json"],
        ["template", "status"],
        ["state", "a"],
        ["run", "a", "-w", "http"],
    ],
)
def test_root_naming_a_file_is_one_line(tmp_path: Path, args: list[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a root\n")
    out = ckpt("--root", str(afile), *args)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stderr.splitlines() == [
        f"error: --root {afile} is not a directory: pass a directory (or set CKPT_ROOT)"
    ]
    assert out.stdout == ""
    assert afile.read_text() == "not a root\n"
