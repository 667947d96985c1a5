"""Options that contradict each other are refused with one line and exit 2, before
anything is done: never silently resolved one way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt.errors import EXIT_NOT_FOUND


def ckpt(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckpt", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def usage_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr


def test_a_compression_level_without_compression_is_refused(tmp_path: Path) -> None:
    proc = ckpt(
        "--root",
        str(tmp_path / "root"),
        "checkpoint",
        "web",
        "--image-path",
        str(tmp_path / "img"),
        "--compression",
        "none",
        "--compression-level",
        "3",
    )
    assert "--compression-level" in usage_error(proc)
    assert not (tmp_path / "img").exists()


@pytest.mark.parametrize("level", [[], ["--compression-level", "3"]], ids=["default", "level"])
def test_zstd_with_or_without_a_level_gets_past_the_options(tmp_path: Path, level: list) -> None:
    proc = ckpt(
        "--root", str(tmp_path / "root"), "checkpoint", "web",
        "--image-path", str(tmp_path / "img"), "--compression", "zstd", *level,
    )  # fmt: skip
    assert proc.returncode == EXIT_NOT_FOUND and "web" in proc.stderr, (
        proc.stderr
    )  # no such sandbox


def test_two_roots_for_serve_are_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    proc = ckpt("--root", str(a), "serve", "--root", str(b), "--listen", "127.0.0.1:0")
    message = usage_error(proc)
    assert str(a) in message and str(b) in message, message
    assert not a.exists() and not b.exists()


@pytest.mark.parametrize("how", ["same", "env", "only-serve"])
def test_one_root_for_serve_is_accepted(tmp_path: Path, how: str) -> None:
    """The same root twice (spelt two ways), or $CKPT_ROOT with serve's --root, is no
    conflict: the command goes on to check --listen (given badly here: nothing starts)."""
    a = tmp_path / "a"
    before = {"same": ["--root", "x/../a"], "env": [], "only-serve": []}[how]
    env = {"CKPT_ROOT": str(tmp_path / "other")} if how == "env" else None
    proc = ckpt(*before, "serve", "--root", str(a), "--listen", "bogus", env=env, cwd=tmp_path)
    assert proc.returncode == 1 and "--listen 'bogus'" in proc.stderr, proc.stderr
