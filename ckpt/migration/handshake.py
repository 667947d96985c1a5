"""The handshake: fresh nonces, a per-connection key, then proof that both hold the secret.

::

    both sides, unauthenticated:  MAGIC (8) | protocol u16 | nonce (32 random bytes)
    key = HKDF-SHA256(ikm=secret, salt=client nonce | server nonce, info=INFO, 32 bytes)
    both sides, frame 0, sealed:  Hello(protocol, software, max_payload, encrypt)

Both sides send before they read, so neither waits on the other.  A peer whose secret
differs derives another key, and its ``Hello`` fails the MAC: both sides then report
``KeyMismatch`` in one line.  The protocol version is compared twice: in the clear, to
explain a mismatch, and inside the sealed ``Hello``, so a tampered version cannot pass.
A peer that echoes our own nonce (a reflection) is refused before any key is derived.

Encryption is negotiated inside the hellos, which the MAC covers, so nobody on the path
can strip the request.  The source's ``encrypt`` asks for sealed frames; the
destination's says it accepts nothing else (``serve --encrypt``).  The frames after the
hellos are sealed (``sealed.py``, one key per direction from the same secret and nonces)
exactly when the source asked; a destination without ``--encrypt`` follows the source.
A source that did not ask, reaching a destination that accepts only sealed frames, is
refused on both sides in one line as each reads the other's hello: neither waits for
an ``Error`` frame, and nothing else is sent.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct

from ckpt.migration import messages
from ckpt.migration.errors import (
    AuthenticationError,
    EncryptionRefused,
    HandshakeError,
    KeyMismatch,
)
from ckpt.migration.framing import TO_CLIENT, TO_SERVER, Deadline, FrameOpener, FrameSealer, Wire
from ckpt.migration.sealed import SealedOpener, SealedSealer

MAGIC = b"CKPTMIG\x00"
NONCE_LEN = 32
OPENING = struct.Struct(f">8sH{NONCE_LEN}s")
INFO = b"ckpt migration channel key v1"
SEAL_INFO = {
    TO_SERVER: b"ckpt migration sealing key v1: to the server",
    TO_CLIENT: b"ckpt migration sealing key v1: to the client",
}
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


def derive_seal_keys(secret: bytes, client_nonce: bytes, server_nonce: bytes) -> dict[int, bytes]:
    """The AES-256-GCM key of each direction: a frame's nonce is its sequence number, so
    the two directions must not share a key."""
    salt = client_nonce + server_nonce
    return {direction: hkdf_sha256(secret, salt, info) for direction, info in SEAL_INFO.items()}


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
    wire: Wire,
    secret: bytes,
    *,
    client: bool,
    deadline: Deadline,
    max_payload: int,
    encrypt: bool = False,
) -> tuple[FrameSealer | SealedSealer, FrameOpener | SealedOpener, messages.Hello]:
    """Run the handshake; returns the sealer and opener of the connection and the peer's
    hello.  ``encrypt``: the client asks for sealed frames, the server requires them."""
    ours, theirs = exchange_openings(wire, deadline)
    client_nonce, server_nonce = (ours, theirs) if client else (theirs, ours)
    key = derive_key(secret, client_nonce, server_nonce)
    send, receive = (TO_SERVER, TO_CLIENT) if client else (TO_CLIENT, TO_SERVER)
    sealer = FrameSealer(key, send)
    # Until the peer's Hello is verified, accept no more than a Hello can need.
    opener = FrameOpener(key, receive, 4 * messages.MAX_TEXT)
    hello = messages.Hello(messages.PROTOCOL_VERSION, SOFTWARE, max_payload, encrypt)
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
    sealed = encrypt if client else peer.encrypt
    _check_encryption(client, encrypt, peer.encrypt)
    if not sealed:
        opener.max_payload = max_payload
        return sealer, opener, peer
    keys = derive_seal_keys(secret, client_nonce, server_nonce)
    return (
        SealedSealer(keys[send], send, sealer.seq),
        SealedOpener(keys[receive], receive, max_payload, opener.seq),
        peer,
    )


def _check_encryption(client: bool, ours: bool, theirs: bool) -> None:
    """Refuse a source that did not ask for sealed frames where they are required."""
    if client and theirs and not ours:
        raise EncryptionRefused(
            "the destination accepts only encrypted migrations (ckpt serve --encrypt): "
            "migrate with --encrypt"
        )
    if not client and ours and not theirs:
        raise EncryptionRefused(
            "the source did not ask for an encrypted channel, and this server accepts "
            "only encrypted migrations (--encrypt): migrate with --encrypt"
        )
