"""Timers and clocks: itimers, POSIX timers and overruns, timerfd, monotonic across restore."""

from __future__ import annotations

import pytest

from ckpt.errors import KernelError, SyscallError
from ckpt.kernel.clock import CLOCK_MONOTONIC, CLOCK_REALTIME
from ckpt.kernel.programs import Spinner
from ckpt.kernel.task import SIGALRM, SIGPROF, SIGUSR1, SIGVTALRM
from ckpt.kernel.timers import ITIMER_PROF, ITIMER_REAL, ITIMER_VIRTUAL, expirations

from .conftest import MS, blank_kernel, checkpoint, resume_same_instant


def test_expirations_counts_periods_and_keeps_phase():
    assert expirations(100, 10, 99) == (0, 100)
    assert expirations(100, 10, 100) == (1, 110)
    assert expirations(100, 10, 135) == (4, 140)
    assert expirations(100, 0, 500) == (1, 0)


def _handled(k, task, signo):
    return task.tg.handled.get(signo, 0)


def test_itimer_real_ticks_at_its_interval():
    k, init = blank_kernel()
    k.sigaction(init, SIGALRM, 0x1000)
    k.setitimer(init, ITIMER_REAL, 10 * MS, 10 * MS)
    k.run_for(35 * MS)
    assert _handled(k, init, SIGALRM) == 3
    assert k.getitimer(init, ITIMER_REAL) == (5 * MS, 10 * MS)


def test_itimer_real_without_handler_kills_the_process():
    k, init = blank_kernel()
    child = k.fork(init)
    k.setitimer(child, ITIMER_REAL, 5 * MS)
    k.run_for(6 * MS)
    assert k.wait(init, child.tid) == (child.tid, SIGALRM)


def test_itimers_keep_ticking_and_phase_after_restore(engine):
    k, init = blank_kernel()
    k.sigaction(init, SIGALRM, 0x1000)
    k.setitimer(init, ITIMER_REAL, 10 * MS, 10 * MS)
    k.run_for(23 * MS)
    r, _ = checkpoint(k, engine)
    resume_same_instant(r, k)
    for kk in (k, r):
        kk.run_for(30 * MS)
    ri = r.task(init.tid)
    assert _handled(r, ri, SIGALRM) == _handled(k, init, SIGALRM) == 5
    assert r.getitimer(ri, ITIMER_REAL) == k.getitimer(init, ITIMER_REAL) == (7 * MS, 10 * MS)


def test_one_shot_timer_fires_once_even_across_restore(engine):
    k, init = blank_kernel()
    k.sigaction(init, SIGUSR1, 0x1000)
    tid = k.timer_create(init, CLOCK_MONOTONIC, SIGUSR1)
    k.timer_settime(init, tid, 20 * MS)
    k.run_for(10 * MS)
    r, _ = checkpoint(k, engine)
    resume_same_instant(r)
    r.run_for(100 * MS)
    ri = r.task(init.tid)
    assert _handled(r, ri, SIGUSR1) == 1
    assert r.timer_gettime(ri, tid) == (0, 0)


