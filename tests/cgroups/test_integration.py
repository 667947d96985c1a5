"""Real cgroups on this host (root and a mounted cgroupfs; skipped otherwise).

Every group lives under a unique ``ckpt-test-<uuid>`` parent; the ``scope`` fixture kills
the children and removes the groups and the parent in every hierarchy even when a test
fails, and then checks that nothing was left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from ckpt import cgroups
from ckpt.cgroups import Manager, Mode
from ckpt.errors import CgroupError


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    if cgroups.mode() is Mode.UNAVAILABLE:
        return "no cgroup filesystem mounted"
    ok, why = cgroups.available_for_quota()
    return None if ok else f"no CPU quota possible here: {why}"


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))

BUSY = "while True: pass"
SLEEP = "import time; time.sleep(60)"


class Scope:
    """Unique names, and a clean-up that works whatever state a test left things in."""

    def __init__(self) -> None:
        self.prefix = f"ckpt-test-{uuid.uuid4().hex[:12]}"
        self.children: list[subprocess.Popen[bytes]] = []
        self.groups: list[Manager] = []

    def create(self, leaf: str = "g", cpus: float | None = None) -> Manager:
        mgr = cgroups.create(f"{self.prefix}/{leaf}", cpus=cpus)
        assert isinstance(mgr, Manager)
        self.groups.append(mgr)
        return mgr

    def spawn(self, code: str, mgr: Manager | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", code])
        self.children.append(proc)
        if mgr is not None:
            mgr.add_process(proc.pid)
        return proc

    def mounts(self) -> list[Path]:
        lay = cgroups.layout()
        return list(dict.fromkeys([*([lay.unified] if lay.unified else []), *lay.v1.values()]))

    def leftovers(self) -> list[Path]:
        return [m / self.prefix for m in self.mounts() if (m / self.prefix).exists()]

    def cleanup(self) -> None:
        for mgr in self.groups:
            with contextlib.suppress(CgroupError):
                mgr.thaw()
            with contextlib.suppress(CgroupError):
                mgr.kill()
        for proc in self.children:
            proc.kill()
            proc.wait()
        for mgr in self.groups:
            with contextlib.suppress(CgroupError):
                mgr.delete()
        for parent in self.leftovers():
            with contextlib.suppress(OSError):
                parent.rmdir()


@pytest.fixture
def scope() -> Iterator[Scope]:
    s = Scope()
    try:
        yield s
    finally:
        s.cleanup()
    assert s.leftovers() == [], "stray cgroups left behind"


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_quarter_cpu_quota_holds_a_busy_loop(scope: Scope) -> None:
    mgr = scope.create(cpus=0.25)
    assert mgr.cpu_quota() == 0.25
    child = scope.spawn(BUSY, mgr)
    proc = psutil.Process(child.pid)
    # Start measuring once the child has demonstrably run in the group (0.1 s of CPU
    # there, ~0.4 s of throttled wall time), not after a fixed sleep that a slow start
    # on a loaded machine could outlast.
    assert wait_for(lambda: mgr.cpu_usage_usec() >= 100_000, timeout=60)
    u0, c0, t0 = mgr.cpu_usage_usec(), sum(proc.cpu_times()[:2]), time.monotonic()
    time.sleep(2.0)
    u1, c1, t1 = mgr.cpu_usage_usec(), sum(proc.cpu_times()[:2]), time.monotonic()
    by_cgroup = (u1 - u0) / 1e6 / (t1 - t0)
    by_process = (c1 - c0) / (t1 - t0)
    # Behaviour of the kernel's quota, in a wide band (the machine is shared).
    assert 0.15 <= by_cgroup <= 0.35, by_cgroup
    assert 0.15 <= by_process <= 0.35, by_process
    st = mgr.stat()
    assert st.nr_throttled is not None and st.nr_throttled > 0


def test_freeze_stops_progress_and_thaw_resumes_it(scope: Scope) -> None:
    mgr = scope.create()
    scope.spawn(BUSY, mgr)
    start = mgr.cpu_usage_usec()
    assert wait_for(lambda: mgr.cpu_usage_usec() > start + 20_000)
    mgr.freeze()
    frozen_at = mgr.cpu_usage_usec()
    time.sleep(0.3)
    assert mgr.cpu_usage_usec() - frozen_at <= 1_000  # nothing runs while frozen
    mgr.thaw()
    assert wait_for(lambda: mgr.cpu_usage_usec() > frozen_at + 20_000)


def test_kill_then_delete_leaves_no_directory(scope: Scope) -> None:
    mgr = scope.create(cpus=1)
    child = scope.spawn(SLEEP, mgr)
    other = scope.spawn(SLEEP, mgr)
    assert mgr.procs() == sorted([child.pid, other.pid])
    mgr.kill()
    assert child.wait(timeout=5) == -9 and other.wait(timeout=5) == -9
    assert mgr.procs() == []
    mgr.delete()
    for mount in scope.mounts():
        assert not (mount / scope.prefix / "g").exists()


def test_kill_works_on_a_frozen_group(scope: Scope) -> None:
    mgr = scope.create()
    child = scope.spawn(SLEEP, mgr)
    mgr.freeze()
    mgr.kill()
    assert child.wait(timeout=5) == -9


def test_delete_refuses_while_populated(scope: Scope, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ckpt.cgroups.manager.DELETE_RETRY_S", 0.1)
    mgr = scope.create()
    child = scope.spawn(SLEEP, mgr)
    with pytest.raises(CgroupError, match=rf"still has processes \({child.pid}\)"):
        mgr.delete()
    assert all(p.exists() for p in mgr.paths.values())


def test_delete_after_the_process_died_by_itself(scope: Scope) -> None:
    mgr = scope.create()
    child = scope.spawn("pass", mgr)
    child.wait(timeout=10)
    mgr.delete()
    assert not any(p.exists() for p in mgr.paths.values())


def test_stat_and_open_group_on_a_live_group(scope: Scope) -> None:
    mgr = scope.create(cpus=0.5)
    scope.spawn(SLEEP, mgr)
    st = mgr.stat()
    assert st.pids_current in (None, 1)
    if mgr.paths.get("pids") or (mgr.paths.get("unified", Path("/x")) / "pids.current").exists():
        assert st.pids_current == 1
    assert st.usage_usec is not None and st.usage_usec >= 0
    assert set(st.hugetlb) <= set(cgroups.hugepage_sizes())
    again = cgroups.open_group(mgr.name)
    assert again.paths == mgr.paths and again.cpu_quota() == 0.5


def test_bad_quota_on_the_real_host_makes_nothing(scope: Scope) -> None:
    with pytest.raises(CgroupError, match="invalid CPU quota"):
        scope.create(cpus=(os.cpu_count() or 1) + 1)
    assert scope.leftovers() == []


def test_cleanup_removes_a_frozen_populated_group(scope: Scope) -> None:
    """What the fixture does after a failing test: nothing may be left behind."""
    inner = Scope()
    mgr = inner.create()
    child = inner.spawn(SLEEP, mgr)
    mgr.freeze()
    inner.cleanup()
    assert child.poll() is not None
    assert inner.leftovers() == []


def _as_nobody(fn: Callable[[], object]) -> object:
    """Run ``fn`` in a forked child that dropped root to nobody; return what it returned."""
    r, w = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns of any fork while threads run (here: other tests' chunk
        # pool); the child only drops root, runs fn and exits.
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            out = json.dumps(fn())
        except BaseException as exc:
            out, code = json.dumps(f"{type(exc).__name__}: {exc}"), 1
        os.write(w, out.encode())
        os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, data
    return json.loads(data)


def test_unprivileged_quota_is_a_clear_error_and_no_quota_is_inert(scope: Scope) -> None:
    name = f"{scope.prefix}/g"

    def check() -> object:
        ok, why = cgroups.available_for_quota()
        mgr = cgroups.create(name)
        try:
            cgroups.create(name, cpus=0.5)
            quota_error = ""
        except CgroupError as exc:
            quota_error = str(exc)
        return [ok, why, mgr.inert, quota_error]

    ok, why, inert, quota_error = _as_nobody(check)  # type: ignore[misc]
    assert not ok and "not writable" in why
    assert inert
    assert quota_error.startswith("cannot apply a CPU quota: ")
    assert quota_error.endswith("; run as root or pass --ignore-cgroups")
    assert scope.leftovers() == []


def test_adding_a_dead_process_names_the_file(scope: Scope) -> None:
    mgr = scope.create()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(CgroupError, match=r"cgroup\.procs: No such process"):
        mgr.add_process(dead.pid)
