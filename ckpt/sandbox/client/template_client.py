"""Asking the warm template for a sandbox, and starting, querying and stopping it.

``spawn`` never fails a command: whatever is wrong with the template (none, dead,
wedged, another code version, a refusal) comes back as a reason string, and the caller
starts the sandbox cold instead; a dead or wedged template is cleared away so the next
command can start a fresh one (``start``, in the background).  One exception: a template
that does not answer in time but holds a checkpointed sandbox's sockets (template.json
lists them) is left running, since killing it would reset every connection waiting in
the held listen queue and cut the parked ones; the cold sandbox's ``adopt`` waits for it
(``handover.ADOPT_TIMEOUT_S``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ckpt import settings
from ckpt.errors import SandboxError
from ckpt.sandbox.wire import template_proto as proto

CONNECT_TIMEOUT_S = 1.0
# a warm template answers in milliseconds; this only catches a wedge (tests set it small)
REPLY_TIMEOUT_S = settings.BY_NAME["CKPT_TEMPLATE_REPLY_TIMEOUT_S"].default
START_TIMEOUT_S = 60.0
WARMING_WAIT_S = 30.0  # how long a checkpoint waits for a template still warming up


def disabled() -> bool:
    """``ckpt --no-template`` (or ``CKPT_TEMPLATE=0``) forces cold starts."""
    return not settings.current().template


def _request(
    root: Path, request: dict[str, Any], fds: list[int] = (), timeout: float = REPLY_TIMEOUT_S
) -> dict[str, Any]:
    """One request and its reply.  Raises OSError/TimeoutError/ValueError on trouble."""
    reply, _ = proto.exchange(
        proto.socket_path(str(root)),
        {**request, "version": proto.version()},
        fds,
        timeout=timeout,
        connect_timeout=CONNECT_TIMEOUT_S,
    )
    return reply


def _child_env() -> dict[str, str]:
    """The CKPT_* settings this command runs with, for the forked sandbox to adopt."""
    return settings.child_env()


def spawn(
    root: Path, sandbox_id: str, sock: Path, log_fd: int, ready_fd: int, cgroup_fds: list[int]
) -> tuple[int, str]:
    """Have the template fork sandbox ``sandbox_id``: ``(pid, "")`` when it did, else
    ``(0, why not)``."""
    if not os.path.exists(proto.socket_path(str(root))):
        return 0, "no template running"
    request = {
        "op": "spawn",
        "id": sandbox_id,
        "socket": str(sock),
        "cgroup_fds": len(cgroup_fds),
        "env": _child_env(),
    }
    timeout = _reply_timeout()
    try:
        reply = _request(root, request, [log_fd, ready_fd, *cgroup_fds], timeout=timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        _clear_dead(root)
        return 0, "the template was not running"
    except (OSError, ValueError) as exc:
        return 0, _gave_up(root, exc, timeout)
    result = reply.get("result")
    if reply.get("ok") and isinstance(result, dict) and isinstance(result.get("pid"), int):
        return result["pid"], ""
    error = str(reply.get("error"))
    if error.startswith(proto.VERSION_MISMATCH):
        return 0, "the template ran another version of ckpt; it exits"
    return 0, f"the template refused: {error}"


def _gave_up(root: Path, exc: Exception, timeout: float) -> str:
    """After a failed spawn request: kill the template, unless it may simply be slow and
    holds sockets (killing it would lose them).  Says which, for the cold start's note."""
    if isinstance(exc, TimeoutError):
        what = f"did not answer within {timeout:g} s (wedged?)"
    else:
        what = f"failed ({exc})"
    holding = holds_sockets(root) if isinstance(exc, OSError) else []
    if holding:
        return f"the template {what}; left running, as it holds the sockets of {', '.join(holding)}"
    kill(root)
    return f"the template {what}; it was killed"


def _reply_timeout() -> float:
    return settings.current().template_reply_timeout_s


def holds_sockets(root: Path) -> list[str]:
    """The sandbox IDs whose sockets the running template of ``root`` holds, as its
    template.json says (read without asking it: it may be the one not answering)."""
    info = proto.read_info(str(root)) or {}
    held = info.get("held")
    if _template_pid(root) != info.get("pid") or not isinstance(held, list):
        return []
    return [str(x) for x in held]


