"""``lifecycle.hang_up``: a sandbox told to stop shuts down its client connections
before it exits, so a client waiting on it (a paused sandbox that has migrated) hears
an orderly end of connection at once, not a reset once the kernel has freed the
process's memory.

Every request goes to 127.0.0.1; every wait is bounded; no test asserts a timing.
"""

from __future__ import annotations

import http.client
import socket
import threading
from pathlib import Path

import pytest

from ckpt.sandbox.client import lifecycle
from ckpt.sandbox.host import http as served
from ckpt.sandbox.wire.paths import Root

from .conftest import Cli
from .handover_kit import HOST, WAIT_S, free_port, sid


def test_closing_the_server_ends_a_connection_whose_request_waits():
    """A connection whose request is inside ``respond`` (the kernel frozen) is shut
    down by ``close``: its client reads the end of the stream, the thread still
    blocked."""
    entered, release = threading.Event(), threading.Event()

    def respond(method: str, path: str, body: bytes) -> tuple[int, dict]:
        entered.set()
        release.wait(WAIT_S)
        return 200, {}

    srv = served.HttpServer(served.bind(HOST, 0), respond)
    srv.start()
    try:
        with socket.create_connection(srv.address, timeout=WAIT_S) as c:
            c.sendall(f"GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
            assert entered.wait(WAIT_S)
            srv.close(shutdown=True)
            assert c.recv(1) == b""  # the end of the stream, not a timeout
    finally:
        release.set()


def test_closing_the_server_ends_connections_still_in_its_backlog_in_order():
    """Connections nobody accepted yet (a paused sandbox accepts none) are taken and
    shut down by ``close``: closing the listener over them would reset them."""
    srv = served.HttpServer(served.bind(HOST, 0), lambda *_: (200, {}))  # never started
    clients = [socket.create_connection(srv.address, timeout=WAIT_S) for _ in range(3)]
    try:
        for c in clients:
            c.sendall(
                f"PUT /kv/a HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 4\r\n\r\nabcd".encode()
            )
        srv.close(shutdown=True)
        assert [c.recv(1) for c in clients] == [b""] * 3  # ends, not resets
    finally:
        for c in clients:
            c.close()
        for conn in getattr(srv, "_ended", ()):
            conn.close()


@pytest.mark.slow
def test_a_paused_sandboxs_waiting_client_hears_an_orderly_end(cli: Cli) -> None:
    """The waiting request gets no answer and no reset: the sandbox shut the connection
    down before the process (and its unread request) went."""
    web, port = sid("hangup"), free_port()
    cli("run", web, "--workload", "kv:1", "--port", str(port))
    cli("pause", web)
    conn = http.client.HTTPConnection(HOST, port, timeout=WAIT_S)
    conn.request("PUT", "/kv/waiting", body=b"x" * 4096)
    assert lifecycle.hang_up(Root(cli.root), web)
    with pytest.raises(http.client.RemoteDisconnected):
        conn.getresponse()
    conn.close()


def test_hang_up_of_a_sandbox_that_is_not_there_says_so(tmp_path: Path) -> None:
    assert lifecycle.hang_up(Root(tmp_path / "root"), "nothing-here") is False
