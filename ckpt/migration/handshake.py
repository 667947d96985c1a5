"""The handshake: fresh nonces, a per-connection key, then proof that both hold the secret.

::

    both sides, unauthenticated:  MAGIC (8) | protocol u16 | nonce (32 random bytes)
    key = HKDF-SHA256(ikm=secret, salt=client nonce | server nonce, info=INFO, 32 bytes)
    both sides, frame 0, sealed:  Hello(protocol, software, max_payload)

Both sides send before they read, so neither waits on the other.  A peer whose secret
differs derives another key, and its ``Hello`` fails the MAC: both sides then report
``KeyMismatch`` in one line.  The protocol version is compared twice: in the clear, to
explain a mismatch, and inside the sealed ``Hello``, so a tampered version cannot pass.
A peer that echoes our own nonce (a reflection) is refused before any key is derived.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct

from ckpt.migration import messages
from ckpt.migration.errors import AuthenticationError, HandshakeError, KeyMismatch
from ckpt.migration.framing import TO_CLIENT, TO_SERVER, Deadline, FrameOpener, FrameSealer, Wire

MAGIC = b"CKPTMIG\x00"
NONCE_LEN = 32
OPENING = struct.Struct(f">8sH{NONCE_LEN}s")
INFO = b"ckpt migration channel key v1"
SOFTWARE = "ckpt"


def hkdf_sha256(ikm: bytes, salt: bytes, info: bytes, length: int = 32) -> bytes:
    """HKDF (RFC 5869) with SHA-256: extract a pseudorandom key, expand it to ``length``."""
    if length > 255 * 32:
        raise ValueError("HKDF-SHA256 cannot produce more than 8160 bytes")
    prk = hmac.new(salt or bytes(32), ikm, hashlib.sha256).digest()
    out = b""
    block = b""
    counter = 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def derive_key(secret: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    """The connection key: fresh for each pair of nonces, so frames cannot cross connections."""
    return hkdf_sha256(secret, client_nonce + server_nonce, INFO)


def exchange_openings(wire: Wire, deadline: Deadline) -> tuple[bytes, bytes]:
    """Send our opening and read the peer's; returns ``(our nonce, peer nonce)``."""
    ours = os.urandom(NONCE_LEN)
    wire.write(OPENING.pack(MAGIC, messages.PROTOCOL_VERSION, ours), deadline, "the handshake")
    raw = wire.read_exact(OPENING.size, deadline, "the handshake")
    magic, version, theirs = OPENING.unpack(raw)
    if magic != MAGIC:
        raise HandshakeError("the peer is not a ckpt migration peer (bad opening bytes)")
    if version != messages.PROTOCOL_VERSION:
        raise HandshakeError(
            f"the peer speaks migration protocol {version}, this ckpt speaks "
            f"{messages.PROTOCOL_VERSION}: use the same ckpt version on both hosts"
        )
    if hmac.compare_digest(ours, theirs):
        raise HandshakeError("the peer echoed this side's nonce: a reflected connection")
    return ours, theirs


def handshake(
    wire: Wire, secret: bytes, *, client: bool, deadline: Deadline, max_payload: int
) -> tuple[FrameSealer, FrameOpener, messages.Hello]:
    """Run the handshake; returns the sealer and opener of the connection and the peer's hello."""
    ours, theirs = exchange_openings(wire, deadline)
    client_nonce, server_nonce = (ours, theirs) if client else (theirs, ours)
    key = derive_key(secret, client_nonce, server_nonce)
    sealer = FrameSealer(key, TO_SERVER if client else TO_CLIENT)
    # Until the peer's Hello is verified, accept no more than a Hello can need.
    opener = FrameOpener(key, TO_CLIENT if client else TO_SERVER, 4 * messages.MAX_TEXT)
    hello = messages.Hello(messages.PROTOCOL_VERSION, SOFTWARE, max_payload)
    wire.write(sealer.seal(hello.KIND, messages.encode(hello)), deadline, "the handshake")
    try:
        kind, payload = opener.read(wire, deadline)
    except AuthenticationError as exc:
        raise KeyMismatch("the peer's key differs: check --key-file") from exc
    if kind != messages.Kind.HELLO:
        raise HandshakeError(f"the peer sent {messages.Kind(kind).name} before its hello")
    peer = messages.decode(kind, payload)
    assert isinstance(peer, messages.Hello)
    if peer.protocol != messages.PROTOCOL_VERSION:
        raise HandshakeError(f"the peer's sealed hello says protocol {peer.protocol}")
    opener.max_payload = max_payload
    return sealer, opener, peer
