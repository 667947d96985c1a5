"""The simulated sandbox kernel: savable objects that behave like a small Linux.

Public API (see ``/work/shared`` contracts)::

    k = kernel.build_workload("nginx")  # or "empty", "http", "files:N", "graph:N", "memory:N",
    kernel.WORKLOADS                    # "memory:N@RATE", "kv:N"
    k.run_for(ns); k.pause(); k.resume(); k.fingerprint(); k.describe()
    k.http_request(method, path, body)
    k.memory_file.pages(); k.memory_file.restore_pages(loaded)
    k.memory_file.take_dirty(); k.memory_file.pages(frames)  # dirty tracking (pre-dump)

Modules: ``clock`` (Timekeeper), ``task`` (tasks, thread groups, signals, PID
namespace), ``mm`` (MemoryFile, MemoryManager, VMAs), ``vfs`` (mounts, dentries, inodes,
file descriptions, fd tables, pipes), ``locks`` (FileLocks), ``timers``, ``net``
(sockets), ``kernel`` (the root and its system calls), ``events`` (what is due next:
timers by expiry, tasks that may take a signal), ``workloads`` and ``memfill``.
"""

from __future__ import annotations

from typing import Any

from ckpt.errors import KernelError, SyscallError
from ckpt.kernel import programs as _programs  # noqa: F401  (registers the programs' types)
from ckpt.kernel.kernel import Kernel, LockCmd
from ckpt.kernel.locks import LockType
from ckpt.kernel.mm import MemoryFault

# The workload builders (and the root filesystem tables they use) are imported on first
# use: a restoring sandbox needs every savable type, but never builds a workload.
_FROM_WORKLOADS = frozenset({"WORKLOADS", "build_workload"})


def __getattr__(name: str) -> Any:
    """Resolve ``WORKLOADS`` and ``build_workload`` on first access (PEP 562)."""
    if name not in _FROM_WORKLOADS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ckpt.kernel import workloads

    value = getattr(workloads, name)
    globals()[name] = value
    return value


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
