"""The inert manager (no cgroups): real processes tracked and controlled with psutil."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from ckpt import cgroups
from ckpt.cgroups import InertManager, Layout, Mode
from ckpt.errors import CgroupError

BUSY = "while True: pass"


@pytest.fixture
def busy() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    yield proc
    proc.kill()
    proc.wait()


def test_create_without_cgroups_is_inert_and_says_why() -> None:
    mgr = cgroups.create("ckpt/x", layout=Layout(Mode.UNAVAILABLE))
    assert isinstance(mgr, InertManager)
    assert "no cgroup filesystem" in mgr.describe()


def test_quota_on_inert_is_a_clear_error() -> None:
    mgr = InertManager("ckpt/x", "not root")
    with pytest.raises(
        CgroupError,
        match="cannot apply a CPU quota: not root; run as root or pass --ignore-cgroups",
    ):
        mgr.set_cpu_quota(0.5)
    with pytest.raises(CgroupError, match="invalid CPU quota"):
        mgr.set_cpu_quota(-1)
    mgr.set_cpu_quota(None)  # uncapped is what it already is


def test_tracks_cpu_freezes_and_kills(busy: subprocess.Popen[bytes]) -> None:
    mgr = InertManager("ckpt/x", "test")
    mgr.add_process(busy.pid)
    assert mgr.procs() == [busy.pid]
    before = mgr.cpu_usage_usec()
    deadline = time.monotonic() + 10
    while mgr.cpu_usage_usec() <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mgr.cpu_usage_usec() > before
    mgr.freeze()
    assert psutil.Process(busy.pid).status() == psutil.STATUS_STOPPED
    mgr.thaw()
    assert psutil.Process(busy.pid).status() != psutil.STATUS_STOPPED
    st = mgr.stat()
    assert st.pids_current == 1 and st.usage_usec and st.memory_current
    with pytest.raises(CgroupError, match="still has processes"):
        mgr.delete()
    used = mgr.cpu_usage_usec()
    mgr.kill()
    assert busy.wait(timeout=5) == -9
    assert mgr.procs() == []
    assert mgr.cpu_usage_usec() >= used  # an exited process still counts
    mgr.delete()


def test_unknown_pid_is_an_error() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(CgroupError, match=f"cannot track process {proc.pid}"):
        InertManager("ckpt/x", "test").add_process(proc.pid)
