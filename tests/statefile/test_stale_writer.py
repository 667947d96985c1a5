"""``clean_stale`` sweeps leftovers of writers that can no longer finish; a zombie
(exited, not yet reaped) is one of them, a live process is not."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt.statefile import image as image_mod

NO_PROC = not os.path.isdir("/proc/self")


def proc_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3].decode()


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p
    p.kill()
    p.wait()


@pytest.fixture
def zombie() -> Iterator[int]:
    """A child that has exited and is deliberately not reaped yet."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while proc_state(p.pid) != "Z":
        if time.monotonic() > deadline:
            p.kill()
            p.wait()
            pytest.fail("child never became a zombie")
        time.sleep(0.01)
    yield p.pid
    p.wait()


def test_live_process_is_alive(sleeper: subprocess.Popen) -> None:
    assert image_mod._pid_alive(sleeper.pid)
    assert image_mod._pid_alive(os.getpid())


@pytest.mark.skipif(NO_PROC, reason="needs /proc")
def test_zombie_is_dead(zombie: int) -> None:
    assert image_mod._pid_exists(zombie)  # kill(pid, 0) alone would call it alive
    assert not image_mod._pid_alive(zombie)


def test_reaped_process_is_dead() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert not image_mod._pid_alive(p.pid)


@pytest.mark.skipif(NO_PROC, reason="needs /proc")
def test_command_name_with_parenthesis_and_state_letter() -> None:
    # comm "x) Z (" would fool a parser that splits /proc/PID/stat on spaces.
    code = "open('/proc/self/comm', 'w').write('x) Z (');import time;time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        while b"x) Z (" not in Path(f"/proc/{p.pid}/stat").read_bytes():
            assert time.monotonic() < deadline, "comm was never set"
            time.sleep(0.01)
        assert image_mod._pid_alive(p.pid)
    finally:
        p.kill()
        p.wait()


def test_unreadable_proc_trusts_kill(monkeypatch, sleeper: subprocess.Popen) -> None:
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(image_mod, "open", denied, raising=False)
    assert image_mod._pid_alive(sleeper.pid)


def test_hidden_proc_entry_asks_kill_again(monkeypatch, sleeper: subprocess.Popen) -> None:
    def hidden(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(image_mod, "open", hidden, raising=False)
    assert image_mod._pid_alive(sleeper.pid)


@pytest.mark.skipif(NO_PROC, reason="needs /proc")
def test_clean_stale_sweeps_a_zombie_writers_leftover(
    tmp_path: Path, zombie: int, sleeper: subprocess.Popen
) -> None:
    target = tmp_path / "img"
    dead = tmp_path / f".img.tmp-{zombie}-abc123"
    live = tmp_path / f".img.tmp-{sleeper.pid}-def456"
    for d in (dead, live):
        d.mkdir()
        (d / "checkpoint.img").write_bytes(b"partial")
    removed = image_mod.clean_stale(target)
    assert removed == [dead]
    assert not dead.exists()
    assert live.is_dir()
