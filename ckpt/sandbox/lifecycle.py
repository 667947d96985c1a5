"""Sandbox lifecycle as library functions: run, list, state, pause, resume, kill, delete,
checkpoint, restore.  They raise ``SandboxError`` (or another ``CkptError``) and never print.

A sandbox is a detached process (its own session) running ``ckpt.sandbox.process``,
placed in cgroup ``ckpt/ID`` *before it executes anything*: the parent opens each
hierarchy's ``cgroup.procs`` and the child writes ``0`` (itself) into them in
``preexec_fn``, between fork and exec, so even interpreter start-up is charged to the
cgroup and runs under its CPU quota.  The child signals readiness on a pipe.

The rule for failures: a failed ``run`` or ``restore`` leaves no process, cgroup or
state directory behind; a failed ``checkpoint`` leaves the sandbox as it was.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ckpt.errors import CgroupError, CkptError, SandboxError, SandboxGone
from ckpt.sandbox import handover, rpc, template_proto
from ckpt.sandbox.paths import CREATING, PAUSED, RUNNING, STOPPED, Root, SandboxState, now_iso
from ckpt.sandbox.timings import (
    CHECKPOINT,
    RESTORE,
    RESUME_TOTAL,
    SANDBOX_CREATE,
    SUSPEND_TOTAL,
    Timings,
)

READY_TIMEOUT_S = 30.0
# The restore RPC: a fixed floor plus time for the image's bytes at a slow rate per CPU
# of its quota, so a big image is never cut short while a hung restore (a FIFO for a
# statefile, a wedged sandbox) still ends.  A files:100000 image (3.3 MB) restored in
# 1.3 s on one uncapped CPU (2.6 MB/s); the rate below leaves five times that margin.
RESTORE_TIMEOUT_S = 120.0
RESTORE_BYTES_PER_S = 512 * 1024
RESTORE_TIMEOUT_ENV = "CKPT_RESTORE_TIMEOUT_S"
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
    image: Path
    timings: Timings
    stats: dict[str, Any] | None = None
    stats_text: str | None = None


@dataclass
class RestoreResult:
    state: SandboxState
    timings: Timings
    stats: dict[str, Any] | None = None
    stats_text: str | None = None
    notes: list[str] = field(default_factory=list)


# -- processes -------------------------------------------------------------------------


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


def _spawn(root: Root, sandbox_id: str, mgr: Any, use_template: bool) -> Spawned:
    """Start the sandbox process inside ``mgr``'s cgroup, forked from the warm template
    when one serves this root, else as a fresh interpreter.  Either way the process is
    in the cgroup before it runs a line of sandbox code, and it writes ``ready PID``."""
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
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
        for fd in procs_fds:
            os.close(fd)
    try:
        line = _read_ready(r, READY_TIMEOUT_S)
    finally:
        os.close(r)
    create_ns = time.perf_counter_ns() - t0
    try:
        start = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        start = 0.0
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


def child_env() -> dict[str, str]:
    """The sandbox runs with ``python -S``: no ``site`` and no ``.pth`` processing, which
    is most of interpreter start-up on hosts with many ``.pth`` hooks.  Our resolved
    ``sys.path`` (and the directory holding ``ckpt``) is handed over in PYTHONPATH
    instead, so it imports exactly what this process would."""
    import ckpt

    here = str(Path(ckpt.__file__).resolve().parent.parent)
    entries = [here, *(p for p in sys.path if p and p != here and os.path.isdir(p))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(entries))}
    # Every sandbox is a fresh interpreter; without bytecode it compiles all of ckpt
    # again each time (hosts setting PYTHONDONTWRITEBYTECODE).  Keep bytecode in
    # ckpt's own cache directory instead, so nothing is written beside the sources
    # (inside it, so a CKPT_CACHE_DIR of /var/cache/ckpt never writes /var/cache/pycache).
    from ckpt.cachedir import bytecode_dir

    where = bytecode_dir()
    if where is not None and "PYTHONPYCACHEPREFIX" not in env:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(where)
    return env


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


def _cgroup_name(sandbox_id: str) -> str:
    return f"ckpt/{sandbox_id}"


def _make_cgroup(sandbox_id: str, cpus: float | None, ignore: bool, notes: list[str]) -> Any:
    """The sandbox's cgroup with its quota applied, or None when running without one."""
    if ignore:
        if cpus is not None:
            notes.append(f"--ignore-cgroups: CPU quota {cpus:g} not applied")
        return None
    from ckpt import cgroups

    _remove_cgroup(_cgroup_name(sandbox_id))  # a stale group from a crashed run
    if cpus is not None:
        ok, reason = cgroups.available_for_quota()
        if not ok:
            raise CgroupError(
                f"cannot apply a CPU quota: {reason}; run as root or pass --ignore-cgroups"
            )
        return cgroups.create(_cgroup_name(sandbox_id), cpus=cpus)
    try:
        mgr = cgroups.create(_cgroup_name(sandbox_id))
    except CgroupError as exc:
        mgr, reason = None, str(exc)
    else:
        reason = getattr(mgr, "reason", "")
    if mgr is None or getattr(mgr, "inert", False):
        notes.append(f"running without a cgroup ({reason}); CPU is read from the process")
        return None
    return mgr


