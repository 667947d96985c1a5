"""``procfs`` reads what psutil reads, so records written with either compare equal and
``pids.alive`` judges a process as it did with psutil."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from ckpt.sandbox.client import pids, procfs


@pytest.fixture
def titled() -> Iterator[subprocess.Popen]:
    """A child whose name holds a space and a parenthesis (``/proc/PID/stat`` quotes
    it unescaped) and whose command line has several words."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "a b", ") x"],
        stdin=subprocess.PIPE,
        executable=sys.executable,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_start_time_and_command_line_match_psutil(titled: subprocess.Popen) -> None:
    proc = psutil.Process(titled.pid)
    assert procfs.create_time(titled.pid) == pytest.approx(proc.create_time(), abs=1e-6)
    assert procfs.cmdline(titled.pid) == proc.cmdline()
    assert procfs.state(os.getpid()) == "R"


def test_a_zombie_is_not_alive_and_a_reused_pid_is_not_ours(titled: subprocess.Popen) -> None:
    start = pids.create_time(titled.pid)
    assert pids.alive(titled.pid, start)
    assert not pids.alive(titled.pid, start + 1.0)  # another process under the same pid
    titled.kill()
    deadline = time.monotonic() + 30
    while procfs.state(titled.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)  # dead, not reaped yet: a zombie
    assert procfs.state(titled.pid) == "Z"
    assert not pids.alive(titled.pid, start)
    assert procfs.create_time(titled.pid) == pytest.approx(start)  # a zombie keeps it
    titled.wait(timeout=10)
    assert procfs.create_time(titled.pid) is None
    assert procfs.cmdline(titled.pid) is None
    assert not pids.alive(titled.pid, start)
    assert pids.create_time(titled.pid) == 0.0


def test_a_name_with_parentheses_does_not_shift_the_fields(tmp_path) -> None:
    exe = tmp_path / "odd) (name"
    exe.symlink_to(sys.executable)
    proc = subprocess.Popen([str(exe), "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert procfs.create_time(proc.pid) == pytest.approx(
            psutil.Process(proc.pid).create_time(), abs=1e-6
        )
        assert procfs.state(proc.pid) in ("R", "S")
    finally:
        proc.kill()
        proc.wait(timeout=10)
