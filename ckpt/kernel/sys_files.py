"""Files and file locks: open/close/read/write, dup, pipes, FIFOs, epoll, flock and fcntl locks.

A mixin of ``Kernel`` (``ckpt/kernel/kernel.py``): the methods use the kernel's fields
(``self.pidns``, ``self.vfs``, ``self.memory_file``...) and each other across mixins.
"""

from __future__ import annotations

import errno

from ckpt.errors import SyscallError
from ckpt.kernel.abi import LOCK_EX, LOCK_SH, LOCK_UN, SEEK_CUR, SEEK_END, SEEK_SET, LockCmd
from ckpt.kernel.locks import LOCK_EOF, LockSet, LockType, LockWaiter
from ckpt.kernel.net import SocketFD
from ckpt.kernel.task import Task, TaskState, ThreadGroup
from ckpt.kernel.timers import TimerFD
from ckpt.kernel.vfs import (
    O_ACCMODE,
    O_APPEND,
    O_CLOEXEC,
    O_CREAT,
    O_DIRECTORY,
    O_EXCL,
    O_RDONLY,
    O_RDWR,
    O_TRUNC,
    O_WRONLY,
    DirectoryFD,
    EpollFD,
    EpollItem,
    FDTable,
    FileDescription,
    Inode,
    InodeKind,
    PipeFD,
    RegularFD,
)

DEV_ZERO, DEV_FULL, DEV_RANDOM, DEV_URANDOM = 0x105, 0x107, 0x108, 0x109


