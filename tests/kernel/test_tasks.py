"""Processes: pids, ppids, zombies, reparenting, sessions, groups, stop/continue, signals."""

from __future__ import annotations

import errno

import pytest

from ckpt.errors import SyscallError
from ckpt.kernel.programs import SignalCounter
from ckpt.kernel.task import (
    SIG_IGN,
    SIGCHLD,
    SIGCONT,
    SIGKILL,
    SIGRTMIN,
    SIGSTOP,
    SIGTERM,
    SIGUSR1,
    SIGUSR2,
    TaskState,
)

from .conftest import blank_kernel, checkpoint, resume_same_instant


def test_fork_assigns_pids_parents_and_inherits_group():
    k, init = blank_kernel()
    a = k.fork(init, "a")
    b = k.fork(a, "b")
    assert (a.tid, b.tid) == (2, 3)
    assert k.getppid(b) == a.tgid and b.parent is a and b in a.children
    assert b.tg.pgrp is init.tg.pgrp
    assert b.regs.rax == 0


def test_threads_share_group_and_tables():
    k, init = blank_kernel()
    t = k.clone_thread(init, "worker")
    assert t.tgid == init.tgid and t.tid != init.tid
    assert t.fd_table is init.fd_table and t.tg.mm is init.tg.mm
    assert init.fd_table.users == 2


def test_exit_leaves_a_zombie_until_wait_reaps_it():
    k, init = blank_kernel()
    child = k.fork(init)
    k.exit(child, 7)
    assert child.state is TaskState.ZOMBIE and child.tid in k.pidns.tasks
    assert k.wait(init) == (child.tid, 7 << 8)
    assert child.tid not in k.pidns.tasks
    with pytest.raises(SyscallError) as exc:
        k.wait(init)
    assert exc.value.errno == errno.ECHILD


def test_sigchld_ignored_means_no_zombies():
    k, init = blank_kernel()
    k.sigaction(init, SIGCHLD, SIG_IGN)
    child = k.fork(init)
    k.exit(child, 0)
    assert child.tid not in k.pidns.tasks


def test_orphans_are_reparented_to_init():
    k, init = blank_kernel()
    mid = k.fork(init, "mid")
    leaf = k.fork(mid, "leaf")
    k.exit(mid, 0)
    assert leaf.parent is init and k.getppid(leaf) == 1


def test_sessions_and_process_groups():
    k, init = blank_kernel()
    a = k.fork(init)
    assert k.setsid(a) == a.tgid
    b = k.fork(a)
    k.setpgid(b, 0, 0)
    assert b.tg.pgrp.pgid == b.tgid and b.tg.pgrp.session.sid == a.tgid
    with pytest.raises(SyscallError):
        k.setsid(a)  # already a group leader
    with pytest.raises(SyscallError):
        k.setpgid(b, 0, init.tgid)  # a group in another session


def test_kill_process_group_reaches_every_member():
    k, init = blank_kernel()
    a = k.fork(init)
    k.setsid(a)
    kids = [k.fork(a) for _ in range(3)]
    for kid in kids:
        k.sigaction(kid, SIGUSR1, 0x10)
    k.kill(init, -a.tgid, SIGUSR1)
    k.run_for(1)
    assert [kid.tg.handled.get(SIGUSR1) for kid in kids] == [1, 1, 1]
    assert SIGUSR1 not in init.tg.handled


def test_stop_and_continue_notify_the_parent():
    k, init = blank_kernel()
    init.program = SignalCounter()
    k.sigaction(init, SIGCHLD, 0x10)
    child = k.fork(init)
    k.kill(init, child.tgid, SIGSTOP)
    k.run_for(1)
    assert child.state is TaskState.STOPPED and child.tg.stopped
    assert k.wait(init, untraced=True) == (child.tid, (SIGSTOP << 8) | 0x7F)
    k.kill(init, child.tgid, SIGCONT)
    k.run_for(1)
    assert child.state is TaskState.SLEEPING
    assert init.program.seen == [SIGCHLD, SIGCHLD]


