"""What the template and its clients agree on: file names, limits, the code version.

::

    ROOT/
      template.sock   the template's socket (0600), or ckpt-tpl-<hash>.sock in the temp
                      dir when ROOT is too deep for a Unix socket path
      template.json   pid, version, socket and start time of the serving template
      template.lock   held (flock) by the one template of this root
      template.log    the template's stdout and stderr

The version token changes whenever any of ckpt's source files or the interpreter
changes, so a template never forks code older than the command asking for it.
Stdlib only: both the CLI and the template import this first.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import tempfile
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SOCKET_FILE = "template.sock"
INFO_FILE = "template.json"
LOCK_FILE = "template.lock"
LOG_FILE = "template.log"
MAX_SOCKET_PATH = 100
MAX_REQUEST = 64 * 1024
MAX_FDS = 250  # a hold brings a listener and every parked connection
VERSION_MISMATCH = "version mismatch"
# Built and round-tripped through every engine while warming: together they hold
# every kind of kernel object a sandbox saves.
WARM_WORKLOADS = ("http", "nginx", "files:20", "graph:50", "memory:1", "empty")

_version: str | None = None


def tmpdir() -> str:
    return tempfile.gettempdir()


def socket_path(root: str) -> str:
    """``ROOT/template.sock``, or a hashed name in the temp dir if that is too long."""
    natural = os.path.join(os.path.abspath(root), SOCKET_FILE)
    if len(os.fsencode(natural)) <= MAX_SOCKET_PATH:
        return natural
    digest = hashlib.sha256(os.fsencode(natural)).hexdigest()[:20]
    return os.path.join(tmpdir(), f"ckpt-tpl-{digest}.sock")


def info_path(root: str) -> str:
    return os.path.join(root, INFO_FILE)


def lock_path(root: str) -> str:
    return os.path.join(root, LOCK_FILE)


def log_path(root: str) -> str:
    return os.path.join(root, LOG_FILE)


def version() -> str:
    """A digest of the interpreter and of every ckpt source file's name, size and mtime."""
    global _version
    if _version is None:
        import ckpt

        top = os.path.dirname(os.path.abspath(ckpt.__file__))
        h = hashlib.sha256(f"{os.path.realpath(sys.executable)}\0{sys.version}\0{top}".encode())
        stack = [top]
        while stack:
            d = stack.pop()
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
            for e in entries:
                if e.is_dir(follow_symlinks=False) and e.name != "__pycache__":
                    stack.append(e.path)
                elif e.name.endswith((".py", ".so")):
                    st = e.stat()
                    h.update(f"{e.path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        _version = h.hexdigest()[:16]
    return _version


def pid_alive(pid: int) -> bool:
    """Is ``pid`` a live process (not gone, not a zombie)?  Read from /proc: this module
    must stay free of psutil, which the template never needs."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def read_info(root: str) -> dict[str, Any] | None:
    try:
        with open(info_path(root), "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_info(root: str, info: dict[str, Any]) -> None:
    path = info_path(root)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, path)


def _connect(sock: socket.socket, path: str, timeout: float) -> None:
    """Connect to a Unix socket, waiting up to ``timeout`` while its backlog is full.

    A Unix stream socket whose listen backlog is full refuses a connect with EAGAIN at
    once, whatever the timeout (TCP would retry its SYN). A template busy with a flood
    of connections frees room within milliseconds, so a request must wait for it rather
    than be lost."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            sock.connect(path)
            return
        except BlockingIOError:
            if time.monotonic() + pause >= deadline:
                raise TimeoutError(f"{path}: the template's backlog stayed full") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.02)


def exchange(
    path: str,
    request: dict[str, Any],
    fds: list[int] = (),
    *,
    timeout: float,
    connect_timeout: float = 1.0,
    max_fds: int = 0,
) -> tuple[dict[str, Any], list[int]]:
    """Send one JSON request (with ``fds`` attached) to the template at ``path``; return
    its reply and any descriptors that came with it (the caller owns them).

    Raises OSError (including TimeoutError) when the template cannot be reached or does
    not answer in time, and ValueError when the reply is not a JSON object."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    got: list[int] = []
    try:
        _connect(sock, path, connect_timeout)
        sock.settimeout(timeout)
        data = json.dumps(request).encode() + b"\n"
        if fds:
            socket.send_fds(sock, [data], list(fds))
        else:
            sock.sendall(data)
        buf = b""
        while not buf.endswith(b"\n"):
            if max_fds:
                chunk, new, _, _ = socket.recv_fds(sock, 65536, max_fds)
                got.extend(new)
            else:
                chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
        reply = json.loads(buf)
        if not isinstance(reply, dict):
            raise ValueError("reply is not a JSON object")
    except BaseException:
        for fd in got:
            os.close(fd)
        raise
    finally:
        sock.close()
    return reply, got
