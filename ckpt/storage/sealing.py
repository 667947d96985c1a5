"""Encrypted images in an object store that still deduplicate: convergent chunks and
sealed manifests.

A chunk is sealed with a key that depends on its plaintext and on the key file K, and
on nothing else, so an unchanged chunk seals to the same object in every checkpoint
under K (uploaded once) while another key shares nothing::

    mac     = HMAC-SHA256(K_chunk, plaintext)        the chunk's secret (manifest only)
    address = HMAC-SHA256(K_addr, mac)               its object key: .chunks/XX/ADDRESS
    nonce   = HMAC-SHA256(K_nonce, mac)[:12]
    object  = AES-256-GCM(key=mac, nonce, plaintext, associated data=address)

``K_chunk``, ``K_addr``, ``K_nonce`` and ``K_manifest`` are HKDF-SHA256 subkeys of K
with distinct info labels.  Why so:

- The address is keyed (not SHA-256 of the plaintext), so a reader of the bucket
  without K cannot test whether a plaintext it guesses is stored.
- Each AEAD key seals one plaintext only (it is that plaintext's MAC), so a fixed
  derived nonce never repeats with two messages; the address as associated data binds
  an object to its name, so a swapped object fails its tag.
- The macs live only in the sealed manifest: without K nothing in the bucket opens.

A sealed manifest is ``HEADER`` (flag ``FLAG_SEALED``), a clear index, then the
AES-256-GCM ciphertext of the manifest and its chunks' macs, under ``K_manifest``
with a random nonce and the header and index as associated data.  The clear index
holds what listing, ``rm`` and ``prune`` need without a key (name, ids, parent, the
key id, and each distinct chunk's address and stored size) and nothing of the image's
content or layout.  The chunks' plaintext is an ordinary unkeyed image (the writer's
CRC-32 frames): the manifest's tag and each chunk's tag authenticate all of it, and an
image sealed this way is re-keyed chunk by chunk without parsing its files.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from typing import Annotated, Any

import msgspec

from ckpt.errors import IntegrityError
from ckpt.storage.errors import ChunkIntegrityError, StorageError

ALGORITHM = "aes-256-gcm"
TAG_SIZE = 16  # bytes an object is longer than its chunk
NONCE_SIZE = 12
KEY_ID_SIZE = 8
INDEX_FILE = "chunks"  # the clear index's one "file": every distinct stored chunk

Digest = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]


class EncryptedImage(StorageError):
    """An encrypted image was asked for without a key."""


class KeyMismatch(StorageError, IntegrityError):
    """The key given is not the key the image was sealed with."""


class ChunkSecret(msgspec.Struct, array_like=True, frozen=True):
    """A chunk's address and its mac (from which its key and nonce derive)."""

    address: Digest
    mac: Digest


def _hkdf(key: bytes, info: bytes, length: int = 32) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(key)


def key_id(key: bytes) -> str:
    """The key's fingerprint, as hex: the same label as a local encrypted image's
    (ckpt/statefile/seal.py), so one key file shows one id everywhere."""
    return _hkdf(key, b"ckpt image key id", KEY_ID_SIZE).hex()


def _mac(key: bytes, data: Any) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


class PlainChunks:
    """Chunks stored as they are, named by their SHA-256 (an unencrypted image)."""

    sealed = False
    overhead = 0
    key_id: str | None = None

    def seal(self, data: bytes, out: bytearray | None = None) -> tuple[bytes, Any]:
        """(address, object) of chunk ``data`` (``out`` is not needed)."""
        return hashlib.sha256(data).digest(), data

    def open(self, address: bytes, size: int, stored: bytes, where: str) -> bytes:
        """The chunk ``address`` of ``size`` bytes from its object, checked."""
        if len(stored) != size or hashlib.sha256(stored).digest() != address:
            raise ChunkIntegrityError(
                f"{where}: chunk {address.hex()[:16]} does not match its digest "
                "(tampered or corrupt)"
            )
        return stored


