"""What the template accepts: a request from a peer of its own uid, naming a valid
sandbox ID, and for a spawn, exactly the descriptors a sandbox needs (its log, a pipe's
write end, open ``cgroup.procs`` files of this host's cgroup file systems) and only
``CKPT_*`` variables.  Every field and every passed descriptor is checked here before
anything is forked: this module is the template's security boundary.

Stdlib and ``ckpt`` only, no ``typing``: on the cold path of the template's own start.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Refused(Exception):
    """A request we will not act on; the message goes back to the client."""


def peer(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end (``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return pid, uid


def close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _fd_target(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def check_spawn(req: dict[str, Any], fds: list[int], root: str) -> dict[str, Any]:
    """Validate a spawn request and its descriptors; raise Refused naming the fault."""
    sandbox_id = checked_id(req)
    sock = req.get("socket")
    if not isinstance(sock, str) or not os.path.isabs(sock) or "\0" in sock:
        raise Refused("spawn needs an absolute 'socket' path")
    if len(os.fsencode(sock)) > 107:
        raise Refused("socket path too long")
    from ckpt.sandbox.wire.paths import Root

    if sock != str(Root(root).socket_path(sandbox_id)):
        raise Refused("socket must be the sandbox's own control socket under this root")
    n_cgroup = req.get("cgroup_fds")
    if not isinstance(n_cgroup, int) or isinstance(n_cgroup, bool) or n_cgroup < 0:
        raise Refused("spawn needs an integer 'cgroup_fds'")
    if len(fds) != 2 + n_cgroup:
        raise Refused(f"expected {2 + n_cgroup} descriptors, got {len(fds)}")
    env = req.get("env", {})
    if not isinstance(env, dict) or len(env) > 64:
        raise Refused("'env' must be an object of at most 64 CKPT_* variables")
    for key, value in env.items():
        if not (isinstance(value, str) and key.startswith("CKPT_") and len(value) < 4096):
            raise Refused(f"bad environment variable {key!r} for the sandbox")
    log_fd, ready_fd, *cgroup_fds = fds
    mode = os.fstat(log_fd).st_mode
    if not stat.S_ISREG(mode) or not _writable(log_fd):
        raise Refused("the log descriptor must be a writable regular file")
    if not stat.S_ISFIFO(os.fstat(ready_fd).st_mode) or not _writable(ready_fd):
        raise Refused("the ready descriptor must be the write end of a pipe")
    mounts = cgroup_mounts()
    for fd in cgroup_fds:
        target = _fd_target(fd)
        if (
            not stat.S_ISREG(os.fstat(fd).st_mode)
            or not target.endswith("/cgroup.procs")
            or not target.startswith(mounts)
        ):
            raise Refused("cgroup descriptors must be open cgroup.procs files of a cgroup fs")
        if not _writable(fd):
            raise Refused("cgroup descriptors must be open for writing")
    return {
        "id": sandbox_id,
        "socket": sock,
        "log_fd": log_fd,
        "ready_fd": ready_fd,
        "cgroup_fds": cgroup_fds,
        "env": env,
    }


_mounts: tuple[str, ...] | None = None


def cgroup_mounts() -> tuple[str, ...]:
    """Where this host's cgroup file systems are mounted, each ending in ``/``."""
    global _mounts
    if _mounts is None:
        from ckpt.cgroups import detect

        try:
            lay = detect.layout()
            found = [lay.unified, *lay.v1.values()]
        except Exception:  # no readable mountinfo: accept no cgroup descriptor at all
            found = []
        _mounts = tuple(dict.fromkeys(f"{m}/" for m in found if m is not None))
    return _mounts


def _writable(fd: int) -> bool:
    return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)


def checked_id(req: dict[str, Any]) -> str:
    from ckpt.sandbox.wire.paths import check_id

    sandbox_id = req.get("id")
    if not isinstance(sandbox_id, str):
        raise Refused("the request needs a string 'id'")
    try:
        return check_id(sandbox_id)
    except Exception as exc:
        raise Refused(str(exc)) from None
