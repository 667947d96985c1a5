"""Integrity tags: HMAC-SHA256 with a key, CRC-32 without one.

One ``Sealer`` computes every tag of an image.  A chunk's tag is split in two so the
expensive half runs on the worker threads: ``digest`` covers the chunk's bytes (and its
index, so chunks cannot be swapped) and can be computed in parallel; ``chain`` folds a
digest into the running tag, which is cheap and done in order.  With a key the chain
makes every tag depend on the header and on all chunks before it, as gVisor's statefile
does; without a key CRC-32 still catches flipped bits and truncation (not forgery).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

from ckpt.errors import IntegrityError, StatefileError
from ckpt.statefile.format import CHUNK_INDEX, TAG_SIZE_KEYED, TAG_SIZE_PLAIN

MIN_KEY_LEN = 16


class Sealer:
    """Computes and checks tags; keyed (HMAC-SHA256) or plain (CRC-32)."""

    __slots__ = ("cipher", "key", "size")

    def __init__(self, key: bytes | None) -> None:
        if key is not None and len(key) < MIN_KEY_LEN:
            raise StatefileError(
                f"the integrity key is {len(key)} bytes; use at least {MIN_KEY_LEN} "
                "random bytes (e.g. head -c 32 /dev/urandom > key)"
            )
        self.key = key
        # An encrypted image's seal.Cipher: the stored pieces are sealed with it, and
        # the tags above cover what is stored (the ciphertext).
        self.cipher: Any = None
        self.size = TAG_SIZE_KEYED if key is not None else TAG_SIZE_PLAIN

    @property
    def keyed(self) -> bool:
        return self.key is not None

    @property
    def algorithm(self) -> str:
        return "hmac-sha256" if self.key is not None else "crc32"

    def mac(self, parts: Iterable[bytes | bytearray | memoryview]) -> bytes:
        """Tag over the concatenation of ``parts`` (without joining them)."""
        if self.key is not None:
            # Imported on use: hashlib loads OpenSSL, a cost every sandbox process would
            # pay at start-up although only keyed images need it.
            import hashlib
            import hmac

            h = hmac.new(self.key, digestmod=hashlib.sha256)
            for p in parts:
                h.update(p)
            return h.digest()
        crc = 0
        for p in parts:
            crc = zlib.crc32(p, crc)
        return crc.to_bytes(4, "little")

    def digest(self, index: int, frame: bytes, data: bytes | bytearray | memoryview) -> bytes:
        """The parallel half of a chunk tag: covers the index, frame header and data."""
        return self.mac((CHUNK_INDEX.pack(index), frame, data))

    def chain(self, prev: bytes, digest: bytes) -> bytes:
        """The ordered half: fold a chunk digest into the running tag."""
        return self.mac((prev, digest))

    def check(self, expected: bytes, got: bytes | bytearray | memoryview, what: str) -> None:
        """Raise IntegrityError unless the stored tag ``got`` equals ``expected``.

        An HMAC is compared in constant time; a CRC-32 is no secret (anyone can compute
        it), so plain equality serves and keeps ``hmac`` out of unkeyed restores.
        """
        if self.key is not None:
            import hmac

            same = hmac.compare_digest(expected, bytes(got))
        else:
            same = expected == bytes(got)
        if not same:
            hint = (
                " (wrong key, or the file was modified or truncated)"
                if self.keyed
                else " (the file is corrupt or truncated)"
            )
            raise IntegrityError(f"{what}: {self.algorithm} mismatch{hint}")
