"""Sealed frames (``--encrypt``): every frame after the handshake under AES-256-GCM.

::

    +-----------+---------+======================================+
    | length u32| kind u8 | AES-256-GCM(payload), 16-byte tag    |
    +-----------+---------+======================================+
    key   = per connection and direction (handshake.derive_seal_keys)
    nonce = 4 zero bytes | sequence u64
    AD    = direction u8 | sequence u64 | kind u8 | length u32

The header stays in the clear, so the reader can refuse a frame by its kind and length
before it reads the payload, but it is bound as associated data with the direction and
the sequence number: a changed header, a replayed, reordered, reflected or spliced
frame fails its tag exactly as it fails its MAC in the plain channel.  ``length`` is
the plaintext's, checked against the same limit.

Why these choices:

- AES-256-GCM, the image sealing's algorithm (``ckpt.statefile.seal``): measured faster
  than ChaCha20-Poly1305 here too (AES-NI; docs/benchmark-results.md, "Encrypted
  migration channel", ``python3 -m ckpt.bench.sealframes``).
- The nonce is the frame's sequence number, which each side counts and never resets,
  under a key of its own per direction: no nonce repeats under one key, and none
  needs to travel.  The two directions' keys differ, so the two ``frame 1``s (one each
  way) are not sealed under one (key, nonce).
- The tag replaces the HMAC: one pass over the payload instead of two.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ckpt.migration.errors import AuthenticationError, MigrationError
from ckpt.migration.framing import HEADER, MAC_INPUT, Deadline, Wire, check_header

TAG_LEN = 16
NONCE = struct.Struct(">4xQ")  # 12 bytes, GCM's native nonce size
MAX_SEQ = (1 << 64) - 1

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM


def _aead(key: bytes) -> AESGCM:
    """Imported here: ``cryptography`` costs a channel that does not seal nothing."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


class _Bound:
    """What a frame's tag covers besides its payload: the clear header, the direction
    and the sequence number (``MAC_INPUT``, as the HMAC)."""

    direction: int
    seq: int

    def _bound(self, kind: int, length: int) -> bytes:
        return MAC_INPUT.pack(self.direction, self.seq, kind, length)


class SealedSealer(_Bound):
    """Seals the frames one side sends after the handshake: ``FrameSealer``'s interface."""

    def __init__(self, key: bytes, direction: int, seq: int) -> None:
        self._aead = _aead(key)
        self.direction = direction
        self.seq = seq  # continues the count the handshake's frames began

    def seal(self, kind: int, payload: bytes) -> bytes:
        if self.seq > MAX_SEQ:
            raise MigrationError("the connection sent 2**64 frames: open a new one")
        length = len(payload)
        sealed = self._aead.encrypt(NONCE.pack(self.seq), payload, self._bound(kind, length))
        self.seq += 1
        return HEADER.pack(length, kind) + sealed


class SealedOpener(_Bound):
    """Reads and opens the frames one side receives: ``FrameOpener``'s interface."""

    def __init__(self, key: bytes, direction: int, max_payload: int, seq: int) -> None:
        self._aead = _aead(key)
        self.direction = direction
        self.max_payload = max_payload
        self.seq = seq

    def read(self, wire: Wire, deadline: Deadline) -> tuple[int, bytes]:
        """The next frame's ``(kind, payload)``, opened; raises ``MigrationError``."""
        from cryptography.exceptions import InvalidTag

        what = f"frame {self.seq}"
        length, kind = HEADER.unpack(wire.read_exact(HEADER.size, deadline, what))
        check_header(length, kind, self.max_payload)
        sealed = wire.read_exact(length + TAG_LEN, deadline, what)
        try:
            payload = self._aead.decrypt(NONCE.pack(self.seq), sealed, self._bound(kind, length))
        except InvalidTag as exc:
            raise AuthenticationError(
                f"frame {self.seq} from the peer fails its seal: tampered, replayed, "
                "spliced or not sealed; the connection is closed"
            ) from exc
        self.seq += 1
        return kind, payload
