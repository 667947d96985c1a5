"""A passing test run leaves nothing in the temporary directory: pytest keeps the
``tmp_path`` of failed tests only (``tmp_path_retention_policy`` in pyproject.toml)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

PROBE = """
def test_writes(tmp_path):
    (tmp_path / "image").write_bytes(b"x" * 4096)

def test_fails_and_keeps_its_directory(tmp_path):
    (tmp_path / "evidence").write_text("look here")
    assert KEEP_FAILED == 0
"""


def _run(tmp_path: Path, keep_failed: int) -> tuple[int, list[Path]]:
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    (work / "test_probe.py").write_text(f"KEEP_FAILED = {keep_failed}\n{PROBE}")
    config = ["-c", str(PYPROJECT), "--rootdir", str(work), "-p", "no:cacheprovider"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", *config, str(work / "test_probe.py")],
        cwd=work,
        env={**os.environ, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, sorted(p for p in tmp.rglob("*") if p.is_file())


def test_a_passing_run_leaves_no_files_in_the_temporary_directory(tmp_path: Path) -> None:
    code, left = _run(tmp_path, keep_failed=0)
    assert code == 0
    assert left == []


def test_a_failed_test_keeps_its_temporary_directory(tmp_path: Path) -> None:
    code, left = _run(tmp_path, keep_failed=1)
    assert code == 1
    assert [p.name for p in left] == ["evidence"]