def _open_cgroup(name: str | None) -> Any:
    if not name:
        return None
    from ckpt import cgroups

    try:
        return cgroups.open_group(name)
    except CgroupError:
        return None


def _remove_cgroup(name: str | None) -> None:
    """Kill whatever is left in the group and delete it; quiet if it is already gone."""
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


def _freezable(mgr: Any) -> Any:
    """``mgr`` if its group has a freezer; without one, pause freezes the kernel only."""
    if mgr is None or getattr(mgr, "freezer_backend", "none") == "none":
        return None
    return mgr


def _cpu_usec(mgr: Any) -> int | None:
    if mgr is None:
        return None
    try:
        return int(mgr.cpu_usage_usec())
    except CgroupError:
        return None


# -- state -----------------------------------------------------------------------------


def refresh(root: Root, sandbox_id: str) -> SandboxState:
    """Read a sandbox's state, marking it stopped (and freeing its cgroup) if it died."""
    st = root.read(sandbox_id)
    if st.status in (RUNNING, PAUSED, CREATING) and not _alive(st.pid, st.pid_start):
        st.status = STOPPED
        st.address = None
        with contextlib.suppress(CgroupError):
            _remove_cgroup(st.cgroup)
        root.write(st)
    return st


def list_sandboxes(root: Root) -> list[SandboxState]:
    out = []
    for sandbox_id in root.ids():
        try:
            out.append(refresh(root, sandbox_id))
        except SandboxError:
            continue
    return out


def _running(root: Root, sandbox_id: str, verb: str) -> SandboxState:
    st = refresh(root, sandbox_id)
    if st.status not in (RUNNING, PAUSED):
        raise SandboxError(f"cannot {verb} sandbox {sandbox_id}: it is {st.status}")
    return st


def _discard(
    root: Root, sandbox_id: str, pid: int | None, start: float, cgroup: str | None
) -> None:
    """Best-effort removal of everything a failed run/restore made."""
    if pid:
        _kill_pid(pid, start)
    with contextlib.suppress(CgroupError):
        _remove_cgroup(cgroup)
    _remove_files(root, sandbox_id)


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
) -> tuple[SandboxState, Any, Spawned]:
    """Make the directory, cgroup and process; return (state, cgroup manager, spawn)."""
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
    )
    root.dir(sandbox_id).mkdir(mode=0o700, exist_ok=True)
    root.write(st)
    mgr = None
    try:
        mgr = _make_cgroup(sandbox_id, cpus, ignore_cgroups, notes)
        st.cgroup = mgr.name if mgr is not None else None
        st.cpu = cpus if mgr is not None else None
        spawned = _spawn(root, sandbox_id, mgr, use_template)
        st.pid, st.pid_start = spawned.pid, spawned.start
    except BaseException:
        _discard(root, sandbox_id, st.pid, st.pid_start, _cgroup_name(sandbox_id) if mgr else None)
        raise
    if use_template and spawned.via == "cold" and spawned.why_cold != "no template running":
        notes.append(f"started cold: {spawned.why_cold}")
    return st, mgr, spawned


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
        root, sandbox_id, cpus, ignore_cgroups, engine, workload, notes, template
    )
    timings.phases_ns[SANDBOX_CREATE] = spawned.create_ns
    try:
        reply = rpc.call(
            Path(st.socket),
            "boot",
            {"workload": workload, "port": port, "options": options or {}},
            timeout=120,
            what=f"sandbox {sandbox_id}",
        )
    except BaseException:
        _discard(root, sandbox_id, st.pid, st.pid_start, st.cgroup)
        raise
    timings.phases_ns["Run"] = time.perf_counter_ns() - t0
    st.address = reply.get("address")
    st.status = RUNNING
    root.write(st)
    _note_start(timings, root, spawned)
    return RunResult(st, timings, notes)


def state(root: Root, sandbox_id: str) -> SandboxState:
    return refresh(root, sandbox_id)


def pause(root: Root, sandbox_id: str) -> SandboxState:
    """Freeze the kernel (HTTP requests start waiting), then the cgroup."""
    st = _running(root, sandbox_id, "pause")
    if st.status == PAUSED:
        return st
    rpc.call(Path(st.socket), "pause", what=f"sandbox {sandbox_id}")
    mgr = _freezable(_open_cgroup(st.cgroup))
    if mgr is not None:
        try:
            mgr.freeze()
        except CgroupError:  # leave it as it was: thawed and running
            with contextlib.suppress(CgroupError):
                mgr.thaw()
            rpc.call(Path(st.socket), "resume", what=f"sandbox {sandbox_id}")
            raise
    st.status = PAUSED
    root.write(st)
    return st