class ConvergentChunks:
    """Chunks sealed under one key file (see module doc); the macs of the chunks it
    sealed or that a manifest listed are kept to open them.  Thread-safe."""

    sealed = True
    overhead = TAG_SIZE

    def __init__(self, key: bytes, secrets: dict[bytes, bytes] | None = None) -> None:
        self.key_id = key_id(key)
        self._chunk = _hkdf(key, b"ckpt store chunk mac")
        self._addr = _hkdf(key, b"ckpt store chunk address")
        self._nonce = _hkdf(key, b"ckpt store chunk nonce")
        self.manifest_key = _hkdf(key, b"ckpt store manifest")
        self.secrets: dict[bytes, bytes] = dict(secrets or {})
        self._lock = threading.Lock()

    def address_of(self, mac: bytes) -> bytes:
        return _mac(self._addr, mac)

    def _aead(self, mac: bytes) -> tuple[Any, bytes]:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        return AESGCM(mac), _mac(self._nonce, mac)[:NONCE_SIZE]

    def seal(self, data: bytes, out: bytearray | None = None) -> tuple[bytes, Any]:
        """(address, object) of chunk ``data``: the same for the same bytes and key.

        With ``out`` (at least ``len(data) + TAG_SIZE`` bytes) the object is sealed into
        it and returned as a view of it, valid until ``out`` is reused: an upload
        thread's own buffer, reused for each of its chunks.  A new object per chunk
        cost twice the encryption itself (a fresh zero-filled buffer, with the GIL
        held: 93 ms CPU per 64 MiB against 34 ms into a reused one)."""
        mac = _mac(self._chunk, data)
        address = self.address_of(mac)
        aead, nonce = self._aead(mac)
        if out is None:
            stored = aead.encrypt(nonce, data, address)
        else:
            stored = memoryview(out)[: len(data) + TAG_SIZE]
            aead.encrypt_into(nonce, data, address, stored)
        with self._lock:
            self.secrets[address] = mac
        return address, stored

    def open(self, address: bytes, size: int, stored: bytes, where: str) -> bytes:
        """The chunk ``address`` of ``size`` bytes from its object: its tag checked."""
        from cryptography.exceptions import InvalidTag

        mac = self.secrets.get(address)
        name = address.hex()[:16]
        if mac is None:
            raise ChunkIntegrityError(f"{where}: chunk {name} is not in the sealed manifest")
        if len(stored) != size + TAG_SIZE:
            raise ChunkIntegrityError(
                f"{where}: chunk {name} is {len(stored)} bytes, not {size + TAG_SIZE}"
                " (truncated or replaced); the image cannot be restored"
            )
        aead, nonce = self._aead(mac)
        try:
            return aead.decrypt(nonce, stored, address)  # type: ignore[no-any-return]
        except InvalidTag:
            raise ChunkIntegrityError(
                f"{where}: chunk {name} fails its {ALGORITHM} tag (tampered or corrupt);"
                " the image cannot be restored"
            ) from None


def chunks_for(key: bytes | None, sealed: bool) -> PlainChunks | ConvergentChunks:
    """The chunk codec of a new upload."""
    if not sealed:
        return PlainChunks()
    if key is None:
        raise StorageError("--encrypt seals the image with a key: pass --key-file PATH")
    return ConvergentChunks(key)


def seal_body(chunks: ConvergentChunks, nonce: bytes, bound: bytes, body: bytes) -> bytes:
    """The ciphertext of a sealed manifest's ``body`` (``bound``: header and index)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(chunks.manifest_key).encrypt(nonce, body, bound)  # type: ignore[no-any-return]


def new_nonce() -> bytes:
    return os.urandom(NONCE_SIZE)


def open_body(
    key: bytes | None, index: Any, bound: bytes, sealed: bytes, where: str
) -> tuple[bytes, ConvergentChunks]:
    """The plaintext body of a sealed manifest (``index``: its clear part, ``bound``
    the bytes its tag covers besides) and the codec of its key; refused in one line without a key, with another key, or when any byte was changed."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if index.algorithm != ALGORITHM:
        raise StorageError(f"{where}: unknown encryption {index.algorithm!r}; upgrade ckpt")
    if key is None:
        raise EncryptedImage(
            f"{where}: encrypted (key id {index.key_id}); pass its key with --key-file"
        )
    chunks = ConvergentChunks(key)
    if chunks.key_id != index.key_id:
        raise KeyMismatch(
            f"{where}: the key file does not match this image (key id {index.key_id}, the"
            f" file's is {chunks.key_id}); pass the key it was sealed with"
        )
    try:
        body = AESGCM(chunks.manifest_key).decrypt(index.nonce, sealed, bound)
    except InvalidTag:
        raise ChunkIntegrityError(
            f"{where}: the manifest fails its {ALGORITHM} tag (edited or truncated);"
            " the image cannot be used"
        ) from None
    return body, chunks


def check_chain(parent_sealed: bool, parent_key_id: str | None, child: Any, what: str) -> None:
    """A chain is sealed throughout under one key, or not sealed at all: the parent's
    pages restore into the child's memory (``child`` is the new image's codec)."""
    if parent_sealed != child.sealed:
        state = "encrypted" if parent_sealed else "not encrypted"
        want = "with --encrypt and its key" if parent_sealed else "without --encrypt"
        raise IntegrityError(
            f"{what} is {state}: a chain is encrypted throughout or not at all;"
            f" checkpoint {want}, or without --parent-path"
        )
    if parent_sealed and parent_key_id != child.key_id:
        raise KeyMismatch(
            f"{what} is sealed with key id {parent_key_id}, not this key ({child.key_id}):"
            " a chain uses one key; pass the parent's --key-file, or take a checkpoint"
            " without --parent-path"
        )
