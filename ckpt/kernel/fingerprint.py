"""What a process could observe, as plain data: for fingerprints and for humans.

``visible_state`` walks the kernel the way zdtm compares a process tree before and
after a checkpoint: task tree with ids and states, signals, credentials, registers,
fds with offsets and flags, VMAs and page contents, locks held and waited for, timers
and their remaining time, pipe and socket buffers, the file tree.  Object identity
shows through ids and shared-ness (which tasks share an fd table, which fds share a
description, which pages are shared copy-on-write), never through Python ids.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from ckpt.kernel.clock import CLOCK_MONOTONIC
from ckpt.kernel.locks import LockSet
from ckpt.kernel.net import SocketFD, TCPSocket, UnixSocket
from ckpt.kernel.task import RLIMIT_NAMES, Task, TaskState
from ckpt.kernel.timers import ITIMER_NAMES, TimerFD
from ckpt.kernel.vfs import (
    DirectoryFD,
    EpollFD,
    FileDescription,
    Inode,
    PipeFD,
    RegularFD,
)

if TYPE_CHECKING:
    from ckpt.kernel.kernel import Kernel


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _lockset(ls: LockSet | None) -> Any:
    if ls is None:
        return None
    return {
        "segments": [
            [s.start, s.end, s.writer, s.writer_pid, sorted(s.readers.items())] for s in ls.segments
        ],
        "waiters": [[w.owner, w.pid, w.type.name, w.start, w.end, w.tid] for w in ls.waiters],
    }


def _file(k: Kernel, f: FileDescription) -> dict[str, Any]:
    out: dict[str, Any] = {"id": f.id, "kind": type(f).__name__, "flags": f.flags, "refs": f.refs}
    if isinstance(f, RegularFD):
        assert f.inode is not None
        out |= {"offset": f.offset, "ino": f.inode.ino}
        out["path"] = k.vfs.path_of(f.dentry) if f.dentry is not None else None
    elif isinstance(f, DirectoryFD):
        out |= {"offset": f.offset, "path": k.vfs.path_of(f.dentry) if f.dentry else None}
    elif isinstance(f, PipeFD):
        assert f.pipe is not None
        out |= {"pipe": f.pipe.id, "write_end": f.write_end}
    elif isinstance(f, SocketFD):
        out["socket"] = f.sock.id if f.sock is not None else None
    elif isinstance(f, TimerFD):
        now = k.timekeeper.now(f.clock)
        out |= {
            "remaining": f.remaining(now),
            "interval": f.interval_ns,
            "ticks": f.ticks,
            "clock": f.clock,
        }
    elif isinstance(f, EpollFD):
        out["interest"] = sorted([fd, item.file.id, item.events] for fd, item in f.interest.items())
    return out


def _inode(k: Kernel, inode: Inode, frame_hash: dict[int, str]) -> list[Any]:
    """[ino, kind, mode, uid, gid, nlink, size, mtime, data pages?, target?, locks?]."""
    out: list[Any] = [
        inode.ino,
        inode.kind.value,
        inode.mode,
        inode.uid,
        inode.gid,
        inode.nlink,
        inode.size,
        inode.mtime_ns,
    ]
    if inode.pages:
        out.append([[p, _frame(k, f, frame_hash)] for p, f in sorted(inode.pages.items())])
    if inode.target:
        out.append(inode.target)
    if inode.locks is not None:
        out.append({"bsd": _lockset(inode.locks.bsd), "posix": _lockset(inode.locks.posix)})
    return out


def _frame(k: Kernel, frame: int, cache: dict[int, str]) -> str:
    digest = cache.get(frame)
    if digest is None:
        digest = cache[frame] = _digest(k.memory_file.read(frame))
    return digest


def _task(k: Kernel, t: Task) -> dict[str, Any]:
    program = t.program
    return {
        "tid": t.tid,
        "tgid": t.tgid,
        "ppid": t.parent.tgid if t.parent is not None else 0,
        "comm": t.comm,
        "state": t.state.value,
        "sigmask": t.sigmask,
        "pending": [[i.signo, i.code, i.pid, i.timer_id] for i in t.pending],
        "regs": list(t.regs.as_tuple()),
        "creds": [getattr(t.creds, f) for f in t.creds.__slots__],  # type: ignore[attr-defined]
        "fd_table": t.fd_table.id if t.fd_table is not None else None,
        "cwd": k.vfs.path_of(t.fs.cwd) if t.fs is not None else None,
        "blocked_on": None
        if t.blocked_on is None
        else [t.blocked_on.type.name, t.blocked_on.start, t.blocked_on.end, t.blocked_flock],
        "exit_code": t.exit_code,
        "utime": t.utime_ns,
        "program": None
        if program is None
        else [type(program).__name__, program.wake_ns, program.busy, _program_state(program)],
    }


def _program_state(program: Any) -> Any:
    """A program's plain fields; ``_private`` ones are host-side caches (nosave), not
    what the program did."""
    fields = getattr(program, "__dataclass_fields__", {})
    return {
        name: getattr(program, name)
        for name in sorted(fields)
        if not name.startswith("_")
        and isinstance(getattr(program, name), int | str | bool | list | dict | None)
    }


def visible_state(k: Kernel) -> dict[str, Any]:
    """Everything observable, as JSON-able data with a canonical order."""
    tk = k.timekeeper
    frame_hash: dict[int, str] = {}
    tasks = [_task(k, t) for t in k.tasks()]
    groups = []
    tables: dict[int, Any] = {}
    inodes: dict[int, Inode] = {}
    pipes: dict[int, Any] = {}
    sockets: dict[int, Any] = {}
    mms: dict[int, Any] = {}
    for tg in k.thread_groups():
        itimer_base = (k.now, tg.utime_ns, tg.cpu_ns)
        groups.append(
            {
                "tgid": tg.tgid,
                "threads": [t.tid for t in tg.tasks],
                "pgid": tg.pgrp.pgid if tg.pgrp else None,
                "sid": tg.pgrp.session.sid if tg.pgrp else None,
                "stopped": tg.stopped,
                "exit_code": tg.exit_code,
                "shared_pending": [[i.signo, i.code, i.pid, i.timer_id] for i in tg.shared_pending],
                "sigactions": [
                    [n + 1, a.handler, a.flags, a.mask]
                    for n, a in enumerate(tg.sighand.actions)
                    if a.handler or a.flags or a.mask
                ],
                "rlimits": {RLIMIT_NAMES[i]: [r.cur, r.max] for i, r in enumerate(tg.rlimits)},
                "itimers": {
                    ITIMER_NAMES[i]: [it.remaining(itimer_base[i]), it.interval_ns, it.fired]
                    for i, it in enumerate(tg.itimers)
                },
                "posix_timers": [
                    [
                        t.id,
                        t.clock,
                        t.signo,
                        t.remaining(tk.now(t.clock)),
                        t.interval_ns,
                        t.overrun,
                        t.pending_overrun,
                        t.signal_queued,
                        t.fired,
                    ]
                    for _, t in sorted(tg.posix_timers.items())
                ],
                "handled": sorted(tg.handled.items()),
                "cpu": [tg.utime_ns, tg.stime_ns],
                "mm": tg.mm.id if tg.mm is not None else None,
            }
        )
        mm = tg.mm
        if mm is not None and mm.id not in mms and tg.exit_code is None:
            mms[mm.id] = {
                "vmas": [
                    [
                        v.start,
                        v.end,
                        v.prot,
                        v.kind.name,
                        v.inode.ino if v.inode else None,
                        v.offset,
                        v.name,
                    ]
                    for v in mm.vmas
                ],
                "pages": [
                    [vpn, frame, _frame(k, frame, frame_hash)]
                    for _, vpn, frame in mm.page_digest_items()
                ],
                "brk": mm.brk,
            }
            for v in mm.vmas:
                if v.inode is not None:
                    inodes[v.inode.ino] = v.inode
    for t in k.tasks():
        table = t.fd_table
        if table is None:
            continue
        entry = tables.setdefault(table.id, {"users": [], "fds": {}})
        entry["users"].append(t.tid)
        if entry["fds"]:
            continue
        for fd, e in table.items():
            entry["fds"][str(fd)] = [e.cloexec, _file(k, e.file)]
            f = e.file
            inode = f.lock_inode()
            if inode is not None:
                inodes[inode.ino] = inode
            if isinstance(f, PipeFD) and f.pipe is not None:
                p = f.pipe
                pipes[p.id] = [len(p.buffer), _digest(bytes(p.buffer)), p.readers, p.writers]
            if isinstance(f, SocketFD) and f.sock is not None:
                socks = [f.sock]
                if isinstance(f.sock, TCPSocket):
                    socks += f.sock.accept_queue
                for s in socks:
                    sockets[s.id] = _socket(s)
    files = {}
    for path, dentry in k.vfs.walk():
        files[path] = dentry.inode.ino
        inodes[dentry.inode.ino] = dentry.inode
    return {
        "workload": k.workload,
        "clocks": [tk.monotonic_ns, tk.realtime_ns],
        "paused": k.paused,
        "tasks": tasks,
        "thread_groups": groups,
        "sessions": sorted(s.sid for s in k.pidns.sessions.values()),
        "process_groups": sorted(
            [g.pgid, g.session.sid, [m.tgid for m in g.members]]
            for g in k.pidns.process_groups.values()
        ),
        "fd_tables": {str(i): v for i, v in sorted(tables.items())},
        "mms": {str(i): v for i, v in sorted(mms.items())},
        "files": files,
        "inodes": {str(i): _inode(k, n, frame_hash) for i, n in sorted(inodes.items())},
        "pipes": {str(i): v for i, v in sorted(pipes.items())},
        "sockets": {str(i): v for i, v in sorted(sockets.items())},
        "mounts": [
            [m.id, m.fstype, m.source, k.vfs.path_of(m.mountpoint) if m.mountpoint else "/"]
            for m in k.vfs.mounts
        ],
        "http": None
        if k.http is None
        else [k.http.id, k.http.requests, k.http.restores, k.http.listener.local],
        "restores": k.restores,
        "frames": len(k.memory_file.refs),
    }


def _socket(s: Any) -> list[Any]:
    out = [type(s).__name__, s.state.name, len(s.recv_buf), _digest(bytes(s.recv_buf))]
    out.append(s.peer.id if s.peer is not None else None)
    if isinstance(s, TCPSocket):
        out += [s.local, s.remote, s.backlog, [c.id for c in s.accept_queue]]
    elif isinstance(s, UnixSocket):
        out.append(s.path)
    return out


def describe(k: Kernel) -> str:
    """A few lines for humans: clocks, the task tree, files, memory, locks, timers."""
    tk = k.timekeeper
    frames, nonzero, unfetched = k.memory_file.usage()
    lines = [
        f"kernel {k.boot_id} workload={k.workload} {'paused' if k.paused else 'running'}",
        f"  clocks: monotonic={tk.monotonic_ns / 1e9:.3f}s realtime={tk.realtime_ns / 1e9:.3f}s"
        f"  restores={k.restores}",
        f"  memory: {frames} frames ({frames * 4} KiB), {nonzero} non-zero"
        + (f", {unfetched} still in the page file" if unfetched else ""),
    ]
    lines.append("  tasks:")

    def walk(task: Task, depth: int) -> None:
        tg = task.tg
        nfds = len(task.fd_table.entries) if task.fd_table else 0
        armed = sum(1 for it in tg.itimers if it.expiry_ns) + sum(
            1 for t in tg.posix_timers.values() if t.expiry_ns
        )
        blocked = " waiting-for-lock" if task.blocked_on is not None else ""
        lines.append(
            f"    {'  ' * depth}{task.tid} {task.comm} [{task.state.value}]{blocked}"
            f" pgid={tg.pgrp.pgid if tg.pgrp else '-'} sid={tg.pgrp.session.sid if tg.pgrp else '-'}"
            f" fds={nfds} vmas={len(tg.mm.vmas) if tg.mm else 0} timers={armed}"
        )
        for child in sorted(task.children, key=lambda c: c.tid):
            walk(child, depth + 1)

    roots = [t for t in k.tasks() if t.parent is None and t.is_leader]
    for root in roots:
        walk(root, 0)
    ninodes = sum(1 for _ in k.vfs.walk())
    locked = 0
    seen: set[int] = set()
    for t in k.tasks():
        for _, e in t.fd_table.items() if t.fd_table else []:
            inode = e.file.lock_inode()
            if inode is not None and inode.ino not in seen:
                seen.add(inode.ino)
                if inode.locks is not None and any(ls.segments for ls in inode.locks.sets()):
                    locked += 1
    lines.append(f"  files: {ninodes} paths, {len(k.vfs.mounts)} mounts, {locked} locked inodes")
    if k.http is not None:
        lines.append(
            f"  http: listening on {k.http_listen_address() or 'unbound'}, "
            f"requests={k.http.requests} restores={k.http.restores}"
        )
    _ = (TaskState, CLOCK_MONOTONIC)
    return "\n".join(lines)
