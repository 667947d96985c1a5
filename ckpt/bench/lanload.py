"""The LAN migration bench's clients, run in the client's namespace (``lanmigrate``).

``KEEPALIVE`` clients each keep one HTTP/1.1 connection to the sandbox's address and
ask ``GET /`` on it every ``interval_s``; one writer PUTs numbered writes (4 KiB values
derived from the number) on its own connection every ``write_interval_s``, write ``n``
to key ``w<n % slots>`` (so that the store never fills: a full store answers 507); a
write is acknowledged by its 200, and its event names it ``w<slot>#<n>``.  A client whose connection fails logs why (``lantally``'s
events), waits ``RETRY_S`` and opens another.  Each request has a deadline
(``REQUEST_TIMEOUT_S``), as does the whole run (``lifetime_s``).

The process prints ``ready`` once every client has had an answer, loads until a line
arrives on stdin (or the lifetime ends), then reads every acknowledged key back from
the same address (the sandbox has moved by then) and prints one JSON line: the events
and the read-back digests.  Stdlib only, so that it starts fast.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import sys
import threading
import time

KEEPALIVE = 4
VALUE_BYTES = 4096
RETRY_S = 0.005
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 30.0
MAX_HEADER = 64 * 1024
MAX_BODY = 1 << 20


class HttpFailure(Exception):
    """One request failed; ``kind`` is the event it makes (reset, timeout, error)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def value_of(n: int) -> bytes:
    """The writer's value for write ``n``: the number, repeated to ``VALUE_BYTES``."""
    return (b"%08d" % n) * (VALUE_BYTES // 8)


def write_of(event_key: str) -> tuple[str, int]:
    """(the key, the write's number) of an acknowledged write's ``w<slot>#<n>``."""
    key, _, n = event_key.partition("#")
    return key, int(n)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def _read_answer(sock: socket.socket) -> tuple[int, bytes]:
    """One HTTP/1.1 answer with a Content-Length: (status, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise HttpFailure("reset")  # the server ended the connection
        buf += chunk
        if len(buf) > MAX_HEADER:
            raise HttpFailure("error")
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split()[1])
        length = next(
            int(line.split(b":", 1)[1])
            for line in lines
            if line.lower().startswith(b"content-length:")
        )
    except (IndexError, ValueError, StopIteration):
        raise HttpFailure("error") from None
    if not 0 <= length <= MAX_BODY:
        raise HttpFailure("error")
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise HttpFailure("reset")
        body += chunk
    return status, body[:length]


def request(
    sock: socket.socket, method: str, path: str, ip: str, body: bytes = b""
) -> tuple[int, bytes]:
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {ip}\r\nConnection: keep-alive\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return _read_answer(sock)


class Client(threading.Thread):
    """One connection, asked in a loop; every outcome an event."""

    def __init__(
        self,
        no: int,
        ip: str,
        port: int,
        interval_s: float,
        writer: bool,
        events: list,
        halt: threading.Event,
        slots: int = 1 << 30,
    ) -> None:
        super().__init__(name=f"client-{no}", daemon=True)
        self.no, self.ip, self.port = no, ip, port
        self.interval_s, self.writer = interval_s, writer
        self.events, self.halt = events, halt
        self.answered = threading.Event()
        self.written = 0
        self.slots = slots

    def _log(self, kind: str, sent: int, got: int, key: str = "") -> None:
        self.events.append((kind, self.no, sent, got, key))  # list.append: thread-safe

    def _connect(self) -> socket.socket | None:
        t = time.monotonic_ns()
        try:
            sock = socket.create_connection((self.ip, self.port), timeout=CONNECT_TIMEOUT_S)
        except ConnectionRefusedError:
            self._log("refused", t, time.monotonic_ns())
            return None
        except OSError:
            self._log("timeout", t, time.monotonic_ns())
            return None
        sock.settimeout(REQUEST_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._log("open", t, time.monotonic_ns())
        return sock

    def _one(self, sock: socket.socket) -> None:
        key = ""
        t = time.monotonic_ns()
        try:
            if self.writer:
                n = self.written
                key = f"w{n % self.slots}#{n}"
                status, _ = request(sock, "PUT", f"/kv/{write_of(key)[0]}", self.ip, value_of(n))
            else:
                status, _ = request(sock, "GET", "/", self.ip)
        except HttpFailure as exc:
            self._log(exc.kind, t, time.monotonic_ns())
            raise
        except TimeoutError:
            self._log("timeout", t, time.monotonic_ns())
            raise HttpFailure("timeout") from None
        except OSError:  # ECONNRESET, EPIPE: the connection was reset
            self._log("reset", t, time.monotonic_ns())
            raise HttpFailure("reset") from None
        got = time.monotonic_ns()
        if status != 200:  # an answer all the same: the connection is alive
            self._log("error", t, got)
            return
        if self.writer:
            self.written += 1
        self._log("answer", t, got, key)
        self.answered.set()

    def run(self) -> None:
        sock: socket.socket | None = None
        next_at = time.monotonic()
        while not self.halt.is_set():
            if sock is None:
                sock = self._connect()
                if sock is None:
                    self.halt.wait(RETRY_S)
                    continue
            try:
                self._one(sock)
            except HttpFailure:
                sock.close()
                sock = None
                self.halt.wait(RETRY_S)
                continue
            next_at = max(next_at + self.interval_s, time.monotonic())
            self.halt.wait(max(0.0, next_at - time.monotonic()))
        self._log("end", 0, time.monotonic_ns())
        if sock is not None:
            sock.close()


def read_back(ip: str, port: int, keys: list[str]) -> dict[str, tuple[int, str]]:
    """GET every key on one connection: (status, digest of the body); a key whose
    request failed is left out (it counts as lost)."""
    out: dict[str, tuple[int, str]] = {}
    sock = socket.create_connection((ip, port), timeout=CONNECT_TIMEOUT_S)
    sock.settimeout(REQUEST_TIMEOUT_S)
    try:
        for key in keys:
            status, body = request(sock, "GET", f"/kv/{key}", ip)
            out[key] = (status, digest(body))
    except (OSError, HttpFailure):
        pass
    finally:
        sock.close()
    return out


def main(
    ip: str, port: int, interval_s: float, write_interval_s: float, lifetime_s: float, slots: int
) -> None:
    """The clients until a line on stdin (or ``lifetime_s``), then the read-back;
    ``slots``: the writer's keys (0: no writer)."""
    events: list = []
    halt = threading.Event()
    clients = [Client(n, ip, port, interval_s, False, events, halt) for n in range(KEEPALIVE)]
    if slots > 0:
        clients.append(Client(KEEPALIVE, ip, port, write_interval_s, True, events, halt, slots))
    for c in clients:
        c.start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    for c in clients:
        c.answered.wait(max(0.0, deadline - time.monotonic()))
    ready = all(c.answered.is_set() for c in clients)
    print("ready" if ready else "not ready", flush=True)
    stopper = threading.Timer(lifetime_s, halt.set)
    stopper.daemon = True
    stopper.start()
    if ready:
        threading.Thread(target=lambda: (sys.stdin.readline(), halt.set()), daemon=True).start()
    else:
        halt.set()
    halt.wait()
    for c in clients:
        c.join(REQUEST_TIMEOUT_S + CONNECT_TIMEOUT_S)
    stopper.cancel()
    acked = list(
        dict.fromkeys(write_of(e[4])[0] for e in list(events) if e[0] == "answer" and e[4])
    )
    readback: dict[str, tuple[int, str]] = {}
    if acked:
        with contextlib.suppress(OSError):
            readback = read_back(ip, port, acked)
    print(json.dumps({"events": list(events), "readback": readback}), flush=True)
