"""Frames on the wire: length-prefixed, typed, each sealed with an HMAC.

::

    +-----------+---------+=======================+==============+
    | length u32| kind u8 | payload (length bytes) | MAC 32 bytes |
    +-----------+---------+=======================+==============+
    MAC = HMAC-SHA256(connection key,
                      direction u8 | sequence u64 | kind u8 | length u32 | payload)

All integers are big-endian.  The sequence number is not on the wire: each side counts
the frames it sent and received (from 0, the ``Hello``), so a replayed, dropped or
reordered frame is checked against the wrong number and fails its MAC.  The direction
byte makes a frame reflected back at its sender fail too, and the key is derived per
connection (``handshake.py``), so a frame spliced in from another connection fails.

The reader checks the length and the kind in the header before it reads (let alone
allocates) the payload, and verifies the MAC before the payload is decoded.  Every read
goes through ``Wire.read_exact``, which enforces the deadline.

With ``--encrypt`` the frames after the handshake are sealed with AES-256-GCM instead
of MAC'd (``sealed.py``): the same header, bound the same way, the same counting.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import ssl
import struct
import time

from ckpt.migration.errors import (
    AuthenticationError,
    DeadlineExceeded,
    FrameError,
    MigrationError,
    PeerClosed,
)
from ckpt.migration.messages import MESSAGE_TYPES

HEADER = struct.Struct(">IB")
MAC_INPUT = struct.Struct(">BQBI")
MAC_LEN = 32
DEFAULT_MAX_PAYLOAD = 8 << 20  # a PageRuns of MAX_BATCH_PAGES pages, stored raw, fits
TO_SERVER = 1  # direction byte of frames the connecting side sends
TO_CLIENT = 2


class Deadline:
    """An absolute monotonic deadline; ``None`` seconds means none.  ``says`` ends the
    message of the ``DeadlineExceeded`` it raises: which deadline the peer missed."""

    def __init__(self, seconds: float | None, says: str = "before the deadline") -> None:
        self.at = None if seconds is None else time.monotonic() + seconds
        self.says = says

    @classmethod
    def until(cls, at: float, says: str) -> Deadline:
        """The deadline at monotonic time ``at``."""
        deadline = cls(None, says)
        deadline.at = at
        return deadline

    def remaining(self, what: str) -> float | None:
        if self.at is None:
            return None
        left = self.at - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(f"the peer did not finish {what} {self.says}")
        return left

    def earlier(self, other: Deadline) -> Deadline:
        if other.at is not None and (self.at is None or other.at < self.at):
            return other
        return self


class Wire:
    """A socket whose every read and write has a deadline and fails as a ``MigrationError``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def read_exact(self, n: int, deadline: Deadline, what: str) -> bytearray:
        """Exactly ``n`` bytes; ``n`` was checked against a limit by the caller."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            self.sock.settimeout(deadline.remaining(what))
            try:
                k = self.sock.recv_into(view[got:], n - got)
            except TimeoutError as exc:
                raise DeadlineExceeded(f"the peer did not finish {what} {deadline.says}") from exc
            except (ssl.SSLError, OSError) as exc:
                raise PeerClosed(f"the connection failed while reading {what}: {exc}") from exc
            if k == 0:
                raise PeerClosed(f"the peer closed the connection in the middle of {what}")
            got += k
        return buf

    def write(self, data: bytes, deadline: Deadline, what: str) -> None:
        self.sock.settimeout(deadline.remaining(what))
        try:
            self.sock.sendall(data)
        except TimeoutError as exc:
            raise DeadlineExceeded(f"the peer did not take {what} before the deadline") from exc
        except (ssl.SSLError, OSError) as exc:
            raise PeerClosed(f"the connection failed while sending {what}: {exc}") from exc


def mac(key: bytes, direction: int, seq: int, kind: int, payload: bytes | memoryview) -> bytes:
    """The frame's MAC: over direction, sequence number, kind, length and payload."""
    h = hmac.new(key, MAC_INPUT.pack(direction, seq, kind, len(payload)), hashlib.sha256)
    h.update(payload)
    return h.digest()


class FrameSealer:
    """Seals the frames one side sends: counts them and MACs each with its number."""

    def __init__(self, key: bytes, direction: int) -> None:
        self.key = key
        self.direction = direction
        self.seq = 0

    def seal(self, kind: int, payload: bytes) -> bytes:
        tag = mac(self.key, self.direction, self.seq, kind, payload)
        self.seq += 1
        return b"".join((HEADER.pack(len(payload), kind), payload, tag))


class FrameOpener:
    """Reads and verifies the frames one side receives, in order, within limits."""

    def __init__(self, key: bytes, direction: int, max_payload: int) -> None:
        self.key = key
        self.direction = direction
        self.max_payload = max_payload
        self.seq = 0

    def read(self, wire: Wire, deadline: Deadline) -> tuple[int, bytearray]:
        """The next frame's ``(kind, payload)``, authenticated; raises ``MigrationError``."""
        what = f"frame {self.seq}"
        length, kind = HEADER.unpack(wire.read_exact(HEADER.size, deadline, what))
        check_header(length, kind, self.max_payload)
        payload = wire.read_exact(length, deadline, what)
        tag = wire.read_exact(MAC_LEN, deadline, what)
        if not hmac.compare_digest(tag, mac(self.key, self.direction, self.seq, kind, payload)):
            raise AuthenticationError(
                f"frame {self.seq} from the peer fails its MAC: tampered, replayed or "
                "spliced; the connection is closed"
            )
        self.seq += 1
        return kind, payload


def check_header(length: int, kind: int, max_payload: int) -> None:
    """Refuse a frame by its header alone, before its payload is read or allocated."""
    if kind not in MESSAGE_TYPES:
        raise FrameError(f"the peer sent a frame of unknown kind {kind}")
    if length > max_payload:
        raise FrameError(
            f"the peer announced a {length}-byte frame, over the {max_payload}-byte limit"
        )


__all__ = [
    "DEFAULT_MAX_PAYLOAD",
    "Deadline",
    "FrameOpener",
    "FrameSealer",
    "MigrationError",
    "Wire",
    "mac",
]