def test_standard_signals_coalesce_and_realtime_signals_queue():
    k, init = blank_kernel()
    init.program = SignalCounter()
    k.sigprocmask(init, (1 << (SIGUSR1 - 1)) | (1 << (SIGRTMIN - 1)))
    for _ in range(3):
        k.kill(None, 1, SIGUSR1)
        k.kill(None, 1, SIGRTMIN)
    for signo in (SIGUSR1, SIGRTMIN):
        k.sigaction(init, signo, 0x10)
    k.sigprocmask(init, 0)
    k.run_for(1)
    assert init.program.seen == [SIGUSR1, SIGRTMIN, SIGRTMIN, SIGRTMIN]


def test_sigkill_cannot_be_caught_or_blocked():
    k, init = blank_kernel()
    child = k.fork(init)
    with pytest.raises(SyscallError):
        k.sigaction(child, SIGKILL, 0x10)
    k.sigprocmask(child, (1 << 64) - 1)
    k.kill(init, child.tgid, SIGKILL)
    k.run_for(1)
    assert k.wait(init) == (child.tid, SIGKILL)


def test_execve_resets_handlers_but_keeps_ignored_signals():
    k, init = blank_kernel()
    child = k.fork(init)
    k.sigaction(child, SIGUSR1, 0x10)
    k.sigaction(child, SIGUSR2, SIG_IGN)
    k.execve(child, "newprog")
    assert child.tg.sighand.get(SIGUSR1).handler == 0
    assert child.tg.sighand.get(SIGUSR2).handler == SIG_IGN
    assert child.comm == "newprog"


def test_task_tree_zombies_stopped_and_pending_signals_survive_restore(engine):
    k, init = blank_kernel()
    init.program = SignalCounter()
    k.sigaction(init, SIGUSR2, 0x10)
    a = k.fork(init, "a")
    k.setsid(a)
    b = k.fork(a, "b")
    k.setpgid(b)
    z = k.fork(a, "zombie")
    k.exit(z, 3)
    stopped = k.fork(a, "stopped")
    k.kill(init, stopped.tgid, SIGSTOP)
    k.sigaction(b, SIGUSR1, 0x20)
    k.sigprocmask(b, 1 << (SIGUSR1 - 1))
    k.kill(init, b.tgid, SIGUSR1)
    k.kill(init, 1, SIGUSR2)  # pending on init until the loop runs
    k.sigprocmask(init, 1 << (SIGUSR2 - 1))
    k.run_for(1)
    r, _ = checkpoint(k, engine)
    resume_same_instant(r)
    ra, rb, rz, rs, ri = (r.task(t.tid) for t in (a, b, z, stopped, init))
    assert (ra.parent, rb.parent, rz.parent) == (ri, ra, ra)
    assert rz.state is TaskState.ZOMBIE and rs.state is TaskState.STOPPED
    assert rb.tg.pgrp.pgid == rb.tgid and rb.tg.pgrp.session.sid == ra.tgid
    assert [i.signo for i in rb.tg.shared_pending] == [SIGUSR1]
    # Behaviour after restore: reap the zombie, continue the stopped task, deliver pending.
    assert r.wait(ra, rz.tid) == (rz.tid, 3 << 8)
    r.kill(ri, rs.tgid, SIGCONT)
    r.sigprocmask(rb, 0)
    r.sigprocmask(ri, 0)
    r.run_for(1)
    assert rs.state is TaskState.SLEEPING
    assert rb.tg.handled == {SIGUSR1: 1}
    assert ri.program.seen == [SIGUSR2]
    # New pids continue after the restored ones.
    assert r.fork(ri).tid == stopped.tid + 1


def test_sigterm_default_terminates_and_reports_the_signal():
    k, init = blank_kernel()
    child = k.fork(init)
    k.kill(init, child.tgid, SIGTERM)
    k.run_for(1)
    assert k.wait(init) == (child.tid, SIGTERM)


def test_children_forked_by_a_thread_are_reparented_when_the_group_exits():
    k, init = blank_kernel()
    proc = k.fork(init, "proc")
    thread = k.clone_thread(proc, "thr")
    grandchild = k.fork(thread, "gc")
    assert grandchild.parent is thread
    k.exit(proc, 0)
    assert grandchild.parent is init and grandchild in init.children
