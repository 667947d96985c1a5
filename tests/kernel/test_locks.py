"""FileLocks: conflict rules, range split and merge, owners, waiters, release, restore."""

from __future__ import annotations

import errno

import pytest

from ckpt.errors import KernelError, SyscallError
from ckpt.kernel import LockCmd, LockType
from ckpt.kernel.kernel import LOCK_EX, LOCK_SH, LOCK_UN
from ckpt.kernel.locks import LOCK_EOF, LockSet
from ckpt.kernel.task import TaskState

from .conftest import blank_kernel, checkpoint, open_rw, resume_same_instant

R, W = LockType.READ, LockType.WRITE


def test_lockset_read_locks_share_and_write_lock_excludes():
    ls = LockSet()
    assert ls.try_lock(1, 10, R, 0, 100)
    assert ls.try_lock(2, 20, R, 50, 150)
    assert not ls.try_lock(3, 30, W, 90, 95)
    conflict = ls.conflict(3, W, 120, 130)
    assert conflict is not None and conflict.pid == 20 and conflict.type is R
    assert ls.try_lock(3, 30, W, 150, 200)


def test_lockset_adjacent_ranges_of_one_owner_merge_and_unlock_splits():
    ls = LockSet()
    ls.try_lock(1, 10, R, 0, 10)
    ls.try_lock(1, 10, R, 10, 20)
    assert ls.held_by(1) == [(R, 0, 20)]
    assert len(ls.segments) == 1
    ls.unlock(1, 5, 15)
    assert ls.held_by(1) == [(R, 0, 5), (R, 15, 20)]


def test_lockset_upgrade_in_the_middle_splits_into_three():
    ls = LockSet()
    ls.try_lock(1, 10, R, 0, 30)
    assert ls.try_lock(1, 10, W, 10, 20)
    assert ls.held_by(1) == [(R, 0, 10), (W, 10, 20), (R, 20, 30)]
    ls.try_lock(1, 10, R, 10, 20)  # downgrade back: merges into one range
    assert ls.held_by(1) == [(R, 0, 30)]


def test_lockset_upgrade_refused_while_another_reader_overlaps():
    ls = LockSet()
    ls.try_lock(1, 10, R, 0, 10)
    ls.try_lock(2, 20, R, 5, 15)
    assert not ls.try_lock(1, 10, W, 0, 10)
    assert ls.try_lock(1, 10, W, 0, 5)


def test_lockset_waiters_are_granted_first_come_first_served():
    from ckpt.kernel.locks import LockWaiter

    ls = LockSet()
    ls.try_lock(1, 10, W, 0, LOCK_EOF)
    ls.enqueue(LockWaiter(2, 20, W, 0, 10, tid=20))
    ls.enqueue(LockWaiter(3, 30, W, 5, 8, tid=30))
    ls.enqueue(LockWaiter(4, 40, R, 50, 60, tid=40))
    granted = ls.grant_waiters()
    assert granted == []
    ls.unlock(1)
    granted = [w.owner for w in ls.grant_waiters()]
    assert granted == [2, 4]  # 3 overlaps what 2 now holds
    assert [w.owner for w in ls.waiters] == [3]


def test_lockset_rejects_bad_ranges():
    with pytest.raises(KernelError):
        LockSet().try_lock(1, 1, R, 10, 5)
    with pytest.raises(KernelError):
        LockSet().conflict(1, R, -1, 5)


def _two_procs():
    k, init = blank_kernel()
    fd = open_rw(k, init, "/tmp/lockfile")
    child = k.fork(init, "child")
    return k, init, child, fd


def test_posix_locks_conflict_between_processes_not_within_one():
    k, parent, child, fd = _two_procs()
    assert k.fcntl_lock(parent, fd, LockCmd.SETLK, W, 0, 100)
    assert k.fcntl_lock(parent, fd, LockCmd.SETLK, W, 50, 100)  # same owner: fine
    assert not k.fcntl_lock(child, fd, LockCmd.SETLK, R, 10, 1)
    found = k.fcntl_lock(child, fd, LockCmd.GETLK, R, 10, 1)
    assert found == (W, 0, 150, parent.tgid)


