"""A request to a template whose listen backlog is full waits for room, then is sent.

A Unix stream socket with a full backlog refuses a connect with EAGAIN at once, whatever
the socket's timeout; `template_proto.exchange` must keep trying until its connect
timeout, not lose the request (a flood of half-open connections did exactly this)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from ckpt.sandbox.wire import template_proto


def _full_listener(path: str) -> tuple[socket.socket, list[socket.socket]]:
    """A listener that accepts nothing, its backlog filled with connections."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(0)
    clients = []
    while True:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.setblocking(False)
        try:
            c.connect(path)
        except BlockingIOError:
            c.close()
            break
        clients.append(c)
    return server, clients


def test_a_connect_waits_while_the_backlog_is_full(tmp_path: Path) -> None:
    path = str(tmp_path / "t.sock")
    server, clients = _full_listener(path)
    answered = threading.Event()

    def serve_later() -> None:
        time.sleep(0.1)
        for _ in range(len(clients) + 1):
            conn, _ = server.accept()
            if conn.recv(1):  # the real request (the filler connections sent nothing)
                conn.recv(65536)
                conn.sendall(b'{"ok": true}\n')
                answered.set()
                conn.close()
                return
            conn.close()

    for c in clients:
        c.close()  # each accept above then reads end-of-file from a filler
    thread = threading.Thread(target=serve_later, daemon=True)
    thread.start()
    try:
        reply, fds = template_proto.exchange(path, {"op": "status"}, timeout=2.0)
    finally:
        thread.join(2.0)
        server.close()
    assert reply == {"ok": True} and fds == []
    assert answered.is_set()


def test_a_backlog_that_stays_full_is_a_timeout_not_eagain(tmp_path: Path) -> None:
    path = str(tmp_path / "t.sock")
    server, clients = _full_listener(path)
    try:
        with pytest.raises(TimeoutError, match="backlog stayed full"):
            template_proto.exchange(path, {"op": "status"}, timeout=1.0, connect_timeout=0.2)
    finally:
        for c in clients:
            c.close()
        server.close()