def resume(root: Root, sandbox_id: str) -> SandboxState:
    """Thaw the cgroup, then the kernel; waiting HTTP requests are answered."""
    st = _running(root, sandbox_id, "resume")
    if st.status == RUNNING:
        return st
    mgr = _freezable(_open_cgroup(st.cgroup))
    if mgr is not None:
        mgr.thaw()
    rpc.call(Path(st.socket), "resume", what=f"sandbox {sandbox_id}")
    st.status = RUNNING
    root.write(st)
    return st


def _release_held(root: Root, sandbox_id: str) -> None:
    """Have the template close the sockets it holds for ``sandbox_id``, if it holds any."""
    path = template_proto.socket_path(str(root.path))
    if os.path.exists(path):
        handover.release(path, sandbox_id)


def kill(root: Root, sandbox_id: str) -> SandboxState:
    """SIGKILL the sandbox (through its cgroup when it has one) and free the cgroup; the
    sockets a checkpoint handed to the template for it are closed too."""
    st = refresh(root, sandbox_id)
    _release_held(root, sandbox_id)
    if st.status in (RUNNING, PAUSED, CREATING):
        _remove_cgroup(st.cgroup)
        _kill_pid(st.pid, st.pid_start)
    else:
        _remove_cgroup(st.cgroup)
    st.status = STOPPED
    st.address = None
    root.write(st)
    return st


def delete(root: Root, sandbox_id: str, *, force: bool = False) -> None:
    """Remove a stopped sandbox's files (and, with ``force``, kill a running one first)."""
    st = refresh(root, sandbox_id)
    if st.status != STOPPED:
        if not force:
            raise SandboxError(
                f"sandbox {sandbox_id} is {st.status}; `ckpt kill {sandbox_id}` first or pass --force"
            )
        kill(root, sandbox_id)
    _release_held(root, sandbox_id)
    _remove_cgroup(st.cgroup)
    _remove_files(root, sandbox_id)


def checkpoint(
    root: Root,
    sandbox_id: str,
    image: Path,
    *,
    leave_running: bool = False,
    compression: str = "zstd",
    level: int | None = None,
    engine: str | None = None,
    stats: bool = False,
    key: bytes | None = None,
    force: bool = False,
    drain_timeout: float | None = None,
) -> CheckpointResult:
    """Have the sandbox write its image; it stops afterwards unless ``leave_running``.

    A sandbox that stops first drains: it stops accepting, lets accepted requests finish
    (for at most ``drain_timeout`` seconds, else the checkpoint fails and it goes on
    serving), and hands its listening socket and idle connections to the template for
    the restore (``handover.py``)."""
    _check_engine(engine)
    t0 = time.perf_counter_ns()
    st = _running(root, sandbox_id, "checkpoint")
    engine = engine or st.engine
    mgr = _open_cgroup(st.cgroup)
    was_paused = st.status == PAUSED
    freezer = _freezable(mgr)
    if was_paused and freezer is not None:
        freezer.thaw()  # the kernel stays frozen; the process must run to write the image
    cpu0 = _cpu_usec(mgr)
    timings = Timings()
    params = {
        "image": str(Path(image).absolute()),
        "leave_running": leave_running,
        "compression": compression,
        "level": level,
        "engine": engine,
        "stats": stats,
        "key_hex": key.hex() if key else None,
        "force": force,
        "drain_timeout": drain_timeout,
    }
    try:
        with timings.phase(CHECKPOINT):
            reply = rpc.call(
                Path(st.socket), "checkpoint", params, timeout=None, what=f"sandbox {sandbox_id}"
            )
    except CkptError as exc:
        if isinstance(exc, SandboxGone):  # EOF can come a moment before the exit shows
            _wait_dead(st.pid, st.pid_start, EXIT_TIMEOUT_S)
        if not _alive(st.pid, st.pid_start):
            refresh(root, sandbox_id)
            from ckpt import statefile

            _wait_reaped(st.pid, st.pid_start, REAP_TIMEOUT_S)
            statefile.clean_stale(Path(params["image"]))
            raise SandboxError(
                f"checkpoint of {sandbox_id} failed: the sandbox process died ({exc}); "
                f"no image was committed at {image}"
            ) from exc
        if was_paused and freezer is not None:
            freezer.freeze()
        raise
    if reply.get("stopping"):
        if not _wait_dead(st.pid, st.pid_start, EXIT_TIMEOUT_S):
            _kill_pid(st.pid, st.pid_start)
        cpu1 = _cpu_usec(mgr)
        _remove_cgroup(st.cgroup)
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
        timings.cpu_usec, timings.cpu_source = int(reply.get("cpu_usec") or 0), "process"
    timings.counters = dict(reply.get("counters") or {})
    timings.counters["checkpoint_in_sandbox_ms"] = round(reply["checkpoint_ns"] / 1e6, 3)
    st.extra["last_checkpoint"] = params["image"]
    st.extra["handover"] = "template" if timings.counters.get("handover") == "template" else ""
    root.write(st)
    return CheckpointResult(
        st, Path(params["image"]), timings, reply.get("stats"), reply.get("stats_text")
    )