def test_posix_locks_are_not_inherited_but_flock_is():
    k, init = blank_kernel()
    fd = open_rw(k, init, "/tmp/f")
    k.fcntl_lock(init, fd, LockCmd.SETLK, W, 0, 0)
    k.flock(init, fd, LOCK_EX)
    child = k.fork(init)
    # The child shares the description, so it also "holds" the flock lock...
    assert k.flock(child, fd, LOCK_EX)
    # ...but POSIX locks belong to the process that took them.
    assert not k.fcntl_lock(child, fd, LockCmd.SETLK, R, 0, 1)
    # Closing the parent's fd keeps the flock lock alive through the child's reference.
    k.close(init, fd)
    other = k.fork(init)
    fd2 = k.open(other, "/tmp/f", 2)
    assert not k.flock(other, fd2, LOCK_SH)


def test_closing_any_fd_of_the_inode_drops_the_process_posix_locks():
    k, init = blank_kernel()
    fd1 = open_rw(k, init, "/tmp/f")
    fd2 = k.open(init, "/tmp/f", 2)
    k.fcntl_lock(init, fd1, LockCmd.SETLK, W, 0, 10)
    other = k.fork(init)
    k.close(init, fd2)  # the classic POSIX trap
    fd3 = k.open(other, "/tmp/f", 2)
    assert k.fcntl_lock(other, fd3, LockCmd.SETLK, W, 0, 10)


def test_ofd_locks_belong_to_the_description_and_conflict_with_posix():
    k, init = blank_kernel()
    fd_a = open_rw(k, init, "/tmp/ofd")
    fd_b = k.open(init, "/tmp/ofd", 2)
    assert k.fcntl_lock(init, fd_a, LockCmd.OFD_SETLK, W, 0, 10)
    # Same process, other description: OFD locks conflict.
    assert not k.fcntl_lock(init, fd_b, LockCmd.OFD_SETLK, W, 5, 10)
    # And a classic POSIX lock of the same process conflicts with the OFD lock.
    assert not k.fcntl_lock(init, fd_b, LockCmd.SETLK, R, 0, 1)
    # The OFD lock survives closing another fd of the inode.
    k.close(init, fd_b)
    fd_c = k.open(init, "/tmp/ofd", 2)
    assert not k.fcntl_lock(init, fd_c, LockCmd.OFD_SETLK, R, 0, 1)
    k.close(init, fd_a)  # last reference to the description: released
    assert k.fcntl_lock(init, fd_c, LockCmd.OFD_SETLK, W, 0, 10)


def test_flock_shared_and_exclusive_between_descriptions():
    k, init = blank_kernel()
    a = open_rw(k, init, "/tmp/fl")
    b = k.open(init, "/tmp/fl", 2)
    assert k.flock(init, a, LOCK_SH)
    assert k.flock(init, b, LOCK_SH)
    assert not k.flock(init, b, LOCK_EX)
    k.flock(init, a, LOCK_UN)
    assert k.flock(init, b, LOCK_EX)


def test_blocked_waiter_wakes_on_release_and_gets_the_lock():
    k, parent, child, fd = _two_procs()
    k.fcntl_lock(parent, fd, LockCmd.SETLK, W, 0, 10)
    assert not k.fcntl_lock(child, fd, LockCmd.SETLKW, W, 0, 10)
    assert child.blocked_on is not None and child.state is TaskState.SLEEPING
    k.fcntl_lock(parent, fd, LockCmd.SETLK, None, 0, 10)
    assert child.blocked_on is None
    assert not k.fcntl_lock(parent, fd, LockCmd.SETLK, R, 0, 1)


def test_exit_releases_locks_and_wakes_waiters():
    k, parent, child, fd = _two_procs()
    k.fcntl_lock(child, fd, LockCmd.SETLK, W, 0, 0)
    k.flock(child, fd, LOCK_EX)
    third = k.fork(parent)
    fd3 = k.open(third, "/tmp/lockfile", 2)
    assert not k.fcntl_lock(third, fd3, LockCmd.SETLKW, W, 0, 0)
    k.exit(child, 0)
    assert third.blocked_on is None
    assert k.fcntl_lock(parent, fd, LockCmd.GETLK, W, 0, 0) == (W, 0, 0, third.tgid)


