"""A TCP relay for tests that keeps what the connecting side sends and can cut the
link, and the eye of a passive listener on that stream: what it can read without the
key."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from ckpt.migration import messages
from ckpt.migration.framing import HEADER, MAC_LEN
from ckpt.migration.handshake import OPENING
from ckpt.migration.sealed import TAG_LEN

POLL_S = 0.2


class Tap:
    """Relays 127.0.0.1:``port`` to ``target``; ``sent`` holds every byte the clients
    sent to it (the source's side of a migration)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sent = bytearray()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(POLL_S)
        self._conns: list[socket.socket] = []
        self._down_until = 0.0
        self.cuts = self.dropped = 0
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._sock.getsockname()[1]}"

    def cut(self, down_s: float = 0.0) -> None:
        """Break every connection relayed now, and drop those made in the next
        ``down_s`` seconds: a link that goes down for that long."""
        self._down_until = time.monotonic() + down_s
        with self._lock:
            conns = list(self._conns)
        for sock in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.cuts += 1

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if time.monotonic() < self._down_until:
                self.dropped += 1
                client.close()
                continue
            server = socket.create_connection(self.target, timeout=10)
            for sock in (client, server):
                sock.settimeout(None)  # blocking: close() shuts them down to end the pumps
                with self._lock:
                    self._conns.append(sock)
            for src, dst, keep in ((client, server, True), (server, client, False)):
                t = threading.Thread(target=self._pump, args=(src, dst, keep), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, keep: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                if keep:
                    with self._lock:
                        self.sent += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        for sock in self._conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(10)
        for sock in self._conns:
            sock.close()


def readable(stream: bytes) -> bytes:
    """All a passive listener gets from a source's stream without the key: its bytes as
    they are, and each frame it can decode, with the pages unpacked (decompressed)."""
    out = [stream]
    for tag in (MAC_LEN, TAG_LEN):  # plain frames, or sealed ones after the hello
        pos, first = OPENING.size, True
        while pos + HEADER.size <= len(stream):
            length, kind = HEADER.unpack_from(stream, pos)
            payload = stream[pos + HEADER.size : pos + HEADER.size + length]
            pos += HEADER.size + length + (MAC_LEN if first else tag)
            first = False
            try:
                msg = messages.decode(kind, payload)
            except Exception:
                continue
            out.append(payload)
            if isinstance(msg, messages.PageRuns):
                with contextlib.suppress(Exception):
                    out += [page for _, page in messages.unpack_pages(msg, 1 << 20)]
    return b"".join(out)
