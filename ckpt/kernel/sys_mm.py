"""Memory system calls: mmap, munmap, mprotect, and reading or writing a process's memory.

A mixin of ``Kernel`` (``ckpt/kernel/kernel.py``): the methods use the kernel's fields
(``self.pidns``, ``self.vfs``, ``self.memory_file``...) and each other across mixins.
"""

from __future__ import annotations

import errno

from ckpt.errors import SyscallError
from ckpt.kernel.mm import PROT_READ, PROT_WRITE, MapKind
from ckpt.kernel.task import Task
from ckpt.kernel.vfs import InodeKind, RegularFD


class MemoryCalls:
    """Memory system calls, mixed into ``Kernel``."""

    # -- memory -------------------------------------------------------------------------
    def mmap(
        self,
        task: Task,
        length: int,
        prot: int = PROT_READ | PROT_WRITE,
        kind: MapKind = MapKind.ANON_PRIVATE,
        *,
        fd: int | None = None,
        offset: int = 0,
        addr: int | None = None,
        name: str = "",
    ) -> int:
        mm = task.tg.mm
        assert mm is not None
        inode = None
        shmem = None
        if fd is not None:
            file = self._file(task, fd)
            if not isinstance(file, RegularFD) or file.inode is None:
                raise SyscallError(errno.ENODEV, f"fd {fd} cannot be mapped")
            if kind is MapKind.FILE_SHARED and prot & PROT_WRITE and not file.writable():
                raise SyscallError(errno.EACCES, f"fd {fd} is read-only; no shared writable map")
            inode = file.inode
            name = name or self.vfs.path_of(file.dentry) if file.dentry else name
        if kind is MapKind.ANON_SHARED:
            shmem = self.vfs.new_inode(InodeKind.REGULAR, 0o600, self.now, nlink=0)
            name = name or "/dev/zero (deleted)"
        return mm.mmap(
            length, prot, kind, inode=inode, offset=offset, addr=addr, name=name, shmem=shmem
        )

    def munmap(self, task: Task, addr: int, length: int) -> None:
        assert task.tg.mm is not None
        task.tg.mm.munmap(addr, length)

    def mprotect(self, task: Task, addr: int, length: int, prot: int) -> None:
        assert task.tg.mm is not None
        task.tg.mm.mprotect(addr, length, prot)

    def mem_read(self, task: Task, addr: int, n: int) -> bytes:
        assert task.tg.mm is not None
        return task.tg.mm.read(addr, n)

    def mem_write(self, task: Task, addr: int, data: bytes) -> None:
        assert task.tg.mm is not None
        task.tg.mm.write(addr, data)
