"""Making a sandbox: its directory, record, cgroup and process, each recorded as it
appears, and all of it removed again when the command fails.

The process is forked from the warm template when one serves this root, else started as
a fresh interpreter (``_spawn_cold``); either way it is in the cgroup before it runs a
line of sandbox code, and it writes ``ready PID`` on a pipe.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckpt.errors import CgroupError, CkptError, SandboxError
from ckpt.sandbox.client.childenv import child_env
from ckpt.sandbox.client.group import make_cgroup
from ckpt.sandbox.client.pids import create_time, kill_pid, stop_all, track
from ckpt.sandbox.client.testhooks import pause_point
from ckpt.sandbox.wire import handover, template_proto
from ckpt.sandbox.wire.paths import CREATING, Root, SandboxState, now_iso

if TYPE_CHECKING:
    from ckpt.cgroups.base import BaseManager
    from ckpt.sandbox.wire.timings import Timings

READY_TIMEOUT_S = 30.0


def _log_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


@dataclass
class Spawned:
    """A sandbox process that answered ``ready``, and how it was started."""

    pid: int
    start: float
    create_ns: int
    via: str  # "template" or "cold"
    why_cold: str = ""


def spawn(
    root: Root,
    sandbox_id: str,
    mgr: BaseManager | None,
    use_template: bool,
    on_pid: Callable[[int, float], None] | None = None,
) -> Spawned:
    """Start the sandbox process inside ``mgr``'s cgroup, forked from the warm template
    when one serves this root, else as a fresh interpreter.  Either way the process is
    in the cgroup before it runs a line of sandbox code, and it writes ``ready PID``.
    ``on_pid(pid, start)`` records the process the moment it exists."""
    sock = root.socket_path(sandbox_id)
    log_path = root.log_path(sandbox_id)
    procs_fds: list[int] = []
    if mgr is not None:
        for d in dict.fromkeys(Path(p) for p in mgr.paths.values()):
            procs_fds.append(os.open(d / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
    r, w = os.pipe()
    t0 = time.perf_counter_ns()
    pid, via, why_cold = 0, "template", "" if use_template else "--no-template"
    try:
        with open(log_path, "ab") as log:
            if use_template:
                from ckpt.sandbox.client import template_client

                pid, why_cold = template_client.spawn(
                    root.path, sandbox_id, sock, log.fileno(), w, procs_fds
                )
                if not pid:  # a child it forked too late may still write to that pipe
                    os.close(r)
                    os.close(w)
                    r, w = os.pipe()
            if not pid:
                pid, via = _spawn_cold(root, sandbox_id, sock, log, w, procs_fds).pid, "cold"
    except OSError as exc:  # the log file (a read-only or broken root), a pipe, a fork
        os.close(r)
        where = f"{exc.filename}: " if exc.filename else ""
        raise SandboxError(
            f"cannot start sandbox {sandbox_id}: {where}{exc.strerror or exc}"
        ) from exc
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
        for fd in procs_fds:
            os.close(fd)
    start = create_time(pid)
    try:
        if on_pid is not None:
            on_pid(pid, start)
        line = _read_ready(r, READY_TIMEOUT_S)
    except BaseException:
        kill_pid(pid, start)
        raise
    finally:
        os.close(r)
    create_ns = time.perf_counter_ns() - t0
    if not line.startswith(b"ready"):
        kill_pid(pid, 0.0)
        raise SandboxError(
            f"sandbox process for {sandbox_id} exited during start-up"
            + (f": {_log_tail(log_path)}" if _log_tail(log_path) else "")
        )
    if mgr is not None and pid not in mgr.procs():
        kill_pid(pid, start)
        raise CgroupError(f"sandbox process {pid} did not join cgroup {mgr.name}")
    return Spawned(pid, start, create_ns, via, why_cold)


def _spawn_cold(
    root: Root, sandbox_id: str, sock: Path, log: Any, ready_w: int, procs_fds: list[int]
) -> subprocess.Popen:
    """A fresh interpreter: the parent opened each ``cgroup.procs``; the child writes
    ``0`` (itself) into them between fork and exec, so even interpreter start-up is
    charged to the cgroup and runs under its quota."""

    def join_cgroup() -> None:  # runs in the child between fork and exec: writes only
        for fd in procs_fds:
            os.write(fd, b"0")

    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-S",
                "-P",  # never a ckpt/ in the working directory
                "-m",
                "ckpt.sandbox.host.process",
                "--id",
                sandbox_id,
                "--socket",
                str(sock),
                "--ready-fd",
                str(ready_w),
                "--root",
                str(root.path),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(ready_w,),
            start_new_session=True,
            cwd="/",
            env={**child_env(), handover.ENV: template_proto.socket_path(str(root.path))},
            preexec_fn=join_cgroup if procs_fds else None,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"cannot start sandbox process for {sandbox_id}: {exc}") from exc
    track(proc)
    return proc


def _read_ready(fd: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return b"timeout"
        chunk = os.read(fd, 256)
        if not chunk:
            break
        buf += chunk
    return buf


def discard(root: Root, st: SandboxState) -> None:
    """Best-effort removal of everything a failed run/restore made."""
    with contextlib.suppress(CkptError):
        stop_all(root, st, root.cgroup_name(st.id))
    from ckpt.sandbox.wire import netns

    netns.remove_recorded(root, st, strict=False)
    remove_files(root, st.id)


def remove_files(root: Root, sandbox_id: str) -> None:
    sock = root.socket_path(sandbox_id)
    if sock.parent != root.dir(sandbox_id):
        sock.unlink(missing_ok=True)
    shutil.rmtree(root.dir(sandbox_id), ignore_errors=True)


def make_sandbox(
    root: Root,
    sandbox_id: str,
    cpus: float | None,
    ignore_cgroups: bool,
    engine: str | None,
    workload: str,
    notes: list[str],
    template: bool | None,
    verb: str,
    extra: dict[str, Any] | None = None,
) -> tuple[SandboxState, BaseManager | None, Spawned]:
    """Make the directory, cgroup and process; return (state, cgroup manager, spawn).

    The record is written first (with ``extra``, such as the network it is about to
    have) and again as soon as the cgroup, then the process, exists, so a CLI killed at
    any point leaves every part of the sandbox recorded."""
    from ckpt.sandbox.client import template_client

    use_template = not template_client.disabled() if template is None else template
    root.ensure()
    st = SandboxState(
        id=sandbox_id,
        pid=0,
        status=CREATING,
        workload=workload,
        cgroup=None,
        created=now_iso(),
        engine=engine,
        cpu=None,
        socket=str(root.socket_path(sandbox_id)),
        extra={**(extra or {}), "creating_by": [os.getpid(), create_time(os.getpid())]},
    )

    def record_pid(pid: int, start: float) -> None:
        st.pid, st.pid_start = pid, start
        root.write(st)
        pause_point(f"{verb}:spawned")

    try:
        root.dir(sandbox_id).mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise SandboxError(f"cannot create {root.dir(sandbox_id)}: {exc.strerror}") from exc
    mgr = None
    try:
        root.write(st)
        pause_point(f"{verb}:record")
        mgr = make_cgroup(root, sandbox_id, cpus, ignore_cgroups, notes)
        if mgr is not None:
            st.cgroup, st.cpu = mgr.name, cpus
            root.write(st)
        pause_point(f"{verb}:cgroup")
        spawned = spawn(root, sandbox_id, mgr, use_template, record_pid)
        pause_point(f"{verb}:ready")
    except BaseException:
        discard(root, st)
        raise
    if use_template and spawned.via == "cold" and spawned.why_cold != "no template running":
        notes.append(f"started cold: {spawned.why_cold}")
    return st, mgr, spawned


def finish(root: Root, st: SandboxState, verb: str) -> None:
    """Write the final record; if that fails, kill what was made (one line says why)."""
    pause_point(f"{verb}:served")
    st.extra.pop("creating_by", None)
    try:
        root.write(st)
    except CkptError:
        discard(root, st)
        raise


def note_start(timings: Timings, root: Root, spawned: Spawned) -> None:
    """Record how the sandbox started; after a cold start that wanted the template,
    start a fresh template in the background, ready for the next command."""
    timings.counters["sandbox_start"] = spawned.via
    if spawned.via == "cold":
        timings.counters["cold_reason"] = spawned.why_cold
        if spawned.why_cold != "--no-template":
            from ckpt.sandbox.client import template_client

            with contextlib.suppress(OSError, SandboxError):
                template_client.start(root.path)
