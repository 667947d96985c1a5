"""Frames a second through the migration channel's two framings, in one process.

``python3 -m ckpt.bench.sealframes [--repeat 5] [--mib 64]`` seals and then reads back
(verifies) frames of several payload sizes, ``--mib`` MiB of each, with the plain
channel's HMAC-SHA256 (``framing.py``) and with ``--encrypt``'s AES-256-GCM
(``sealed.py``), and, to check the choice of cipher, with ChaCha20-Poly1305 in its
place.  It prints the median frames/s and MB/s (payload bytes) of ``--repeat`` passes.
No socket: the reader reads from memory, so only the framing is timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from ckpt.migration import sealed
from ckpt.migration.framing import TO_SERVER, Deadline, FrameOpener, FrameSealer, Wire
from ckpt.migration.messages import Kind

SIZES = (4 << 10, 64 << 10, 1 << 20, 4 << 20)


class _Memory:
    """A socket that reads from a byte string: what ``Wire`` needs."""

    def __init__(self, data: bytes) -> None:
        self.view = memoryview(data)
        self.at = 0

    def settimeout(self, timeout: float | None) -> None:
        pass

    def recv_into(self, buf: memoryview, n: int) -> int:
        k = min(n, len(self.view) - self.at)
        buf[:k] = self.view[self.at : self.at + k]
        self.at += k
        return k


def _chacha(key: bytes) -> Any:
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    return ChaCha20Poly1305(key)


def framings(key: bytes) -> dict[str, Callable[[], tuple[Any, Any]]]:
    """Each framing's (sealer, opener) maker, both ends of one direction."""
    limit = 8 << 20

    def chacha() -> tuple[Any, Any]:
        s, o = sealed.SealedSealer(key, TO_SERVER, 1), sealed.SealedOpener(key, TO_SERVER, limit, 1)
        s._aead = o._aead = _chacha(key)
        return s, o

    return {
        "hmac-sha256": lambda: (FrameSealer(key, TO_SERVER), FrameOpener(key, TO_SERVER, limit)),
        "aes-256-gcm": lambda: (
            sealed.SealedSealer(key, TO_SERVER, 1),
            sealed.SealedOpener(key, TO_SERVER, limit, 1),
        ),
        "chacha20-poly1305": chacha,
    }


def one_pass(make: Callable[[], tuple[Any, Any]], size: int, total: int) -> float:
    """Seconds to seal ``total // size`` frames of ``size`` bytes and read them back."""
    payload = os.urandom(size)
    count = max(4, total // size)
    sealer, opener = make()
    t0 = time.perf_counter()
    frames = [sealer.seal(Kind.STATE_CHUNK, payload) for _ in range(count)]
    wire = Wire(_Memory(b"".join(frames)))  # type: ignore[arg-type]
    deadline = Deadline(None)
    for _ in range(count):
        opener.read(wire, deadline)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--mib", type=int, default=64, help="MiB of frames per size")
    args = parser.parse_args(argv)
    key = os.urandom(32)
    total = args.mib << 20
    print(f"{'median of ' + str(args.repeat):<20} {'payload':>8} {'frames/s':>10} {'MB/s':>8}")
    for size in SIZES:
        for name, make in framings(key).items():
            count = max(4, total // size)
            secs = statistics.median(one_pass(make, size, total) for _ in range(args.repeat))
            print(
                f"{name:<20} {size >> 10:>6} K {count / secs:>10,.0f} {count * size / secs / 1e6:>8,.0f}"
            )


if __name__ == "__main__":
    main()