class FileCalls:
    """File and file-lock system calls, mixed into ``Kernel``."""

    # -- files --------------------------------------------------------------------------
    def _table(self, task: Task) -> FDTable:
        self._check_alive(task)
        assert task.fd_table is not None
        return task.fd_table

    def open(self, task: Task, path: str, flags: int = O_RDONLY, mode: int = 0o644) -> int:
        table = self._table(task)
        cwd = task.fs.cwd if task.fs else None
        try:
            dentry = self.vfs.lookup(path, cwd)
            if flags & O_CREAT and flags & O_EXCL:
                raise SyscallError(errno.EEXIST, f"{path!r} exists")
        except SyscallError as exc:
            if exc.errno != errno.ENOENT or not flags & O_CREAT:
                raise
            dentry = self.vfs.create(path, mode & ~(task.fs.umask if task.fs else 0), self.now, cwd)
        inode = dentry.inode
        mount = self.vfs.mount_of(dentry)
        file: FileDescription
        if inode.kind is InodeKind.DIRECTORY:
            if flags & O_ACCMODE != O_RDONLY:
                raise SyscallError(errno.EISDIR, f"{path!r} is a directory")
            file = DirectoryFD(self.uid(), flags & ~O_CLOEXEC, dentry=dentry, mount=mount)
        elif flags & O_DIRECTORY:
            raise SyscallError(errno.ENOTDIR, f"{path!r} is not a directory")
        elif inode.kind is InodeKind.FIFO:
            assert inode.pipe is not None
            write_end = flags & O_ACCMODE != O_RDONLY
            file = PipeFD(
                self.uid(), flags & ~O_CLOEXEC, pipe=inode.pipe, inode=inode, write_end=write_end
            )
            if write_end:
                inode.pipe.writers += 1
            else:
                inode.pipe.readers += 1
        else:
            if flags & O_TRUNC and flags & O_ACCMODE != O_RDONLY:
                inode.truncate(self.memory_file, 0)
            file = RegularFD(
                self.uid(), flags & ~O_CLOEXEC, dentry=dentry, mount=mount, inode=inode
            )
        inode.open_count += 1
        return table.install(file, cloexec=bool(flags & O_CLOEXEC))

    def close(self, task: Task, fd: int) -> None:
        self._close_in(task, self._table(task), fd)

    def _close_in(self, task: Task, table: FDTable, fd: int) -> None:
        entry = table.remove(fd)
        file = entry.file
        inode = file.lock_inode()
        if inode is not None and inode.locks is not None and inode.locks.posix is not None:
            # POSIX locks: closing any fd of the inode drops all the process's locks on it.
            self._unlock(inode.locks.posix, task.tg.lock_owner, 0, LOCK_EOF)
        if file.refs == 0:
            self._release_file(file)

    def _release_posix_locks_in(self, tg: ThreadGroup, table: FDTable) -> None:
        for _, entry in table.items():
            inode = entry.file.lock_inode()
            if inode is not None and inode.locks is not None and inode.locks.posix is not None:
                self._unlock(inode.locks.posix, tg.lock_owner, 0, LOCK_EOF)

    def _release_file(self, file: FileDescription) -> None:
        """The last reference to a description went: drop its flock and OFD locks."""
        inode = file.lock_inode()
        if inode is not None and inode.locks is not None:
            for lockset in inode.locks.sets():
                self._unlock(lockset, file.id, 0, LOCK_EOF)
        if isinstance(file, PipeFD) and file.pipe is not None:
            if file.write_end:
                file.pipe.writers -= 1
            else:
                file.pipe.readers -= 1
        elif isinstance(file, SocketFD) and file.sock is not None:
            file.sock.shutdown()
        elif isinstance(file, TimerFD) and file in self.timerfds:
            self.timerfds.remove(file)
            self._events().timerfd_closed(file)
        if inode is not None:
            inode.open_count -= 1
            inode.release_if_unused(self.memory_file)

    def dup(self, task: Task, fd: int, minimum: int = 0, *, cloexec: bool = False) -> int:
        table = self._table(task)
        return table.install(table.get(fd).file, cloexec=cloexec, minimum=minimum)

    def dup2(self, task: Task, old: int, new: int) -> int:
        table = self._table(task)
        file = table.get(old).file
        if old == new:
            return new
        if new in table.entries:
            self._close_in(task, table, new)
        table.install_at(new, file)
        return new

    def set_cloexec(self, task: Task, fd: int, cloexec: bool) -> None:
        self._table(task).get(fd).cloexec = cloexec

    def _file(self, task: Task, fd: int) -> FileDescription:
        return self._table(task).get(fd).file

    def read(self, task: Task, fd: int, n: int) -> bytes:
        file = self._file(task, fd)
        if not file.readable():
            raise SyscallError(errno.EBADF, f"fd {fd} is not open for reading")
        if isinstance(file, RegularFD):
            assert file.inode is not None
            if file.inode.kind is InodeKind.CHARDEV:
                return self._device_read(file.inode.rdev, n)
            data = file.inode.read(self.memory_file, file.offset, n)
            file.offset += len(data)
            return data
        if isinstance(file, PipeFD):
            assert file.pipe is not None
            return file.pipe.read(n)
        if isinstance(file, SocketFD):
            assert file.sock is not None
            return file.sock.receive(n)
        if isinstance(file, TimerFD):
            return file.read_ticks().to_bytes(8, "little")
        raise SyscallError(errno.EINVAL, f"fd {fd} ({file.describe()}) cannot be read")

    def write(self, task: Task, fd: int, data: bytes) -> int:
        file = self._file(task, fd)
        if not file.writable():
            raise SyscallError(errno.EBADF, f"fd {fd} is not open for writing")
        if isinstance(file, RegularFD):
            assert file.inode is not None
            if file.inode.kind is InodeKind.CHARDEV:
                if file.inode.rdev == DEV_FULL:
                    raise SyscallError(errno.ENOSPC, "/dev/full is always full")
                return len(data)  # /dev/null and friends discard what is written
            if file.flags & O_APPEND:
                file.offset = file.inode.size
            written = file.inode.write(self.memory_file, file.offset, data)
            file.offset += written
            file.inode.mtime_ns = self.timekeeper.realtime_ns
            return written
        if isinstance(file, PipeFD):
            assert file.pipe is not None
            return file.pipe.write(data)
        if isinstance(file, SocketFD):
            assert file.sock is not None
            return file.sock.deliver(data)
        raise SyscallError(errno.EINVAL, f"fd {fd} ({file.describe()}) cannot be written")

    def _device_read(self, rdev: int, n: int) -> bytes:
        """/dev/zero and /dev/full read zeros, /dev/(u)random the kernel's seeded stream."""
        if rdev in (DEV_ZERO, DEV_FULL):
            return bytes(n)
        if rdev in (DEV_RANDOM, DEV_URANDOM):
            words = [self.random().to_bytes(8, "little") for _ in range((n + 7) // 8)]
            return b"".join(words)[:n]
        return b""  # /dev/null and terminals: end of file

    def lseek(self, task: Task, fd: int, offset: int, whence: int = SEEK_SET) -> int:
        file = self._file(task, fd)
        if not isinstance(file, RegularFD | DirectoryFD):
            raise SyscallError(errno.ESPIPE, f"fd {fd} is not seekable")
        if whence == SEEK_SET:
            new = offset
        elif whence == SEEK_CUR:
            new = file.offset + offset
        elif whence == SEEK_END and isinstance(file, RegularFD) and file.inode is not None:
            new = file.inode.size + offset
        else:
            raise SyscallError(errno.EINVAL, f"bad whence {whence}")
        if new < 0:
            raise SyscallError(errno.EINVAL, f"negative offset {new}")
        file.offset = new
        return new

    def pipe(self, task: Task, *, cloexec: bool = False) -> tuple[int, int]:
        table = self._table(task)
        pipe = self.vfs.new_pipe()
        inode = self.vfs.new_inode(InodeKind.FIFO, 0o600, self.now, pipe=pipe, nlink=0, dev=0)
        read_end = PipeFD(self.uid(), O_RDONLY, pipe=pipe, inode=inode)
        write_end = PipeFD(self.uid(), O_WRONLY, pipe=pipe, inode=inode, write_end=True)
        pipe.readers, pipe.writers = 1, 1
        inode.open_count = 2
        return table.install(read_end, cloexec=cloexec), table.install(write_end, cloexec=cloexec)

    def mkfifo(self, task: Task, path: str, mode: int = 0o644) -> None:
        self.vfs.mkfifo(path, mode, self.now)

    def unlink(self, task: Task, path: str) -> None:
        self.vfs.unlink(path, self.memory_file, task.fs.cwd if task.fs else None)

    def getdents(self, task: Task, fd: int, count: int = 64) -> list[str]:
        file = self._file(task, fd)
        if not isinstance(file, DirectoryFD) or file.dentry is None:
            raise SyscallError(errno.ENOTDIR, f"fd {fd} is not a directory")
        names = sorted(file.dentry.children)[file.offset : file.offset + count]
        file.offset += len(names)
        return names

    def epoll_create(self, task: Task) -> int:
        return self._table(task).install(EpollFD(self.uid(), O_RDWR), cloexec=True)

    def epoll_ctl_add(self, task: Task, epfd: int, fd: int, events: int = 1) -> None:
        ep = self._file(task, epfd)
        if not isinstance(ep, EpollFD):
            raise SyscallError(errno.EINVAL, f"fd {epfd} is not an epoll instance")
        ep.interest[fd] = EpollItem(self._file(task, fd), events)

    # -- locks --------------------------------------------------------------------------
    def flock(self, task: Task, fd: int, op: int, *, block: bool = False) -> bool:
        """flock(2): LOCK_SH/LOCK_EX/LOCK_UN on the description; False if it would block.

        With ``block`` the task sleeps in the lock's queue instead (and True is returned
        only if the lock was taken at once).
        """
        file = self._file(task, fd)
        inode = file.lock_inode()
        if inode is None:
            raise SyscallError(errno.EINVAL, f"fd {fd} cannot be locked")
        if op == LOCK_UN:
            if inode.locks is not None and inode.locks.bsd is not None:
                self._unlock(inode.locks.bsd, file.id, 0, LOCK_EOF)
            return True
        if op not in (LOCK_SH, LOCK_EX):
            raise SyscallError(errno.EINVAL, f"bad flock operation {op}")
        kind = LockType.READ if op == LOCK_SH else LockType.WRITE
        lockset = inode.file_locks().bsd_set()
        return self._lock(task, lockset, inode, file.id, kind, 0, LOCK_EOF, block, flock=True)

    def fcntl_lock(
        self, task: Task, fd: int, cmd: str, type: LockType | None, start: int = 0, length: int = 0
    ) -> bool | tuple[LockType, int, int, int] | None:
        """fcntl F_SETLK(W)/F_GETLK and their OFD forms; ``type`` None means F_UNLCK.

        ``length`` 0 means "to end of file".  SETLK returns False if it would block (EAGAIN
        in Linux); SETLKW queues the task.  GETLK returns the blocking lock as
        ``(type, start, length, pid)`` or None.
        """
        file = self._file(task, fd)
        inode = file.lock_inode()
        if inode is None:
            raise SyscallError(errno.EINVAL, f"fd {fd} cannot be locked")
        if start < 0 or length < 0:
            raise SyscallError(errno.EINVAL, f"bad lock range start={start} length={length}")
        end = LOCK_EOF if length == 0 else start + length
        ofd = cmd.startswith("F_OFD")
        owner = file.id if ofd else task.tg.lock_owner
        if cmd in (LockCmd.GETLK, LockCmd.OFD_GETLK):
            if type is None or inode.locks is None or inode.locks.posix is None:
                return None
            found = inode.locks.posix.conflict(owner, type, start, end)
            if found is None:
                return None
            span = 0 if found.end == LOCK_EOF else found.end - found.start
            return found.type, found.start, span, found.pid
        if cmd not in (LockCmd.SETLK, LockCmd.SETLKW, LockCmd.OFD_SETLK, LockCmd.OFD_SETLKW):
            raise SyscallError(errno.EINVAL, f"bad fcntl lock command {cmd!r}")
        if type is None:
            if inode.locks is not None and inode.locks.posix is not None:
                self._unlock(inode.locks.posix, owner, start, end)
            return True
        if (type is LockType.READ and not file.readable()) or (
            type is LockType.WRITE and not file.writable()
        ):
            raise SyscallError(errno.EBADF, f"fd {fd} is not open for {type.name.lower()}ing")
        block = cmd in (LockCmd.SETLKW, LockCmd.OFD_SETLKW)
        lockset = inode.file_locks().posix_set()
        return self._lock(task, lockset, inode, owner, type, start, end, block, flock=False)

    def _lock(
        self,
        task: Task,
        lockset: LockSet,
        inode: Inode,
        owner: int,
        kind: LockType,
        start: int,
        end: int,
        block: bool,
        *,
        flock: bool,
    ) -> bool:
        if lockset.try_lock(owner, task.tgid, kind, start, end):
            return True
        if not block:
            return False
        if not flock:
            self._check_deadlock(task, lockset, owner, kind, start, end)
        waiter = LockWaiter(owner, task.tgid, kind, start, end, task.tid)
        lockset.enqueue(waiter)
        task.blocked_on, task.blocked_inode, task.blocked_flock = waiter, inode, flock
        task.state = TaskState.SLEEPING
        return False

    def _check_deadlock(
        self, task: Task, lockset: LockSet, owner: int, kind: LockType, start: int, end: int
    ) -> None:
        """EDEADLK when the holder in our way is itself waiting for a lock we hold."""
        found = lockset.conflict(owner, kind, start, end)
        if found is None or found.pid <= 0:
            return
        holder = self.pidns.tasks.get(found.pid)
        if holder is None:
            return
        for t in holder.tg.tasks:
            w = t.blocked_on
            if w is None or t.blocked_inode is None or t.blocked_inode.locks is None:
                continue
            their = t.blocked_inode.locks.posix
            if their is not None and not t.blocked_flock:
                blocker = their.conflict(w.owner, w.type, w.start, w.end)
                if blocker is not None and blocker.pid == task.tgid:
                    raise SyscallError(errno.EDEADLK, f"lock wait by {task.tid} would deadlock")

    def _unlock(self, lockset: LockSet, owner: int, start: int, end: int) -> None:
        if lockset.unlock(owner, start, end):
            for waiter in lockset.grant_waiters():
                waiting = self.pidns.tasks.get(waiter.tid)
                if waiting is not None and waiting.blocked_on is waiter:
                    waiting.blocked_on, waiting.blocked_inode = None, None
                    waiting.blocked_flock = False
                    if waiting.state is not TaskState.STOPPED:
                        waiting.state = self._idle_state(waiting)
                    if waiting.program is not None:
                        waiting.program.wake_ns = self.now

    def _cancel_wait(self, task: Task) -> None:
        if task.blocked_on is None or task.blocked_inode is None:
            return
        locks = task.blocked_inode.locks
        if locks is not None:
            for lockset in locks.sets():
                lockset.cancel(task.tid)
        task.blocked_on, task.blocked_inode, task.blocked_flock = None, None, False
