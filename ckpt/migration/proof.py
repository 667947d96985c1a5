"""The destination's proof, before the source deletes its copy, that it restored the
sandbox the source sent and saw it running.

The source draws a fresh ``NONCE_BYTES`` nonce per migration and sends it in its
``Offer``.  The destination answers ``Restored`` only once its restored sandbox is
running, with ``proof(nonce, id, address, digest)``: an HMAC keyed by the nonce over the
sandbox ID, the address it runs at and the SHA-256 of the kernel-state stream it
received and restored.  The source computes the same from what it sent; a destination
that did not receive the whole state, or answers ``Restored`` from an earlier migration,
cannot match it, and the source then resumes its own copy.  (A peer that holds the key
and keeps the state could still compute it without running anything: the proof binds
the answer to this migration's state, it cannot look inside the peer's host.)
"""

from __future__ import annotations

import hashlib
import hmac
import os

import msgspec

NONCE_BYTES = 32
DOMAIN = b"ckpt-migrate-restored-v1"


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


def proof(nonce: bytes, sandbox_id: str, address: str | None, state_sha256: bytes) -> bytes:
    """What the destination sends in ``Restored`` and the source expects there."""
    body = msgspec.msgpack.encode([DOMAIN, sandbox_id, address, state_sha256])
    return hmac.new(nonce, body, hashlib.sha256).digest()


def matches(expected: bytes, given: bytes) -> bool:
    """Compared in constant time; an empty or short answer never matches."""
    return len(given) == len(expected) and hmac.compare_digest(expected, given)
