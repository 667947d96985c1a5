"""Serving the ``http`` workload for real: HTTP/1.1 on a TCP socket, answered from kernel state.

A deliberately small server (``http.server`` drags in ``email`` and friends, which
slows sandbox start).  One thread per connection, keep-alive honoured.  Each request
(its body at most ``MAX_BODY``) is answered by ``respond(method, path, body)``, which
counts it in the simulated kernel, with a JSON object or raw bytes; while the kernel is
frozen ``respond`` blocks, so connections wait and are answered after thaw.
Connections arriving while frozen wait in the listen backlog: nothing is dropped.
Before a checkpoint that stops the sandbox, the server drains and hands its sockets on
(``HttpServer.drain``), so the restored sandbox answers what arrives in between.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import threading
import time
from collections.abc import Callable

Responder = Callable[[str, str, bytes], tuple[int, dict | bytes]]
MAX_HEADER = 64 * 1024
MAX_BODY = 1 << 20  # what one request may send; a workload may accept less
ACCEPT_PARK_S = 10.0  # idle threads park at once; this only bounds a stuck one
BACKLOG_TAKE_MAX = 4096  # connections close() takes from the backlog to end in order
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    507: "Insufficient Storage",
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


class DrainTimeout(Exception):
    """Requests were still in progress when the drain's time ran out."""


