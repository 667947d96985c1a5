"""Serving the ``http`` workload for real: HTTP/1.1 on a TCP socket, answered from kernel state.

A deliberately small server (``http.server`` drags in ``email`` and friends, which
slows sandbox start).  One thread per connection, keep-alive honoured.  Each request is
answered by ``respond(method, path)``, which counts it in the simulated kernel; while the
kernel is frozen ``respond`` blocks, so connections wait and are answered after thaw.
Connections arriving while frozen wait in the listen backlog: nothing is dropped.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable

Responder = Callable[[str, str], tuple[int, dict]]
MAX_HEADER = 64 * 1024
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def bind(host: str, port: int) -> socket.socket:
    """A listening socket with SO_REUSEADDR, so a restore can take the port right back."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    return sock


class HttpServer:
    """Accepts on ``sock`` in a daemon thread and answers through ``respond``."""

    def __init__(self, sock: socket.socket, respond: Responder) -> None:
        self.sock = sock
        self.respond = respond
        self.address: tuple[str, int] = sock.getsockname()[:2]
        self._closed = False

    def start(self) -> None:
        threading.Thread(target=self._accept_loop, name="http-accept", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    try:
                        chunk = conn.recv(65536)
                    except OSError:
                        return
                    if not chunk:
                        return
                    buf += chunk
                    if len(buf) > MAX_HEADER:
                        self._reply(conn, 400, {"error": "request header too large"}, False)
                        return
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    self._reply(conn, 400, {"error": "malformed request line"}, False)
                    return
                method, target, version = parts
                headers = {}
                for line in lines[1:]:
                    name, sep, value = line.partition(":")
                    if sep:
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                while len(buf) < length:  # bodies are ignored, but must be consumed
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                buf = buf[length:]
                conn_hdr = headers.get("connection", "").lower()
                keep = conn_hdr != "close" if version == "HTTP/1.1" else conn_hdr == "keep-alive"
                try:
                    status, body = self.respond(method, target)
                except Exception as exc:  # keep serving; report the failure to the client
                    status, body = 500, {"error": f"{type(exc).__name__}: {exc}"}
                if not self._reply(conn, status, body, keep) or not keep:
                    return

    @staticmethod
    def _reply(conn: socket.socket, status: int, body: dict, keep: bool) -> bool:
        data = json.dumps(body).encode() + b"\n"
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n"
            f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
        ).encode()
        try:
            conn.sendall(head + data)
        except OSError:
            return False
        return True


def get_json(host: str, port: int, path: str = "/", timeout: float = 10.0) -> tuple[int, dict]:
    """A one-shot client for the CLI, the demo and tests (``urllib`` is slow to import)."""
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        buf = b""
        while chunk := conn.recv(65536):
            buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)