def _clear_dead(root: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(proto.socket_path(str(root)))


def _template_pid(root: Path) -> int | None:
    """The pid in template.json, if that process is a template of this root."""
    info = proto.read_info(str(root))
    pid = info.get("pid") if info else None
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return None
    from ckpt.sandbox.wire import title

    where = os.path.abspath(root)
    named = title.shows(argv, title.template_title(where))  # once it is warming
    if not named and (b"ckpt.sandbox.template" not in argv or os.fsencode(where) not in argv):
        return None
    return pid


def kill(root: Path) -> bool:
    """SIGKILL the template of ``root`` (never a sandbox: they have their own sessions)
    and wait until it is gone.  True if there was one."""
    pid = _template_pid(root)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(root, pid)
    _clear_dead(root)
    with contextlib.suppress(OSError):
        os.unlink(proto.info_path(str(root)))
    return pid is not None


def _wait_gone(root: Path, pid: int, timeout: float = 10.0) -> bool:
    """Wait until the template ``pid`` has exited (not merely stopped being recorded)."""
    deadline = time.monotonic() + timeout
    while _template_pid(root) == pid or proto.pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def status(root: Path) -> dict[str, Any] | None:
    """The serving template's status, or None when no template answers."""
    try:
        reply = _request(root, {"op": "status"}, timeout=5.0)
    except (OSError, ValueError):
        return None
    return reply.get("result") if reply.get("ok") else None


def stop(root: Path) -> bool:
    """Ask the template to exit, and wait until it has; kill it if it does not answer
    (or is still warming up).  True if there was one."""
    info = status(root)
    pid = info.get("pid") if info else _template_pid(root)
    try:
        reply = _request(root, {"op": "stop"}, timeout=5.0)
    except (OSError, ValueError):
        return kill(root)
    if isinstance(pid, int) and not _wait_pid_gone(pid):
        return kill(root)
    return bool(reply.get("ok")) or pid is not None


def _wait_pid_gone(pid: int, timeout: float = 10.0) -> bool:
    """Wait until ``pid`` has exited (a zombie counts as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proto.pid_alive(pid):
            return True
        time.sleep(0.01)
    return False


def start(root: Path, *, wait: bool = False) -> None:
    """Start a template for ``root`` in the background, detached (its own session).

    With ``wait``, return once it answers, raising SandboxError if it does not."""
    from ckpt.sandbox.client.childenv import child_env

    info = proto.read_info(str(root)) or {}
    if _template_pid(root) is not None and info.get("version") == proto.version():
        # one of this version is starting or serving already
        if wait:
            _wait_serving(root)
        return
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(proto.log_path(str(root)), "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-S",
                "-P",  # never a ckpt/ in the working directory
                "-m",
                "ckpt.sandbox.template",
                "--root",
                os.path.abspath(root),
                "--socket",
                proto.socket_path(str(root)),
                "--version",
                proto.version(),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd="/",
            env=child_env(),
        )
    # Recorded at once, so `ckpt template stop` finds a template that is still warming.
    proto.write_info(str(root), {"pid": proc.pid, "version": proto.version(), "state": "starting"})
    if wait:
        _wait_serving(root)


def wait_warming(root: Path, timeout: float = WARMING_WAIT_S) -> bool:
    """Wait, up to ``timeout``, for a template of ``root`` that has been started but does
    not serve yet; True once it serves.  A checkpoint that stops its sandbox calls this
    first: the first ``run`` in a root starts the template in the background, and a
    checkpoint right after it would otherwise find nobody to hand the sockets to.
    Returns at once when no template is starting (none, dead, or serving already)."""
    deadline = time.monotonic() + timeout
    while _template_pid(root) is not None:
        info = proto.read_info(str(root)) or {}
        if info.get("state") == "serving" or status(root) is not None:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return False


def _wait_serving(root: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if status(root) is not None:
            return
        time.sleep(0.02)
    raise SandboxError(
        f"the template for {root} did not start within {START_TIMEOUT_S:g} s; "
        f"see {proto.log_path(str(root))}"
    )
