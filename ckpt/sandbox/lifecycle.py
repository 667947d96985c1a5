"""Sandbox lifecycle as library functions: run, list, state, pause, resume, kill, delete,
checkpoint, restore.  They raise ``SandboxError`` (or another ``CkptError``) and never print.

A sandbox is a detached process (its own session) running ``ckpt.sandbox.process``,
placed in cgroup ``ckpt/<root hash>/ID`` (``Root.cgroup_name``) *before it executes
anything*: the parent opens each
hierarchy's ``cgroup.procs`` and the child writes ``0`` (itself) into them in
``preexec_fn``, between fork and exec, so even interpreter start-up is charged to the
cgroup and runs under its CPU quota.  The child signals readiness on a pipe.

The rule for failures: a failed ``run`` or ``restore`` leaves no process, cgroup or
state directory behind; a failed ``checkpoint`` leaves the sandbox as it was.

Every sandbox stays accounted for: its record is written before anything else, then
again as soon as its cgroup and then its process exist (``status: creating`` until the
command ends, with the creating CLI's pid), so a CLI killed at any point leaves a record
that ``list`` shows and ``delete --force`` cleans.  Nothing in a record is trusted: a
cgroup must be this root's own name for the ID, a pid must match its start time and be in
that cgroup (or be the peer of the sandbox's socket), and the socket must be a socket.

Testing hook: ``CKPT_TEST_PAUSE_AT=VERB:STEP`` stops the CLI (SIGSTOP) at that step, so a
test can SIGKILL it exactly there; the steps are ``pause_point``'s callers.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from ckpt.errors import CgroupError, CkptError, SandboxError, SandboxGone, SandboxNotFound
from ckpt.sandbox import handover, rpc, template_proto
from ckpt.sandbox.childenv import child_env
from ckpt.sandbox.paths import (
    CREATING,
    PAUSED,
    RUNNING,
    STOPPED,
    UNREADABLE,
    Root,
    SandboxState,
    now_iso,
)
from ckpt.sandbox.timings import (
    CHECKPOINT,
    RESTORE,
    RESUME_TOTAL,
    SANDBOX_CREATE,
    SUSPEND_TOTAL,
    Timings,
)

if TYPE_CHECKING:  # protocol (msgspec) is imported by the commands that talk to a sandbox
    from ckpt.cgroups.base import BaseManager
    from ckpt.sandbox import protocol as p

READY_TIMEOUT_S = 30.0
# The restore RPC: a fixed floor plus time for the image's bytes at a slow rate per CPU
# of its quota, so a big image is never cut short while a hung restore (a FIFO for a
# statefile, a wedged sandbox) still ends.  A files:100000 image (3.3 MB) restored in
# 1.3 s on one uncapped CPU (2.6 MB/s); the rate below leaves five times that margin.
RESTORE_TIMEOUT_S = 120.0
RESTORE_BYTES_PER_S = 512 * 1024
RESTORE_TIMEOUT_ENV = "CKPT_RESTORE_TIMEOUT_S"
# A checkpoint's own deadline: generous, since a sandbox of many GiB under a small quota
# writes for minutes, and stopping the wait never kills the sandbox (it may still finish).
CHECKPOINT_TIMEOUT_S = 1800.0
CHECKPOINT_TIMEOUT_ENV = "CKPT_CHECKPOINT_TIMEOUT_S"
EXIT_TIMEOUT_S = 10.0
REAP_TIMEOUT_S = 3.0
ENGINES = ("native", "typed", "reflect")  # None: the fastest one the sandbox has

_children: dict[int, subprocess.Popen] = {}  # reaped on liveness checks (long-lived callers)


@dataclass
class RunResult:
    state: SandboxState
    timings: Timings
    notes: list[str] = field(default_factory=list)


@dataclass
class CheckpointResult:
    state: SandboxState
    image: Path | str  # str: an s3:// URL
    timings: Timings
    stats: dict[str, Any] | None = None
    stats_text: str | None = None
    rounds: list[dict[str, Any]] | None = None  # pre-copy rounds, oldest first


@dataclass
class RestoreResult:
    state: SandboxState
    timings: Timings
    stats: dict[str, Any] | None = None
    stats_text: str | None = None
    notes: list[str] = field(default_factory=list)


# -- processes -------------------------------------------------------------------------

PAUSE_ENV = "CKPT_TEST_PAUSE_AT"


def pause_point(step: str) -> None:
    """Stop this process here when ``CKPT_TEST_PAUSE_AT`` names ``step`` (tests only)."""
    if os.environ.get(PAUSE_ENV) == step:
        os.kill(os.getpid(), signal.SIGSTOP)


def _create_time(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


def _alive(pid: int, start: float) -> bool:
    """Is ``pid`` still our sandbox (not a zombie, not a reused pid)?"""
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        _children.pop(pid, None)
        return False
    try:
        proc = psutil.Process(pid)
        if start and abs(proc.create_time() - start) > 0.05:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _wait_dead(pid: int, start: float, timeout: float) -> bool:
    """Wait for the sandbox to exit.  A pidfd (Linux 5.3+) turns readable the moment it
    does, so a checkpoint's reply is not followed by up to 10 ms of polling; elsewhere,
    poll every 10 ms."""
    deadline = time.monotonic() + timeout
    pidfd = _pidfd(pid) if _alive(pid, start) else None
    try:
        while _alive(pid, start):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if pidfd is not None:
                select.select([pidfd], [], [], min(left, 0.5))
            else:
                time.sleep(0.01)
    finally:
        if pidfd is not None:
            os.close(pidfd)
    return True


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _kill_pid(pid: int, start: float) -> None:
    if _alive(pid, start):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_dead(pid, start, EXIT_TIMEOUT_S)


def _wait_reaped(pid: int, start: float, timeout: float) -> None:
    """Wait until a dead sandbox's zombie is reaped (by init: it is not our child), so
    ``statefile.clean_stale`` sees its writer gone and removes the half-written image."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if abs(psutil.Process(pid).create_time() - start) > 0.05:
                return  # the pid was reused: ours is gone
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)


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