def restore(
    root: Root,
    sandbox_id: str,
    image: Path,
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
    t0 = time.perf_counter_ns()
    image = Path(image).absolute()
    if not image.exists():
        raise SandboxError(f"no image at {image}: check --image-path")
    if root.exists(sandbox_id):
        old = refresh(root, sandbox_id)
        if old.status != STOPPED:
            raise SandboxError(
                f"sandbox {sandbox_id} is {old.status}; restore into a new ID, or kill and "
                f"delete it first"
            )
        handed_over = old.extra.get("handover") == "template"
        _remove_cgroup(old.cgroup)
        _remove_files(root, sandbox_id)
    else:
        handed_over = False
    notes: list[str] = []
    timings = Timings()
    st, mgr, spawned = _start(
        root, sandbox_id, cpus, ignore_cgroups, engine, "(restoring)", notes, template
    )
    timings.phases_ns[SANDBOX_CREATE] = spawned.create_ns
    params = {
        "image": str(image),
        "engine": engine,
        "stats": stats,
        "background": background,
        "key_hex": key.hex() if key else None,
        "port": port,
    }
    deadline = restore_timeout(image, cpus if mgr is not None else None)
    try:
        try:
            reply = rpc.call(
                Path(st.socket), "restore", params, timeout=deadline, what=f"sandbox {sandbox_id}"
            )
        except SandboxError as exc:
            if not isinstance(exc.__cause__, TimeoutError):
                raise
            raise SandboxError(
                f"restore of {sandbox_id} did not finish within {deadline:g} s; the sandbox "
                f"was removed (set {RESTORE_TIMEOUT_ENV} for a slower restore)"
            ) from exc
        cpu = _cpu_usec(mgr)
    except BaseException:
        _discard(root, sandbox_id, st.pid, st.pid_start, st.cgroup)
        raise
    timings.phases_ns[RESTORE] = int(reply["restore_ns"])
    timings.phases_ns[RESUME_TOTAL] = time.perf_counter_ns() - t0
    if cpu is not None:
        timings.cpu_usec, timings.cpu_source = cpu, "cgroup"
    else:
        timings.cpu_usec, timings.cpu_source = int(reply.get("cpu_usec") or 0), "process"
    timings.counters = dict(reply.get("counters") or {})
    st.workload = str(reply.get("workload") or _image_workload(image) or "unknown")
    st.address = reply.get("address")
    st.status = RUNNING
    st.restored_from = str(image)
    root.write(st)
    _note_start(timings, root, spawned)
    if reply.get("held_for") == sandbox_id:  # on the handed-over sockets: the template lets go
        _release_held(root, sandbox_id)
    else:
        notes.extend(_listener_notes(str(timings.counters.get("listener", "")), handed_over))
    return RestoreResult(st, timings, reply.get("stats"), reply.get("stats_text"), notes)


def restore_timeout(image: Path, cpus: float | None = None) -> float:
    """How long the restore RPC may take: ``CKPT_RESTORE_TIMEOUT_S`` if set, else
    RESTORE_TIMEOUT_S plus the image's size at RESTORE_BYTES_PER_S per CPU of the
    quota (``cpus``; no quota counts as one CPU)."""
    with contextlib.suppress(ValueError):
        given = float(os.environ.get(RESTORE_TIMEOUT_ENV) or 0)
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


def _listener_notes(listener: str, handed_over: bool) -> list[str]:
    """One line when a restore bound its port anew although clients may have waited."""
    if not listener.startswith("bound anew"):
        return []
    lost = any(
        why in listener for why in ("(no template", "(template unreachable", "(nothing held")
    )
    if handed_over and lost:
        return [
            "the sockets this sandbox handed to the template at its checkpoint are gone "
            "(the template exited, its hold timed out, or `ckpt kill` closed them): clients "
            "were refused and parked keep-alive connections cut until this restore bound "
            "the port anew"
        ]
    if lost and "(nothing held" not in listener:
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


def fingerprint(root: Root, sandbox_id: str) -> dict[str, str]:
    """The kernel's fingerprint and description (for before/after comparisons)."""
    st = _running(root, sandbox_id, "fingerprint")
    return rpc.call(Path(st.socket), "fingerprint", what=f"sandbox {sandbox_id}")


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
