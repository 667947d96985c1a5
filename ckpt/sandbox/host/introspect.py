"""Read-only views of a sandbox's kernel, answered inside the sandbox: its tasks
(``ckpt ps``) and its counters (``ckpt events``).

Both verbs bypass the exclusive lock (a ``ps`` during a checkpoint answers at once) and
read the kernel under ``Host.cond``, the lock every kernel access takes, so a reply is
one consistent moment.  They change nothing, not even the dirty-page tracking.

Imported by the sandbox process at start-up: stdlib only; ``protocol`` (msgspec) is
imported by the request that needs it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # as process.py: ``typing`` costs the sandbox's start-up
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ckpt.sandbox.wire import protocol as p

VERBS = frozenset({"tasks", "counters"})
"""The verbs this module answers; read-only, so they bypass the exclusive lock."""


def handlers(host: Any) -> dict[str, Callable[[Any], Any]]:
    """The RPC handlers of ``VERBS`` for ``host`` (a ``process.Host``)."""
    return {
        "tasks": lambda request: tasks_reply(host, request),
        "counters": lambda request: counters_reply(host, request),
    }


def _cpu_usec() -> int:
    t = os.times()
    return int((t.user + t.system) * 1_000_000)


def task_rows(kernel: Any, limit: int) -> tuple[list[p.TaskInfo], int]:
    """The kernel's tasks by tid, at most ``limit`` of them, and how many were left out."""
    from ckpt.sandbox.wire.protocol import TaskInfo

    tasks = kernel.tasks()
    rows = []
    for task in tasks[: max(0, limit)]:
        tg = task.tg
        rows.append(
            TaskInfo(
                tid=task.tid,
                tgid=tg.tgid,
                ppid=task.parent.tid if task.parent is not None else 0,
                comm=task.comm,
                state=task.state.value,
                threads=len(tg.live_tasks()),
                cpu_ns=tg.utime_ns + tg.stime_ns,
                exit_code=task.exit_code,
            )
        )
    return rows, len(tasks) - len(rows)


def tasks_reply(host: Any, request: p.TasksRequest) -> p.TasksReply:
    from ckpt.errors import SandboxError
    from ckpt.sandbox.wire.protocol import TasksReply

    with host.cond:
        if host.kernel is None:
            raise SandboxError(f"sandbox {host.id} has no kernel yet: it is starting")
        rows, omitted = task_rows(host.kernel, request.limit)
    return TasksReply(tasks=rows, omitted=omitted)


def kernel_figures(kernel: Any) -> dict[str, int]:
    """Tasks, pages, sockets, files and timers of ``kernel``, counted once each: a
    description shared by several descriptors (a forked fd table) counts once."""
    from ckpt.kernel.net import SocketFD
    from ckpt.kernel.task import TaskState

    tasks = kernel.tasks()
    files: dict[int, Any] = {}
    tables: set[int] = set()
    for task in tasks:
        table = task.fd_table
        if table is None or id(table) in tables:
            continue
        tables.add(id(table))
        for _, entry in table.items():
            files[id(entry.file)] = entry.file
    groups = kernel.thread_groups()
    timers = sum(1 for t in kernel.timerfds if t.expiry_ns)
    for tg in groups:
        timers += sum(1 for it in tg.itimers if it.expiry_ns)
        timers += sum(1 for pt in tg.posix_timers.values() if pt.expiry_ns)
    mf = kernel.memory_file
    return {
        "uptime_ns": kernel.now,
        "tasks": len(tasks),
        "processes": len(groups),
        "zombies": sum(1 for t in tasks if t.state is TaskState.ZOMBIE),
        "pages_allocated": len(mf.refs),
        "pages_dirty": mf.dirty_count(),
        "pages_unfetched": mf.unfetched,
        "sockets": sum(1 for f in files.values() if isinstance(f, SocketFD)),
        "open_files": len(files),
        "timers": timers,
        "http_requests": kernel.http.requests if kernel.http is not None else 0,
        "restores": kernel.restores,
    }


def counters_reply(host: Any, request: p.CountersRequest) -> p.CountersReply:
    from ckpt.sandbox.wire.protocol import CountersReply

    with host.cond:
        if host.kernel is None:
            return CountersReply(booted=False, frozen=host.frozen, cpu_usec=_cpu_usec())
        figures = kernel_figures(host.kernel)
        frozen = host.frozen
    return CountersReply(booted=True, frozen=frozen, cpu_usec=_cpu_usec(), **figures)