def _spawn(
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
                from ckpt.sandbox import template_client

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
    start = _create_time(pid)
    try:
        if on_pid is not None:
            on_pid(pid, start)
        line = _read_ready(r, READY_TIMEOUT_S)
    except BaseException:
        _kill_pid(pid, start)
        raise
    finally:
        os.close(r)
    create_ns = time.perf_counter_ns() - t0
    if not line.startswith(b"ready"):
        _kill_pid(pid, 0.0)
        raise SandboxError(
            f"sandbox process for {sandbox_id} exited during start-up"
            + (f": {_log_tail(log_path)}" if _log_tail(log_path) else "")
        )
    if mgr is not None and pid not in mgr.procs():
        _kill_pid(pid, start)
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
                "-m",
                "ckpt.sandbox.process",
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
    _children[proc.pid] = proc
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


# -- cgroups ---------------------------------------------------------------------------


def _make_cgroup(
    root: Root, sandbox_id: str, cpus: float | None, ignore: bool, notes: list[str]
) -> BaseManager | None:
    """The sandbox's cgroup with its quota applied, or None when running without one."""
    if ignore:
        if cpus is not None:
            notes.append(f"--ignore-cgroups: CPU quota {cpus:g} not applied")
        return None
    from ckpt import cgroups

    name = root.cgroup_name(sandbox_id)
    _remove_cgroup(name)  # a stale group of this root's, from a crashed run
    if cpus is not None:
        ok, reason = cgroups.available_for_quota()
        if not ok:
            raise CgroupError(
                f"cannot apply a CPU quota: {reason}; run as root or pass --ignore-cgroups"
            )
        return cgroups.create(name, cpus=cpus)
    try:
        mgr = cgroups.create(name)
    except CgroupError as exc:
        reason = str(exc)
    else:
        if not mgr.inert:
            return mgr
        reason = mgr.reason
    notes.append(f"running without a cgroup ({reason}); CPU is read from the process")
    return None


def _open_cgroup(name: str | None) -> BaseManager | None:
    if not name:
        return None
    from ckpt import cgroups

    try:
        return cgroups.open_group(name)
    except CgroupError:
        return None


def _remove_cgroup(name: str | None) -> None:
    """Kill whatever is left in the group and delete it (and this root's parent group
    once it is empty); quiet if it is already gone."""
    mgr = _open_cgroup(name)
    if mgr is None:
        return
    try:
        if mgr.procs():
            with contextlib.suppress(CgroupError):
                mgr.thaw()
            mgr.kill()
        mgr.delete()
    except CgroupError as exc:
        raise CgroupError(f"cannot remove cgroup {name}: {exc}") from exc
    from ckpt import cgroups

    cgroups.remove_if_empty(str(Path(str(name)).parent))


def _group(root: Root, st: SandboxState, *, strict: bool) -> str:
    """This sandbox's cgroup name: always this root's own name for the ID.  A record
    naming any other group was edited; ``strict`` refuses it, else it is ignored."""
    mine = root.cgroup_name(st.id)
    if st.cgroup not in (None, mine) and strict:
        raise SandboxError(
            f"sandbox {st.id}: its record names cgroup {st.cgroup!r}, not this root's "
            f"{mine!r}; refusing to act on it (check who edited {root.dir(st.id)})"
        )
    return mine


def _group_procs(group: str) -> list[int]:
    mgr = _open_cgroup(group)
    if mgr is None:
        return []
    try:
        return list(mgr.procs())
    except CgroupError:
        return []


def _socket_peer(root: Root, sandbox_id: str) -> int | None:
    """The pid listening on the sandbox's control socket, if a real socket answers."""
    import socket

    path = root.socket_path(sandbox_id)
    try:
        rpc.check_socket_file(path, f"sandbox {sandbox_id}")
    except SandboxError:
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(str(path))
            return rpc.peer_of(sock)
        except OSError:
            return None


def _cmdline_is_sandbox(root: Root, sandbox_id: str, pid: int) -> bool:
    """Does ``pid``'s command line say it is this root's sandbox: its title (``ckpt
    sandbox ID (ROOT)``), or before it has one, a cold start's whose ``--socket`` is
    ours, or the command line of this root's template (a sandbox forked by a template
    that names no sandboxes)?"""
    from ckpt.sandbox import title

    try:
        cmd = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    if title.shows(cmd, title.sandbox_title(sandbox_id, str(root.path))):
        return True
    if "ckpt.sandbox.process" in cmd and "--socket" in cmd:
        i = cmd.index("--socket") + 1
        return i < len(cmd) and cmd[i] == str(root.socket_path(sandbox_id))
    if "ckpt.sandbox.template" in cmd and "--root" in cmd:
        i = cmd.index("--root") + 1
        return i < len(cmd) and os.path.abspath(cmd[i]) == str(root.path)
    return False


def _cgroups_of(pid: int) -> set[str]:
    """The groups ``pid`` is in, one per hierarchy, as ``/proc/PID/cgroup`` names them
    (read directly: cheaper than importing ``ckpt.cgroups`` for a ``ckpt state``)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return {line.rstrip("\n").split(":", 2)[-1] for line in f}
    except OSError:
        return set()


def _is_ours(root: Root, st: SandboxState, group: str) -> bool:
    """Is the recorded pid alive and this sandbox's process?  Its start time must match,
    and it must be in the sandbox's cgroup when it has one, else be the peer of its
    control socket (or, before the socket exists, carry this sandbox's command line)."""
    if not st.pid or not st.pid_start or not _alive(st.pid, st.pid_start):
        return False
    if f"/{group}" in _cgroups_of(st.pid):
        return True
    if st.cgroup is not None or _open_cgroup(group) is not None:
        return False  # the sandbox has a group, and this process is not in it
    peer = _socket_peer(root, st.id)
    if peer is not None:
        return peer == st.pid
    return _cmdline_is_sandbox(root, st.id, st.pid)


def _in_other_group(root: Root, pid: int, group: str) -> bool:
    """Is ``pid`` in a group of this root other than ``group`` (another sandbox's)?"""
    ours = f"/{root.cgroup_parent()}/"
    return any(p.startswith(ours) and p != f"/{group}" for p in _cgroups_of(pid))


def _socket_owner(root: Root, st: SandboxState, group: str) -> int | None:
    """The process serving this sandbox's control socket, when it is this root's sandbox
    process and not in another sandbox's group: how a sandbox whose record lost its pid
    (or was given another) is still found."""
    peer = _socket_peer(root, st.id)
    if peer is None or peer == os.getpid() or not _cmdline_is_sandbox(root, st.id, peer):
        return None
    return None if _in_other_group(root, peer, group) else peer


def _remains(root: Root, st: SandboxState, group: str) -> list[str]:
    """What is left of the sandbox: its verified process, its cgroup's members, the
    process serving its socket, and the cgroup itself; empty when nothing is."""
    left = [f"pid {st.pid}"] if _is_ours(root, st, group) else []
    procs = [p for p in _group_procs(group) if p != st.pid]
    left += [f"pid {p} (in cgroup {group})" for p in procs]
    owner = _socket_owner(root, st, group)
    if owner is not None and owner != st.pid and owner not in procs:
        left.append(f"pid {owner} (serving {root.socket_path(st.id)})")
    if _open_cgroup(group) is not None:
        left.append(f"cgroup {group}")
    return left


def _stop_all(root: Root, st: SandboxState, group: str) -> None:
    """SIGKILL every process of the sandbox (its cgroup's members and its verified pid),
    remove the cgroup, and check that nothing is left: else one line saying what is."""
    pid_ours = _is_ours(root, st, group)
    owner = _socket_owner(root, st, group)
    error: CgroupError | None = None
    try:
        _remove_cgroup(group)
    except CgroupError as exc:
        error = exc
    if pid_ours:
        _kill_pid(st.pid, st.pid_start)
    if owner is not None and owner != st.pid:
        _kill_pid(owner, _create_time(owner))
    if error is not None:  # the cgroup may empty only once the verified pid is gone
        with contextlib.suppress(CgroupError):
            _remove_cgroup(group)
    left = _remains(root, st, group)
    if left:
        raise SandboxError(
            f"sandbox {st.id} is not fully stopped: {', '.join(left)} remain"
            + (f" ({error})" if error else "")
            + "; try again, or kill them by hand"
        )


def _freezable(mgr: BaseManager | None) -> BaseManager | None:
    """``mgr`` if its group has a freezer; without one, pause freezes the kernel only."""
    if mgr is None or mgr.freezer_backend == "none":
        return None
    return mgr


def _cpu_usec(mgr: BaseManager | None) -> int | None:
    if mgr is None:
        return None
    try:
        return int(mgr.cpu_usage_usec())
    except CgroupError:
        return None


# -- state -----------------------------------------------------------------------------


def _creator_alive(st: SandboxState) -> bool:
    """Is the CLI that is creating this sandbox still at work?"""
    by = st.extra.get("creating_by")
    if not (isinstance(by, list) and len(by) == 2):
        return False
    try:
        return _alive(int(by[0]), float(by[1]))
    except (TypeError, ValueError):
        return False


def refresh(root: Root, sandbox_id: str) -> SandboxState:
    """A sandbox's state as it really is; writes nothing (``list`` and ``state`` are
    read-only).  A sandbox none of whose processes is left shows as stopped; one whose
    creating CLI died part-way shows as creating while any of it remains."""
    st = root.read(sandbox_id)
    if st.status not in (RUNNING, PAUSED, CREATING):
        return st
    if st.status == CREATING and _creator_alive(st):
        return st
    group = _group(root, st, strict=False)
    if _is_ours(root, st, group) or _group_procs(group) or _socket_owner(root, st, group):
        return st
    st.status = STOPPED
    st.address = None
    return st


def list_sandboxes(root: Root) -> list[SandboxState]:
    """Every sandbox under the root; one whose record cannot be read is listed as
    ``unreadable`` (``delete --force`` removes it), never left out."""
    out = []
    for sandbox_id in root.ids():
        try:
            out.append(refresh(root, sandbox_id))
        except SandboxNotFound:
            continue  # deleted meanwhile
        except SandboxError:
            out.append(_unreadable(sandbox_id))
    return out


def _unreadable(sandbox_id: str) -> SandboxState:
    """A stand-in for a record that cannot be read: nothing in it is known."""
    return SandboxState(
        id=sandbox_id, pid=0, status=UNREADABLE, workload="?", cgroup=None, created=""
    )


def _running(root: Root, sandbox_id: str, verb: str) -> SandboxState:
    st = refresh(root, sandbox_id)
    _group(root, st, strict=True)
    if st.status not in (RUNNING, PAUSED):
        raise SandboxError(f"cannot {verb} sandbox {sandbox_id}: it is {st.status}")
    return st


def _call(root: Root, st: SandboxState, request: p.Request, **kw: Any) -> Any:
    """An RPC to the sandbox on its own socket (this root's path for the ID, never the
    record's), which must be a socket whose listener is the recorded pid; returns the
    request's reply type (``protocol.REPLIES``)."""
    return rpc.call(
        root.socket_path(st.id),
        request,
        what=f"sandbox {st.id}",
        peer_pid=st.pid,
        **kw,
    )


def _discard(root: Root, st: SandboxState) -> None:
    """Best-effort removal of everything a failed run/restore made."""
    with contextlib.suppress(CkptError):
        _stop_all(root, st, root.cgroup_name(st.id))
    _remove_files(root, st.id)


def _remove_files(root: Root, sandbox_id: str) -> None:
    sock = root.socket_path(sandbox_id)
    if sock.parent != root.dir(sandbox_id):
        sock.unlink(missing_ok=True)
    shutil.rmtree(root.dir(sandbox_id), ignore_errors=True)


def _check_engine(engine: str | None) -> None:
    if engine is not None and engine not in ENGINES:
        raise SandboxError(f"unknown engine {engine!r}: choose one of {', '.join(ENGINES)}")


# -- commands --------------------------------------------------------------------------


def _start(
    root: Root,
    sandbox_id: str,
    cpus: float | None,
    ignore_cgroups: bool,
    engine: str | None,
    workload: str,
    notes: list[str],
    template: bool | None,
    verb: str,
) -> tuple[SandboxState, BaseManager | None, Spawned]:
    """Make the directory, cgroup and process; return (state, cgroup manager, spawn).

    The record is written first and again as soon as the cgroup, then the process,
    exists, so a CLI killed at any point leaves every part of the sandbox recorded."""
    from ckpt.sandbox import template_client

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
        extra={"creating_by": [os.getpid(), _create_time(os.getpid())]},
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
        mgr = _make_cgroup(root, sandbox_id, cpus, ignore_cgroups, notes)
        if mgr is not None:
            st.cgroup, st.cpu = mgr.name, cpus
            root.write(st)
        pause_point(f"{verb}:cgroup")
        spawned = _spawn(root, sandbox_id, mgr, use_template, record_pid)
        pause_point(f"{verb}:ready")
    except BaseException:
        _discard(root, st)
        raise
    if use_template and spawned.via == "cold" and spawned.why_cold != "no template running":
        notes.append(f"started cold: {spawned.why_cold}")
    return st, mgr, spawned


def _finish(root: Root, st: SandboxState, verb: str) -> None:
    """Write the final record; if that fails, kill what was made (one line says why)."""
    pause_point(f"{verb}:served")
    st.extra.pop("creating_by", None)
    try:
        root.write(st)
    except CkptError:
        _discard(root, st)
        raise


def _note_start(timings: Timings, root: Root, spawned: Spawned) -> None:
    """Record how the sandbox started; after a cold start that wanted the template,
    start a fresh template in the background, ready for the next command."""
    timings.counters["sandbox_start"] = spawned.via
    if spawned.via == "cold":
        timings.counters["cold_reason"] = spawned.why_cold
        if spawned.why_cold != "--no-template":
            from ckpt.sandbox import template_client

            with contextlib.suppress(OSError, SandboxError):
                template_client.start(root.path)


def run(
    root: Root,
    sandbox_id: str,
    workload: str,
    *,
    cpus: float | None = None,
    port: int = 0,
    engine: str | None = None,
    ignore_cgroups: bool = False,
    options: dict[str, Any] | None = None,
    template: bool | None = None,
) -> RunResult:
    """Start a sandbox running ``workload``; returns once it is ready (and listening)."""
    _check_engine(engine)
    if root.exists(sandbox_id):
        st = refresh(root, sandbox_id)
        raise SandboxError(
            f"sandbox {sandbox_id} already exists ({st.status}); `ckpt delete {sandbox_id}` first"
        )
    notes: list[str] = []
    timings = Timings()
    t0 = time.perf_counter_ns()
    st, _mgr, spawned = _start(
        root, sandbox_id, cpus, ignore_cgroups, engine, workload, notes, template, "run"
    )
    timings.phases_ns[SANDBOX_CREATE] = spawned.create_ns
    try:
        from ckpt.sandbox.protocol import BootRequest

        request = BootRequest(workload=workload, port=port, options=options or {})
        reply: p.BootReply = _call(root, st, request, timeout=120)
    except BaseException:
        _discard(root, st)
        raise
    timings.phases_ns["Run"] = time.perf_counter_ns() - t0
    st.address = reply.address
    st.status = RUNNING
    _finish(root, st, "run")
    _note_start(timings, root, spawned)
    return RunResult(st, timings, notes)


def state(root: Root, sandbox_id: str) -> SandboxState:
    return refresh(root, sandbox_id)


def pause(root: Root, sandbox_id: str) -> SandboxState:
    """Freeze the kernel (HTTP requests start waiting), then the cgroup."""
    st = _running(root, sandbox_id, "pause")
    if st.status == PAUSED:
        return st
    from ckpt.sandbox.protocol import PauseRequest, ResumeRequest

    _call(root, st, PauseRequest())
    mgr = _freezable(_open_cgroup(st.cgroup and _group(root, st, strict=True)))
    if mgr is not None:
        try:
            mgr.freeze()
        except CgroupError:  # leave it as it was: thawed and running
            with contextlib.suppress(CgroupError):
                mgr.thaw()
            _call(root, st, ResumeRequest())
            raise
    st.status = PAUSED
    root.write(st)
    return st


def resume(root: Root, sandbox_id: str) -> SandboxState:
    """Thaw the cgroup, then the kernel; waiting HTTP requests are answered."""
    st = _running(root, sandbox_id, "resume")
    if st.status == RUNNING:
        return st
    mgr = _freezable(_open_cgroup(st.cgroup and _group(root, st, strict=True)))
    if mgr is not None:
        mgr.thaw()
    from ckpt.sandbox.protocol import ResumeRequest

    _call(root, st, ResumeRequest())
    st.status = RUNNING
    root.write(st)
    return st


def _release_held(root: Root, sandbox_id: str) -> None:
    """Have the template close the sockets it holds for ``sandbox_id``, if it holds any."""
    path = template_proto.socket_path(str(root.path))
    if os.path.exists(path):
        handover.release(path, sandbox_id)


def kill(root: Root, sandbox_id: str) -> SandboxState:
    """SIGKILL every process of the sandbox (its cgroup's members, its verified pid) and
    free the cgroup; the sockets a checkpoint handed to the template for it are closed
    too.  Succeeds only when nothing of it is left."""
    st = refresh(root, sandbox_id)
    group = _group(root, st, strict=True)
    _release_held(root, sandbox_id)
    _stop_all(root, st, group)
    _clean_checkpoint(st)
    st.extra.pop("checkpointing_to", None)
    st.status = STOPPED
    st.address = None
    st.extra.pop("creating_by", None)
    try:
        root.write(st)
    except CkptError as exc:
        raise SandboxError(
            f"sandbox {sandbox_id} was stopped, but its record was not updated ({exc}); "
            f"`ckpt delete --force {sandbox_id}` removes it"
        ) from exc
    return st


def delete(root: Root, sandbox_id: str, *, force: bool = False) -> None:
    """Remove a stopped sandbox's files (and, with ``force``, kill a running one first).
    Writes no record on the way, so it works on a full disk.  With ``force``, a record
    that cannot be read is removed too, after whatever of the sandbox can be found
    without it (this root's group for the ID, the process serving its socket)."""
    try:
        st = refresh(root, sandbox_id)
    except SandboxNotFound:
        raise
    except SandboxError:
        if not force:
            raise
        st = _unreadable(sandbox_id)
    group = _group(root, st, strict=True)
    if st.status != STOPPED and not force:
        raise SandboxError(
            f"sandbox {sandbox_id} is {st.status}; `ckpt kill {sandbox_id}` first or pass --force"
        )
    _release_held(root, sandbox_id)
    _stop_all(root, st, group)
    _clean_checkpoint(st)
    _remove_files(root, sandbox_id)


def _clean_checkpoint(st: SandboxState) -> None:
    """Remove what a checkpoint cut short left beside its image (a CLI killed while the
    sandbox wrote): ``statefile.clean_stale`` touches only leftovers of dead writers."""
    image = st.extra.get("checkpointing_to")
    if not isinstance(image, str) or not image:
        return
    from ckpt import statefile

    if st.pid and st.pid_start:
        _wait_reaped(st.pid, st.pid_start, REAP_TIMEOUT_S)
    with contextlib.suppress(CkptError, OSError):
        statefile.clean_stale(Path(image))


def _image_identity(image: Path) -> tuple[int, int, int] | None:
    """Which file ``image/checkpoint.img`` is now (device, inode, mtime), or None."""
    try:
        info = os.stat(Path(image) / "checkpoint.img")
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_mtime_ns)


def _died_message(
    sandbox_id: str, image: Path | str, before: Any, key: bytes | None, exc: BaseException
) -> str:
    """What a checkpoint whose sandbox died left at ``image``, said as it is: a new image
    in place (and whether it verifies), or none, the previous one (if any) unchanged."""
    head = f"checkpoint of {sandbox_id} failed: the sandbox process died ({exc})"
    if str(image).startswith("s3://"):
        from ckpt.sandbox.remote_image import died_message

        return died_message(head, str(image), sandbox_id, before)
    if _image_identity(image) in (None, before):
        kept = "; the previous image there is unchanged" if before is not None else ""
        return f"{head}; no image was committed at {image}{kept}"
    from ckpt import statefile
    from ckpt.statefile.inspect import report_failed

    try:
        report = statefile.inspect_image(image, key, verify=True)
        ok = not report_failed(report)
        owner = (report.get("metadata") or {}).get("sandbox_id")
    except CkptError:
        ok, owner = False, None
    if ok and owner == sandbox_id:
        return (
            f"{head} after committing its image: {image} holds the new checkpoint and it "
            "verifies; restore from it"
        )
    return (
        f"{head} while committing its image: {image} holds a new image that does not "
        "verify; checkpoint again with --force, or remove it"
    )


def checkpoint(
    root: Root,
    sandbox_id: str,
    image: Path | str,
    *,
    leave_running: bool = False,
    compression: str = "zstd",
    level: int | None = None,
    engine: str | None = None,
    stats: bool = False,
    key: bytes | None = None,
    force: bool = False,
    drain_timeout: float | None = None,
    options: dict[str, Any] | None = None,
) -> CheckpointResult:
    """Have the sandbox write its image; it stops afterwards unless ``leave_running``.

    A sandbox that stops first drains: it stops accepting, lets accepted requests finish
    (for at most ``drain_timeout`` seconds, else the checkpoint fails and it goes on
    serving), and hands its listening socket and idle connections to the template for
    the restore (``handover.py``)."""
    _check_engine(engine)
    from ckpt.sandbox.remote_image import attach, remote_before, request_fields  # s3://

    remote = request_fields(image)
    t0 = time.perf_counter_ns()
    st = _running(root, sandbox_id, "checkpoint")
    engine = engine or st.engine
    mgr = _open_cgroup(_group(root, st, strict=True))
    was_paused = st.status == PAUSED
    freezer = _freezable(mgr)
    if was_paused and freezer is not None:
        freezer.thaw()  # the kernel stays frozen; the process must run to write the image
    cpu0 = _cpu_usec(mgr)
    timings = Timings()
    from ckpt.sandbox.protocol import CheckpointRequest, Handover

    request = CheckpointRequest(
        image=str(Path(image).absolute()),
        leave_running=leave_running,
        compression=compression,
        level=level,
        engine=engine,
        stats=stats,
        key_hex=key.hex() if key else None,
        force=force,
        drain_timeout=drain_timeout,
        **(options or {}),  # pre_dump, parent, pre_copy: see precopy.py
    )
    request = attach(request, remote)
    image = request.image if remote else Path(request.image)
    before = remote_before(request.image) if remote else _image_identity(image)
    st.extra["checkpointing_to"] = request.image  # kill and delete clean its leftovers
    root.write(st)
    pause_point("checkpoint:sending")
    deadline = _env_seconds(CHECKPOINT_TIMEOUT_ENV, CHECKPOINT_TIMEOUT_S)
    try:
        with timings.phase(CHECKPOINT):
            reply: p.CheckpointReply = _call(root, st, request, timeout=deadline)
    except CkptError as exc:
        if isinstance(exc.__cause__, TimeoutError) and _alive(st.pid, st.pid_start):
            raise SandboxError(
                f"checkpoint of {sandbox_id} did not finish within {deadline:g} s; the "
                f"sandbox is still at it: `ckpt state {sandbox_id}` shows when it ends, "
                f"`ckpt kill {sandbox_id}` stops it (set {CHECKPOINT_TIMEOUT_ENV} to wait "
                "longer)"
            ) from exc
        if isinstance(exc, SandboxGone):  # EOF can come a moment before the exit shows
            _wait_dead(st.pid, st.pid_start, EXIT_TIMEOUT_S)
        if not _alive(st.pid, st.pid_start):
            from ckpt import statefile

            with contextlib.suppress(CkptError):
                _stop_all(root, st, root.cgroup_name(sandbox_id))
            _wait_reaped(st.pid, st.pid_start, REAP_TIMEOUT_S)
            statefile.clean_stale(Path(image))
            raise SandboxError(_died_message(sandbox_id, image, before, key, exc)) from exc
        if was_paused and freezer is not None:
            freezer.freeze()
        st.extra.pop("checkpointing_to", None)
        with contextlib.suppress(CkptError):
            root.write(st)
        raise
    pause_point("checkpoint:replied")
    if reply.stopping:
        if not _wait_dead(st.pid, st.pid_start, EXIT_TIMEOUT_S):
            _kill_pid(st.pid, st.pid_start)
        cpu1 = _cpu_usec(mgr)
        _remove_cgroup(root.cgroup_name(sandbox_id))
        st.status = STOPPED
        st.address = None
    else:
        cpu1 = _cpu_usec(mgr)
        if was_paused and freezer is not None:
            freezer.freeze()
    timings.phases_ns[SUSPEND_TOTAL] = time.perf_counter_ns() - t0
    if cpu0 is not None and cpu1 is not None:
        timings.cpu_usec, timings.cpu_source = cpu1 - cpu0, "cgroup"
    else:
        timings.cpu_usec, timings.cpu_source = reply.cpu_usec, "process"
    timings.counters = dict(reply.counters)
    timings.counters["checkpoint_in_sandbox_ms"] = round(reply.checkpoint_ns / 1e6, 3)
    if reply.handover is not None:
        timings.counters["handover"] = _said(reply.handover.value, reply.handover_detail)
    st.extra["last_checkpoint"] = request.image
    st.extra["handover"] = "template" if reply.handover is Handover.TEMPLATE else ""
    st.extra.pop("checkpointing_to", None)
    try:
        root.write(st)
    except CkptError as exc:
        raise SandboxError(
            f"checkpoint of {sandbox_id} was written to {request.image} (sandbox "
            f"{st.status}), but its record was not updated: {exc}"
        ) from exc
    return CheckpointResult(st, image, timings, reply.stats, reply.stats_text, reply.rounds)


def _said(outcome: str, detail: str) -> str:
    """An outcome as ``--stats`` and ``--json`` show it: ``none (no template)``."""
    return f"{outcome} ({detail})" if detail else outcome


def restore(
    root: Root,
    sandbox_id: str,
    image: Path | str,
    *,
    cpus: float | None = None,
    engine: str | None = None,
    stats: bool = False,
    background: bool = False,
    key: bytes | None = None,
    port: int | None = None,
    ignore_cgroups: bool = False,
    template: bool | None = None,
) -> RestoreResult:
    """Start a new sandbox process (in its cgroup, under its quota) from an image.

    Replaces a stopped sandbox of the same ID; refuses a running one.  On failure,
    nothing of the new sandbox is left behind.
    """
    _check_engine(engine)
    from ckpt.sandbox.remote_image import STAGE_DIR, attach, request_fields

    remote = request_fields(image, background=background)  # s3://: the store's settings
    t0 = time.perf_counter_ns()
    image = Path(image).absolute()
    if not remote and not image.exists():
        raise SandboxError(f"no image at {image}: check --image-path")
    if root.exists(sandbox_id):
        old = refresh(root, sandbox_id)
        if old.status != STOPPED:
            raise SandboxError(
                f"sandbox {sandbox_id} is {old.status}; restore into a new ID, or kill and "
                f"delete it first"
            )
        handed_over = old.extra.get("handover") == "template"
        _stop_all(root, old, _group(root, old, strict=True))
        _remove_files(root, sandbox_id)
    else:
        handed_over = False
    notes: list[str] = []
    timings = Timings()
    st, mgr, spawned = _start(
        root, sandbox_id, cpus, ignore_cgroups, engine, "(restoring)", notes, template, "restore"
    )
    timings.phases_ns[SANDBOX_CREATE] = spawned.create_ns
    from ckpt.sandbox.protocol import Listener, RestoreRequest

    request = RestoreRequest(
        image=str(image),
        engine=engine,
        stats=stats,
        background=background,
        key_hex=key.hex() if key else None,
        port=port,
    )
    request = attach(request, remote, stage=root.dir(sandbox_id) / STAGE_DIR)
    deadline = restore_timeout(image, cpus if mgr is not None else None)
    try:
        try:
            reply: p.RestoreReply = _call(root, st, request, timeout=deadline)
        except SandboxError as exc:
            if not isinstance(exc.__cause__, TimeoutError):
                raise
            raise SandboxError(
                f"restore of {sandbox_id} did not finish within {deadline:g} s; the sandbox "
                f"was removed (set {RESTORE_TIMEOUT_ENV} for a slower restore)"
            ) from exc
        cpu = _cpu_usec(mgr)
    except BaseException:
        _discard(root, st)
        raise
    timings.phases_ns[RESTORE] = reply.restore_ns
    timings.phases_ns[RESUME_TOTAL] = time.perf_counter_ns() - t0
    if cpu is not None:
        timings.cpu_usec, timings.cpu_source = cpu, "cgroup"
    else:
        timings.cpu_usec, timings.cpu_source = reply.cpu_usec, "process"
    timings.counters = dict(reply.counters)
    if reply.listener is Listener.HANDED_OVER:
        timings.counters["listener"] = reply.listener.value
    elif reply.listener is Listener.BOUND_ANEW:
        timings.counters["listener"] = _said(reply.listener.value, reply.bind_detail)
    st.workload = reply.workload or _image_workload(image) or "unknown"
    st.address = reply.address
    st.status = RUNNING
    st.restored_from = request.image
    _finish(root, st, "restore")
    _note_start(timings, root, spawned)
    if reply.held_for == sandbox_id:  # on the handed-over sockets: the template lets go
        _release_held(root, sandbox_id)
    else:
        notes.extend(_listener_notes(reply, handed_over))
    return RestoreResult(st, timings, reply.stats, reply.stats_text, notes)


def _env_seconds(name: str, default: float) -> float:
    """A positive number of seconds from the environment variable ``name``, else
    ``default``."""
    with contextlib.suppress(ValueError):
        given = float(os.environ.get(name) or 0)
        if given > 0:
            return given
    return default


def restore_timeout(image: Path, cpus: float | None = None) -> float:
    """How long the restore RPC may take: ``CKPT_RESTORE_TIMEOUT_S`` if set, else
    RESTORE_TIMEOUT_S plus the image's size at RESTORE_BYTES_PER_S per CPU of the
    quota (``cpus``; no quota counts as one CPU)."""
    given = _env_seconds(RESTORE_TIMEOUT_ENV, 0.0)
    if given > 0:
        return given
    size = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(image):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    size += entry.stat(follow_symlinks=False).st_size
    share = min(cpus, 1.0) if cpus else 1.0
    return RESTORE_TIMEOUT_S + size / (RESTORE_BYTES_PER_S * share)


def _listener_notes(reply: p.RestoreReply, handed_over: bool) -> list[str]:
    """One line when a restore bound its port anew although clients may have waited."""
    from ckpt.sandbox.protocol import BindReason, Listener

    reason = reply.bind_reason
    if reply.listener is not Listener.BOUND_ANEW or reason is None:
        return []
    lost = reason.sockets_lost
    if handed_over and lost:
        return [
            "the sockets this sandbox handed to the template at its checkpoint are gone "
            "(the template exited, its hold timed out, or `ckpt kill` closed them): clients "
            "were refused and parked keep-alive connections cut until this restore bound "
            "the port anew"
        ]
    if lost and reason is not BindReason.NOTHING_HELD:
        return [
            "no template held the listening socket: it was bound anew, and clients were "
            "refused between the checkpoint and this restore"
        ]
    return []


def _image_workload(image: Path) -> str | None:
    try:
        from ckpt import statefile

        return statefile.open_image_unverified(image).metadata.get("workload")
    except CkptError:
        return None


def fingerprint(root: Root, sandbox_id: str) -> p.FingerprintReply:
    """The kernel's fingerprint and description (for before/after comparisons)."""
    from ckpt.sandbox.protocol import FingerprintRequest

    st = _running(root, sandbox_id, "fingerprint")
    return _call(root, st, FingerprintRequest())


def read_key(path: Path | None) -> bytes | None:
    """The HMAC key from ``--key-file``, read as ``ckpt inspect statefile`` reads it."""
    if path is None:
        return None
    from ckpt import statefile

    return statefile.read_key_file(str(path))


def parse_cpu(value: str | float | None) -> float | None:
    """``--cpu``: a positive number of CPUs, or ``uncapped``/``max`` for no quota."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("uncapped", "max", "none", ""):
        return None
    try:
        cpus = float(value)
    except ValueError:
        raise SandboxError(
            f"bad CPU quota {value!r}: give a positive number such as 0.5, or 'uncapped'"
        ) from None
    if not cpus > 0 or cpus != cpus:
        raise SandboxError(f"bad CPU quota {value!r}: must be a positive number of CPUs")
    return cpus
