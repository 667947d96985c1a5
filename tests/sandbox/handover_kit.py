"""Helpers shared by the drain and handover tests (test_drain.py, test_handover*.py):
sandbox IDs, the template's holds, /proc socket counts, a hand-read HTTP client, and the
CLI verbs as the tests call them.  The ``tcli`` and ``clients`` fixtures are in
conftest.py."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ckpt.sandbox.client import template_client
from ckpt.sandbox.wire import rpc
from ckpt.sandbox.wire.protocol import PingRequest

from .conftest import Cli
from .waiting import free_port, gone, wait_for

__all__ = [
    "HOST",
    "TAG",
    "TCP_STATES",
    "WAIT_S",
    "Client",
    "bindable",
    "busy_with",
    "checkpoint",
    "client_pool",
    "counters",
    "error_line",
    "free_port",
    "gone",
    "held",
    "held_cli",
    "refused",
    "request_bytes",
    "restore",
    "run_http",
    "sid",
    "start_template",
    "steady_fds",
    "tcp_sockets",
    "wait_for",
    "with_template",
]  # waiting's helpers too, so the tests import from one place

T = TypeVar("T")
WAIT_S = 60.0  # for waits that decide an outcome; each ends as soon as the event happens
HOST = "127.0.0.1"
TAG = os.getpid()  # cgroups are host-wide: IDs unique to this test run


def sid(name: str) -> str:
    return f"hov{name}-{TAG}"


def error_line(proc: Any, code: int = 1) -> str:
    """The CLI's error: exit ``code`` and one ``error: ...`` line, no traceback."""
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: "), proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    return proc.stderr.strip()


# -- the template ----------------------------------------------------------------------


def with_template(cli: Cli) -> Cli:
    """``cli`` with the template enabled whatever the caller's environment says."""
    for key in ("CKPT_TEMPLATE", "CKPT_TEMPLATE_IDLE_S", "CKPT_HOLD_TIMEOUT_S"):
        cli.env.pop(key, None)
    return cli


def start_template(cli: Cli, **env: str) -> int:
    """Start the root's template (``env`` reaches it) and return its pid."""
    cli("template", "start", env=env)
    info = template_client.status(cli.root)
    assert info is not None, "the template does not answer"
    return info["pid"]


def held(cli: Cli) -> dict[str, Any]:
    """What the template holds, by sandbox ID (``ckpt template status``'s ``held``)."""
    info = template_client.status(cli.root)
    assert info is not None, "the template does not answer"
    return info["held"]


def held_cli(cli: Cli) -> dict[str, Any]:
    """The same, through ``ckpt template status --json``."""
    data = json.loads(cli("template", "status", "--json").stdout)
    assert data["running"], data
    return data["held"]


def _fd_targets(pid: int) -> list[str]:
    out = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            out.append(os.readlink(f"/proc/{pid}/fd/{name}"))
    return out


def _inodes(pid: int, table: str) -> dict[str, list[str]]:
    with open(f"/proc/{pid}/net/{table}") as f:
        next(f)
        rows = [line.split() for line in f]
    col = 6 if table == "unix" else 9
    return {r[col]: r for r in rows if len(r) > col}


TCP_STATES = {"01": "ESTABLISHED", "08": "CLOSE_WAIT", "0A": "LISTEN"}


def tcp_sockets(pid: int) -> list[tuple[int, str]]:
    """The TCP sockets ``pid`` has open, as sorted ``(local port, state)``."""
    table = {**_inodes(pid, "tcp"), **_inodes(pid, "tcp6")}
    found = []
    for target in _fd_targets(pid):
        ino = target[len("socket:[") : -1] if target.startswith("socket:[") else None
        if ino in table:
            row = table[ino]
            found.append((int(row[1].rsplit(":", 1)[1], 16), TCP_STATES.get(row[3], row[3])))
    return sorted(found)


def steady_fds(pid: int) -> int:
    """``pid``'s descriptors other than Unix sockets: a template's request connections
    come and go, everything else (held TCP sockets included) only changes on purpose."""
    unix = _inodes(pid, "unix")
    return sum(
        1
        for t in _fd_targets(pid)
        if not (t.startswith("socket:[") and t[len("socket:[") : -1] in unix)
    )


# -- HTTP, by hand ---------------------------------------------------------------------


def request_bytes(path: str = "/") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()


class Client:
    """One keep-alive HTTP/1.1 connection, read by hand, so the test sees exactly what
    came back on this very socket (no library reconnects behind our back)."""

    def __init__(self, port: int, timeout: float = WAIT_S) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.fileno = self.sock.fileno()
        self.local = self.sock.getsockname()
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, path: str = "/") -> None:
        self.send(request_bytes(path))

    def response(self) -> tuple[int, dict[str, Any]]:
        while b"\r\n\r\n" not in self.buf:
            self._recv()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])
        }
        length = int(headers["content-length"])
        while len(rest) < length:
            self.buf = head + b"\r\n\r\n" + rest
            self._recv()
            rest = self.buf.partition(b"\r\n\r\n")[2]
        self.buf = rest[length:]
        return int(lines[0].split(" ")[1]), json.loads(rest[:length])

    def get(self, path: str = "/") -> dict[str, Any]:
        self.request(path)
        status, body = self.response()
        assert status == 200, (status, body)
        return body

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"server closed the connection; unread {self.buf!r}")
        self.buf += chunk

    def closed_by_server(self, timeout: float = 30.0) -> bool:
        """The server end is closed: EOF (or a reset) within ``timeout``, no data."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def client_pool() -> Iterator[Callable[[int], Client]]:
    """For a fixture: opens Clients, and closes every one at the end of the test."""
    made: list[Client] = []

    def make(port: int) -> Client:
        c = Client(port)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def bindable(port: int) -> bool:
    """Nothing listens on ``port`` (SO_REUSEADDR, as the server binds: TIME_WAIT and
    established connections do not count, a listening socket does)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((HOST, port))
        s.listen(1)
        return True
    except OSError:
        return False
    finally:
        s.close()


def refused(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=10).close()
    except ConnectionRefusedError:
        return True
    return False


# -- the CLI ---------------------------------------------------------------------------


def run_http(cli: Cli, sandbox_id: str, port: int, env: dict[str, str] | None = None) -> dict:
    cli("run", sandbox_id, "--workload", "http", "--port", str(port), env=env)
    st = cli.state(sandbox_id)
    assert st["address"] == f"{HOST}:{port}", st
    return st


def counters(proc: Any) -> dict[str, Any]:
    return json.loads(proc.stdout)["timings"]["counters"]


def checkpoint(cli: Cli, sandbox_id: str, image: Path, *extra: str) -> dict[str, Any]:
    """``ckpt checkpoint --json``: the counters; the sandbox process is gone after it."""
    pid = cli.state(sandbox_id)["pid"]
    c = counters(cli("checkpoint", sandbox_id, "--image-path", str(image), "--json", *extra))
    assert cli.state(sandbox_id)["status"] == "stopped"
    assert gone(pid)
    return c


def restore(cli: Cli, sandbox_id: str, image: Path, *extra: str) -> dict[str, Any]:
    return counters(cli("restore", sandbox_id, "--image-path", str(image), "--json", *extra))


def busy_with(st: dict[str, Any]) -> str | None:
    with contextlib.suppress(Exception):
        return rpc.call(Path(st["socket"]), PingRequest(), timeout=10).busy_with
    return None