def test_deadlock_is_detected():
    k, a, b, fd = _two_procs()
    k.fcntl_lock(a, fd, LockCmd.SETLK, W, 0, 10)
    k.fcntl_lock(b, fd, LockCmd.SETLK, W, 20, 10)
    assert not k.fcntl_lock(a, fd, LockCmd.SETLKW, W, 20, 10)
    with pytest.raises(SyscallError) as exc:
        k.fcntl_lock(b, fd, LockCmd.SETLKW, W, 0, 10)
    assert exc.value.errno == errno.EDEADLK


def test_handled_signal_interrupts_a_lock_wait():
    k, parent, child, fd = _two_procs()
    k.fcntl_lock(parent, fd, LockCmd.SETLK, W, 0, 0)
    k.sigaction(child, 10, 0x1234)
    k.fcntl_lock(child, fd, LockCmd.SETLKW, W, 0, 0)
    k.kill(parent, child.tgid, 10)
    k.run_for(1)
    assert child.blocked_on is None
    inode = k.vfs.lookup("/tmp/lockfile").inode
    assert inode.locks.posix.waiters == []


def test_inode_that_never_locked_has_no_lock_sets():
    k, init = blank_kernel()
    fd = open_rw(k, init, "/tmp/x")
    inode = k.vfs.lookup("/tmp/x").inode
    assert inode.locks is None
    k.flock(init, fd, LOCK_SH)
    assert inode.locks is not None and inode.locks.posix is None and inode.locks.bsd is not None


def test_locks_still_conflict_after_restore_and_release_wakes_the_right_waiter(engine):
    k, a, b, fd = _two_procs()
    c = k.fork(a, "c")
    k.fcntl_lock(a, fd, LockCmd.SETLK, W, 0, 100)
    k.fcntl_lock(a, fd, LockCmd.SETLK, R, 200, 100)
    assert not k.fcntl_lock(b, fd, LockCmd.SETLKW, W, 250, 10)  # waits on a's read lock
    assert not k.fcntl_lock(c, fd, LockCmd.SETLKW, W, 50, 10)  # waits on a's write lock
    k.flock(a, fd, LOCK_SH)
    r, _ = checkpoint(k, engine)
    resume_same_instant(r)
    ra, rb, rc = r.task(a.tid), r.task(b.tid), r.task(c.tid)
    assert rb.blocked_on is not None and rc.blocked_on is not None
    d = r.fork(ra, "d")
    assert not r.fcntl_lock(d, fd, LockCmd.SETLK, R, 10, 1)  # still conflicts
    assert r.fcntl_lock(d, fd, LockCmd.SETLK, R, 210, 5)  # read locks still share
    # Releasing a's write range wakes c (waiting there), not b.
    r.fcntl_lock(ra, fd, LockCmd.SETLK, None, 0, 100)
    assert rc.blocked_on is None and rb.blocked_on is not None
    assert r.fcntl_lock(rd := d, fd, LockCmd.GETLK, W, 50, 10) == (W, 50, 10, rc.tgid)
    # flock lock shared by the inherited description survives too.
    assert not r.flock(rd, r.open(rd, "/tmp/lockfile", 2), LOCK_EX)


def test_ofd_and_flock_owners_survive_restore(engine):
    k, init = blank_kernel()
    a = open_rw(k, init, "/tmp/o")
    b = k.open(init, "/tmp/o", 2)
    k.fcntl_lock(init, a, LockCmd.OFD_SETLK, W, 0, 10)
    k.flock(init, b, LOCK_EX)
    r, _ = checkpoint(k, engine)
    resume_same_instant(r)
    ri = r.task(init.tid)
    assert not r.fcntl_lock(ri, b, LockCmd.OFD_SETLK, R, 0, 1)
    assert not r.flock(ri, a, LOCK_SH)
    r.close(ri, b)
    assert r.flock(ri, a, LOCK_SH)
