"""A sandbox's processes, verified before ckpt acts on them, and stopping them all.

A pid from a record is trusted only when its start time matches and it is in the
sandbox's cgroup (or, with no cgroup, is the peer of the sandbox's control socket, or
before the socket exists carries this sandbox's command line).  ``stop_all`` kills every
such process and the cgroup's members, and says what is left when anything is.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time

from ckpt.errors import CgroupError, SandboxError
from ckpt.sandbox.client import procfs
from ckpt.sandbox.client.group import group_procs, open_cgroup, remove_cgroup
from ckpt.sandbox.wire.paths import Root, SandboxState

EXIT_TIMEOUT_S = 10.0
REAP_TIMEOUT_S = 3.0

_children: dict[int, subprocess.Popen] = {}  # reaped on liveness checks (long-lived callers)


def track(proc: subprocess.Popen) -> None:
    """Remember a sandbox this process started, so ``alive`` reaps it once it exits."""
    _children[proc.pid] = proc


def create_time(pid: int) -> float:
    return procfs.create_time(pid) or 0.0


def alive(pid: int, start: float) -> bool:
    """Is ``pid`` still our sandbox (not a zombie, not a reused pid)?"""
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        _children.pop(pid, None)
        return False
    began = procfs.create_time(pid)
    if began is None or (start and abs(began - start) > 0.05):
        return False
    return procfs.state(pid) not in (None, "Z")


def wait_dead(pid: int, start: float, timeout: float) -> bool:
    """Wait for the sandbox to exit.  A pidfd (Linux 5.3+) turns readable the moment it
    does, so a checkpoint's reply is not followed by up to 10 ms of polling; elsewhere,
    poll every 10 ms."""
    deadline = time.monotonic() + timeout
    pidfd = _pidfd(pid) if alive(pid, start) else None
    try:
        while alive(pid, start):
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


def kill_pid(pid: int, start: float) -> None:
    if alive(pid, start):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_dead(pid, start, EXIT_TIMEOUT_S)


def wait_reaped(pid: int, start: float, timeout: float) -> None:
    """Wait until a dead sandbox's zombie is reaped (by init: it is not our child), so
    ``statefile.clean_stale`` sees its writer gone and removes the half-written image."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        began = procfs.create_time(pid)
        if began is None or abs(began - start) > 0.05:
            return  # gone, or the pid was reused: ours is gone
        time.sleep(0.01)


def _socket_peer(root: Root, sandbox_id: str) -> int | None:
    """The pid listening on the sandbox's control socket, if a real socket answers."""
    import socket  # here: a sandbox in its cgroup is verified without one

    from ckpt.sandbox.wire import rpc

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


def cmdline_is_sandbox(root: Root, sandbox_id: str, pid: int) -> bool:
    """Does ``pid``'s command line say it is this root's sandbox: its title (``ckpt
    sandbox ID (ROOT)``), or before it has one, a cold start's whose ``--socket`` is
    ours, or the command line of this root's template (a sandbox forked by a template
    that names no sandboxes)?"""
    from ckpt.sandbox.wire import title

    cmd = procfs.cmdline(pid)
    if not cmd:
        return False
    if title.shows(cmd, title.sandbox_title(sandbox_id, str(root.path))):
        return True
    if "ckpt.sandbox.host.process" in cmd and "--socket" in cmd:
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


def is_ours(root: Root, st: SandboxState, group: str) -> bool:
    """Is the recorded pid alive and this sandbox's process?  Its start time must match,
    and it must be in the sandbox's cgroup when it has one, else be the peer of its
    control socket (or, before the socket exists, carry this sandbox's command line)."""
    if not st.pid or not st.pid_start or not alive(st.pid, st.pid_start):
        return False
    if f"/{group}" in _cgroups_of(st.pid):
        return True
    if st.cgroup is not None or open_cgroup(group) is not None:
        return False  # the sandbox has a group, and this process is not in it
    peer = _socket_peer(root, st.id)
    if peer is not None:
        return peer == st.pid
    return cmdline_is_sandbox(root, st.id, st.pid)


def _in_other_group(root: Root, pid: int, group: str) -> bool:
    """Is ``pid`` in a group of this root other than ``group`` (another sandbox's)?"""
    ours = f"/{root.cgroup_parent()}/"
    return any(p.startswith(ours) and p != f"/{group}" for p in _cgroups_of(pid))


def socket_owner(root: Root, st: SandboxState, group: str) -> int | None:
    """The process serving this sandbox's control socket, when it is this root's sandbox
    process and not in another sandbox's group: how a sandbox whose record lost its pid
    (or was given another) is still found."""
    peer = _socket_peer(root, st.id)
    if peer is None or peer == os.getpid() or not cmdline_is_sandbox(root, st.id, peer):
        return None
    return None if _in_other_group(root, peer, group) else peer


def _remains(root: Root, st: SandboxState, group: str) -> list[str]:
    """What is left of the sandbox: its verified process, its cgroup's members, the
    process serving its socket, and the cgroup itself; empty when nothing is."""
    left = [f"pid {st.pid}"] if is_ours(root, st, group) else []
    procs = [p for p in group_procs(group) if p != st.pid]
    left += [f"pid {p} (in cgroup {group})" for p in procs]
    owner = socket_owner(root, st, group)
    if owner is not None and owner != st.pid and owner not in procs:
        left.append(f"pid {owner} (serving {root.socket_path(st.id)})")
    if open_cgroup(group) is not None:
        left.append(f"cgroup {group}")
    return left


def stop_all(root: Root, st: SandboxState, group: str) -> None:
    """SIGKILL every process of the sandbox (its cgroup's members and its verified pid),
    remove the cgroup, and check that nothing is left: else one line saying what is."""
    pid_ours = is_ours(root, st, group)
    owner = socket_owner(root, st, group)
    error: CgroupError | None = None
    try:
        remove_cgroup(group)
    except CgroupError as exc:
        error = exc
    if pid_ours:
        kill_pid(st.pid, st.pid_start)
    if owner is not None and owner != st.pid:
        kill_pid(owner, create_time(owner))
    # The cgroup may empty only once the verified pid is gone, and a large sandbox
    # that was told to exit (a migration's source) takes seconds to give its memory
    # back under load: it is retried until then, each try killing what is left in it.
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while error is not None and time.monotonic() < deadline:
        try:
            remove_cgroup(group)
            error = None
        except CgroupError as exc:
            error = exc
    left = _remains(root, st, group)
    if left:
        raise SandboxError(
            f"sandbox {st.id} is not fully stopped: {', '.join(left)} remain"
            + (f" ({error})" if error else "")
            + "; try again, or kill them by hand"
        )
