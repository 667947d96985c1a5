"""Every Python child ckpt starts imports the ckpt that started it, even from a working
directory holding a ``ckpt/`` folder of its own (``python -m`` would import that one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckpt import pycommand


@pytest.fixture
def shadowed(tmp_path: Path) -> Path:
    """A directory whose ``ckpt/`` fails on import, as a user's project folder might."""
    where = tmp_path / "work"
    (where / "ckpt").mkdir(parents=True)
    (where / "ckpt" / "__init__.py").write_text('raise ImportError("not the ckpt package")\n')
    return where


def test_python_m_ckpt_from_a_shadowing_directory_runs_the_real_ckpt(shadowed: Path) -> None:
    proc = subprocess.run(
        pycommand.ckpt_argv("--version"),
        cwd=shadowed,
        env=pycommand.python_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ckpt "), proc.stdout


def test_the_bench_launchers_use_the_safe_command() -> None:
    from ckpt.bench import lifecycle, netns

    cmd = lifecycle.ckpt_command()
    assert cmd[1:] == ["-P", "-m", "ckpt"] or Path(cmd[0]).name == "ckpt", cmd
    assert netns.python_argv(print)[:3] == [sys.executable, "-P", "-c"]


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"serve {pid} did not exit")


def test_serve_detach_from_a_shadowing_directory_starts(shadowed: Path, tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    root = tmp_path / "root"
    serve = ["serve", "--listen", "127.0.0.1:0", "--key-file", str(key), "--detach"]
    proc = subprocess.run(
        pycommand.ckpt_argv("--root", str(root), *serve),
        cwd=shadowed,
        env=pycommand.python_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    pid = int(proc.stdout.split()[0])
    os.kill(pid, signal.SIGTERM)
    _wait_gone(pid)
    assert "listening on" in proc.stdout, proc.stdout


def test_a_source_tree_found_only_through_the_working_directory_goes_into_pythonpath(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``python -m ckpt`` run inside a clone finds ckpt through its working directory,
    which ``-P`` hides from the child: that directory is handed over in PYTHONPATH."""
    import ckpt

    here = str(Path(ckpt.__file__).resolve().parent.parent)
    others = [p for p in sys.path if p and os.path.realpath(p) != here]
    monkeypatch.setattr(sys, "path", [here, *others])  # [0]: the working directory
    env = pycommand.python_env({"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [here, "/elsewhere"]
    monkeypatch.setattr(sys, "path", ["/somewhere", here, *others])  # found anyway
    assert pycommand.python_env({"PYTHONPATH": "/elsewhere"})["PYTHONPATH"] == "/elsewhere"