class HttpServer:
    """Accepts on ``sock`` in a daemon thread and answers through ``respond``.

    ``drain`` readies the server to be handed to another process without losing a
    request: it stops accepting (new connections wait in the kernel's backlog), lets
    every request already read finish, and parks each connection between two requests
    (whatever a client sends next stays in the kernel's socket buffer).  ``handover``
    then gives the listening socket and the parked connections to the caller;
    ``undrain`` instead serves them again here, as if nothing happened.
    """

    def __init__(
        self,
        sock: socket.socket,
        respond: Responder,
        conns: list[socket.socket] = (),
    ) -> None:
        self.sock = sock
        self.respond = respond
        self.address: tuple[str, int] = sock.getsockname()[:2]
        self._closed = False
        self._lock = threading.Condition()
        self._active = 0  # connection threads not parked
        self._accepting = True  # the accept thread is not parked
        self._parked: list[socket.socket] = []
        self._drain_r, self._drain_w = os.pipe()  # readable while draining
        self._adopted = list(conns)
        self._reading_paused = False
        self._busy = 0  # connection threads inside a request
        self._serving: set[socket.socket] = set()  # connections a thread has
        self._shut_on_close = True
        self._ended: list[socket.socket] = []  # shut down by close(), closed at exit

    def start(self) -> None:
        self.sock.setblocking(False)
        threading.Thread(target=self._accept_loop, name="http-accept", daemon=True).start()
        for conn in self._adopted:  # connections handed over by the previous sandbox
            self._spawn(conn)
        self._adopted = []

    def close(self, shutdown: bool = True) -> None:
        """Stop serving.  ``shutdown=False`` after a handover: shutting a socket down
        would end it for the process it was handed to as well; closing only our
        descriptor leaves it alive there."""
        self._shut_on_close = shutdown
        self._closed = True  # before the snapshot below: a later _spawn shuts its own
        with contextlib.suppress(OSError):
            os.write(self._drain_w, b"x")  # wake every waiting thread
        if shutdown:
            with self._lock:
                serving = list(self._serving)
            # Connections still in the backlog (a paused sandbox accepts none) would be
            # reset when the listener closes: take them and end them in order too.
            serving += self._backlog()
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            for conn in serving:  # their clients hear now, not when the process is gone
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _backlog(self) -> list[socket.socket]:
        """Every connection waiting to be accepted (the listener does not block)."""
        taken: list[socket.socket] = []
        with contextlib.suppress(OSError):
            self.sock.setblocking(False)
            while len(taken) < BACKLOG_TAKE_MAX:
                taken.append(self.sock.accept()[0])
        self._ended.extend(taken)  # kept open until the process exits
        return taken

    # -- draining ------------------------------------------------------------------

    @property
    def draining(self) -> bool:
        return bool(select.select([self._drain_r], [], [], 0)[0])

    def drain(self, timeout: float) -> int:
        """Stop accepting and park every connection between requests.  Returns how many
        connections were parked; raises DrainTimeout (and undrains) if requests are
        still running after ``timeout`` seconds."""
        os.write(self._drain_w, b"x")
        with self._lock:
            # The accept thread and idle connections park at once: that is not charged
            # to the timeout, which is for requests being answered (``_busy``).
            park_by = time.monotonic() + ACCEPT_PARK_S
            while (self._accepting or self._active > self._busy) and time.monotonic() < park_by:
                self._lock.wait(0.05)
            deadline = time.monotonic() + timeout
            while self._active or self._accepting:
                left = deadline - time.monotonic()
                if left <= 0:
                    busy = self._active
                    break
                self._lock.wait(left)
            else:
                return len(self._parked)
        self.undrain()
        raise DrainTimeout(f"{busy} request(s) still in progress after {timeout:g} s")

    def undrain(self) -> None:
        """Serve again: accept new connections and resume every parked one."""
        while self.draining:
            os.read(self._drain_r, 64)
        with self._lock:
            parked, self._parked = self._parked, []
            self._lock.notify_all()
        for conn in parked:
            self._spawn(conn)

    def serve_more(self, conns: list[socket.socket]) -> None:
        """Serve connections that arrived from elsewhere (a migration's, rebuilt)."""
        for conn in conns:
            conn.setblocking(True)
            self._spawn(conn)

    def parked(self) -> list[socket.socket]:
        """After ``drain``: the parked connections, left parked (``undrain`` serves them)."""
        with self._lock:
            return list(self._parked)

    def handover(self) -> list[socket.socket]:
        """After ``drain``: the listening socket, then every parked connection."""
        with self._lock:
            parked, self._parked = self._parked, []
        return [self.sock, *parked]

    # -- serving -------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closed:
            ready = select.select([self.sock, self._drain_r], [], [])[0]
            if self._closed:
                return
            if self._drain_r in ready:
                with self._lock:
                    self._accepting = False
                    self._lock.notify_all()
                    while self.draining and not self._closed:
                        self._lock.wait(0.05)
                    self._accepting = True
                continue
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                return
            conn.setblocking(True)
            self._spawn(conn)

    def _spawn(self, conn: socket.socket) -> None:
        with self._lock:
            if self._closed:  # accepted as close() ran: ended here, never served
                if self._shut_on_close:
                    with contextlib.suppress(OSError):
                        conn.shutdown(socket.SHUT_RDWR)
                self._ended.append(conn)
                return
            self._active += 1
            self._serving.add(conn)
        threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _park(self, conn: socket.socket) -> None:
        with self._lock:
            self._serving.discard(conn)
            self._parked.append(conn)
            self._active -= 1
            self._lock.notify_all()

    def _done(self) -> None:
        with self._lock:
            self._active -= 1
            self._lock.notify_all()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self._serve_requests(conn):
                self._park(conn)
                return
        except OSError:
            pass
        with self._lock:
            self._serving.discard(conn)
        self._done()
        with contextlib.suppress(OSError):
            conn.close()

    def _await_request(self, conn: socket.socket) -> bool:
        """Wait for the next request on ``conn``: True to park it (the server drains).

        While reading is paused (the kernel is frozen) nothing is read: a request that
        arrives stays in the socket buffer, so a drain can still park the connection
        and the next sandbox answers it."""
        while True:
            ready = select.select([conn, self._drain_r], [], [])[0]
            if self._closed:
                return False
            if conn not in ready:
                return True
            with self._lock:
                if not self._reading_paused:
                    return False
                self._lock.wait(0.05)
            if self.draining:
                return True

    def pause_reading(self, paused: bool) -> None:
        """Read no new request while ``paused`` (requests already read go on)."""
        with self._lock:
            self._reading_paused = paused
            self._lock.notify_all()

    def _serve_requests(self, conn: socket.socket) -> bool:
        """Answer requests until the client closes (False) or, with nothing of a next
        request read yet, the server drains (True: park the connection)."""
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while True:
            if not buf and self._await_request(conn):  # between requests
                return True
            if self._closed:
                return False
            with self._lock:
                self._busy += 1  # a request has begun: a drain waits for it
            try:
                buf = self._one_request(conn, buf)
            finally:
                with self._lock:
                    self._busy -= 1
                    self._lock.notify_all()
            if buf is None:
                return False

    def _one_request(self, conn: socket.socket, buf: bytes) -> bytes | None:
        """Read and answer one request; the bytes read past it, or None to close."""
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            buf += chunk
            if len(buf) > MAX_HEADER:
                self._reply(conn, 400, {"error": "request header too large"}, False)
                return None
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._reply(conn, 400, {"error": "malformed request line"}, False)
            return None
        method, target, version = parts
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        try:
            length = int(headers.get("content-length", "0") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._reply(conn, 400, {"error": "bad Content-Length"}, False)
            return None
        if length > MAX_BODY:  # answered unread, and the connection closed
            self._reply(conn, 413, {"error": f"a body is at most {MAX_BODY} bytes"}, False)
            return None
        while len(buf) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            buf += chunk
        body, buf = buf[:length], buf[length:]
        conn_hdr = headers.get("connection", "").lower()
        keep = conn_hdr != "close" if version == "HTTP/1.1" else conn_hdr == "keep-alive"
        try:
            status, reply = self.respond(method, target, body)
        except Exception as exc:  # keep serving; report the failure to the client
            status, reply = 500, {"error": f"{type(exc).__name__}: {exc}"}
        if not self._reply(conn, status, reply, keep) or not keep:
            return None
        return buf

    @staticmethod
    def _reply(conn: socket.socket, status: int, body: dict | bytes, keep: bool) -> bool:
        raw = isinstance(body, bytes)  # a stored value, sent as it is
        data = body if raw else json.dumps(body).encode() + b"\n"
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\n"
            f"Content-Type: {'application/octet-stream' if raw else 'application/json'}\r\n"
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
