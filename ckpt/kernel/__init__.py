"""The simulated sandbox kernel: savable objects that behave like a small Linux.

Public API (see ``/work/shared`` contracts)::

    k = kernel.build_workload("nginx")      # or "empty", "http", "files:N", "graph:N"
    kernel.WORKLOADS
    k.run_for(ns); k.pause(); k.resume(); k.fingerprint(); k.describe()
    k.memory_file.pages(); k.memory_file.restore_pages(loaded)

Modules: ``clock`` (Timekeeper), ``task`` (tasks, thread groups, signals, PID
namespace), ``mm`` (MemoryFile, MemoryManager, VMAs), ``vfs`` (mounts, dentries, inodes,
file descriptions, fd tables, pipes), ``locks`` (FileLocks), ``timers``, ``net``
(sockets), ``kernel`` (the root and its system calls), ``workloads``.
"""

from ckpt.errors import KernelError, SyscallError
from ckpt.kernel.kernel import Kernel, LockCmd
from ckpt.kernel.locks import LockType
from ckpt.kernel.mm import MemoryFault
from ckpt.kernel.workloads import WORKLOADS, build_workload

__all__ = [
    "WORKLOADS",
    "Kernel",
    "KernelError",
    "LockCmd",
    "LockType",
    "MemoryFault",
    "SyscallError",
    "build_workload",
]