def test_posix_timer_overruns_count_expirations_while_signal_is_blocked(engine):
    k, init = blank_kernel()
    k.sigaction(init, SIGUSR1, 0x1000)
    k.sigprocmask(init, 1 << (SIGUSR1 - 1))
    tid = k.timer_create(init, CLOCK_MONOTONIC, SIGUSR1)
    k.timer_settime(init, tid, 5 * MS, 5 * MS)
    k.run_for(23 * MS)  # 4 expirations: one signal queued, 3 overruns pending
    r, _ = checkpoint(k, engine)
    resume_same_instant(r)
    ri = r.task(init.tid)
    r.run_for(MS // 2)
    assert _handled(r, ri, SIGUSR1) == 0
    r.sigprocmask(ri, 0)
    r.run_for(MS // 2)  # 24 ms: delivered, no new expiry yet
    assert _handled(r, ri, SIGUSR1) == 1
    assert r.timer_getoverrun(ri, tid) == 3


def test_realtime_posix_timer_fires_on_the_realtime_clock():
    k, init = blank_kernel()
    k.sigaction(init, SIGUSR1, 0x1000)
    tid = k.timer_create(init, CLOCK_REALTIME, SIGUSR1)
    k.timer_settime(init, tid, 3 * MS, 3 * MS)
    k.run_for(10 * MS)
    assert _handled(k, init, SIGUSR1) == 3


def test_timerfd_counts_ticks_and_read_clears_them(engine):
    k, init = blank_kernel()
    fd = k.timerfd_create(init)
    k.timerfd_settime(init, fd, 4 * MS, 4 * MS)
    k.run_for(9 * MS)
    r, _ = checkpoint(k, engine)
    resume_same_instant(r)
    ri = r.task(init.tid)
    r.run_for(4 * MS)  # 13 ms: a third expiry
    assert int.from_bytes(r.read(ri, fd, 8), "little") == 3
    with pytest.raises(SyscallError):
        r.read(ri, fd, 8)
    assert r.timerfd_gettime(ri, fd) == (3 * MS, 4 * MS)


def test_virtual_and_prof_itimers_follow_cpu_time():
    k, init = blank_kernel()
    worker = k.fork(init, "spin")
    worker.program = Spinner()
    worker.state = worker.state.RUNNING
    for signo in (SIGVTALRM, SIGPROF):
        k.sigaction(worker, signo, 0x2000)
    k.setitimer(worker, ITIMER_VIRTUAL, 10 * MS, 10 * MS)
    k.setitimer(worker, ITIMER_PROF, 10 * MS, 10 * MS)
    idle = k.fork(init, "idle")
    k.sigaction(idle, SIGVTALRM, 0x2000)
    k.setitimer(idle, ITIMER_VIRTUAL, 1 * MS, 1 * MS)
    k.run_for(40 * MS)
    assert worker.tg.handled[SIGVTALRM] == 4
    assert worker.tg.handled[SIGPROF] == 4  # PROF counts system time too: 45 ms of CPU
    assert SIGVTALRM not in idle.tg.handled  # a sleeping process uses no CPU


def test_monotonic_never_goes_backwards_across_restore(engine):
    k, _ = blank_kernel()
    k.run_for(50 * MS)
    saved = k.timekeeper.monotonic_ns
    r, _ = checkpoint(k, engine)
    host_then = r.timekeeper.paused_host_ns
    r.resume(host_now_ns=host_then - 10_000 * MS)  # host clock stepped back 10 s
    assert r.timekeeper.monotonic_ns == saved
    r2, _ = checkpoint(k, engine)
    r2.resume(host_now_ns=r2.timekeeper.paused_host_ns + 7 * MS)
    assert r2.timekeeper.monotonic_ns == saved + 7 * MS


def test_timers_that_expired_while_frozen_fire_on_resume_with_phase_kept(engine):
    k, init = blank_kernel()
    k.sigaction(init, SIGALRM, 0x1000)
    k.setitimer(init, ITIMER_REAL, 10 * MS, 10 * MS)
    k.run_for(5 * MS)
    r, _ = checkpoint(k, engine)
    r.resume(host_now_ns=r.timekeeper.paused_host_ns + 32 * MS)  # now 37 ms
    ri = r.task(init.tid)
    assert _handled(r, ri, SIGALRM) == 1  # one SIGALRM: standard signals coalesce
    assert r.getitimer(ri, ITIMER_REAL) == (3 * MS, 10 * MS)


def test_run_for_refuses_while_paused_and_negative_times():
    k, _ = blank_kernel()
    k.pause()
    with pytest.raises(KernelError):
        k.run_for(1)
    k.resume()
    with pytest.raises(KernelError):
        k.run_for(-1)


def test_run_for_is_deterministic():
    a, ai = blank_kernel()
    b, bi = blank_kernel()
    for k, t in ((a, ai), (b, bi)):
        k.sigaction(t, SIGALRM, 0x1000)
        k.setitimer(t, ITIMER_REAL, 3 * MS, 7 * MS)
        k.run_for(100 * MS)
    assert a.fingerprint() == b.fingerprint()
