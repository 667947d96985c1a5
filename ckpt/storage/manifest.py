"""The manifest: the one object that makes an image exist.

It lists every file of the image (``checkpoint.img``, ``pages.img``, ...) as a sequence
of content-addressed chunks, and says who made it and from what.  It is written last,
with a create-if-absent, so an image is either complete or invisible.

Layout of a manifest object::

    offset  size  field
    0       8     MAGIC  b"CKPTMANI"
    8       1     FORMAT_VERSION
    9       1     flags: FLAG_HMAC = an HMAC-SHA256 trailer follows the body;
                  FLAG_SEALED = the body is a clear index, the rest its ciphertext
    10      4     N, body length, big-endian, at most MAX_BODY
    14      N     body: msgpack (msgspec) of :class:`Manifest`
    14+N    32    HMAC-SHA256(key, bytes 0 .. 14+N), with FLAG_HMAC only

With a key, the HMAC is checked before the body is parsed, and the body holds each
chunk's SHA-256, so every chunk is checked against an authenticated digest before use.
Without a key the digests still catch a corrupt or swapped chunk, not a forged manifest.
An encrypted image's manifest is sealed instead (ckpt/storage/sealing.py): a clear
index for listing and pruning, then the AES-256-GCM ciphertext of the manifest and its
chunks' secrets, both covered by the tag.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Annotated

import msgspec

from ckpt.storage import sealing
from ckpt.storage.errors import ChunkIntegrityError, StorageError

MAGIC = b"CKPTMANI"
FORMAT_VERSION = 1
FLAG_HMAC = 1
FLAG_SEALED = 2
HEADER = struct.Struct(">8sBBI")
MAC_SIZE = 32
MAX_BODY = 64 << 20  # a 1 TiB image in 512 KiB chunks needs ~90 MiB; 64 MiB is ~700 GiB
MAX_CHUNK = 16 << 20
MIN_KEY_LEN = 16
# The largest manifest object encode writes: a sealed one adds its ciphertext (the
# manifest and 64 bytes of secrets a chunk) to its index.
MAX_OBJECT = HEADER.size + 2 * MAX_BODY + MAC_SIZE

Digest = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
ChunkSize = Annotated[int, msgspec.Meta(ge=1, le=MAX_CHUNK)]
# Unix seconds: finite and before the year 5138, so every listing can print it.
Created = Annotated[float, msgspec.Meta(ge=0, le=1e11)]
Name = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]


class ManifestError(StorageError):
    """A manifest is malformed, from an unknown version, or does not match its key."""


class ManifestVersionError(ManifestError):
    """A manifest of another format version: written by another ckpt, so not garbage."""


class ChunkRef(msgspec.Struct, array_like=True, frozen=True):
    """One chunk: its address (its name in the store: the SHA-256 of its bytes, or a
    sealed chunk's keyed address) and its length (a sealed chunk's plaintext's)."""

    digest: Digest
    size: ChunkSize

    @property
    def hex(self) -> str:
        return self.digest.hex()


class FileEntry(msgspec.Struct, frozen=True):
    """One file of the image: its chunks in order."""

    size: Annotated[int, msgspec.Meta(ge=0)]
    chunks: list[ChunkRef]


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything needed to read an image back and to account for it."""

    version: int = FORMAT_VERSION
    image_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{32}$")]
    name: Name
    sandbox_id: str
    created: Created  # Unix seconds, the uploader's clock
    parent: Name | None = None
    parent_id: str | None = None
    chunk_size: ChunkSize
    files: dict[Name, FileEntry]

    @property
    def size(self) -> int:
        """Bytes of all files together."""
        return sum(f.size for f in self.files.values())

    def chunk_refs(self) -> dict[bytes, int]:
        """Each distinct chunk once: digest -> size."""
        return {ref.digest: ref.size for f in self.files.values() for ref in f.chunks}


def check_key_len(key: bytes | None) -> None:
    if key is not None and len(key) < MIN_KEY_LEN:
        raise StorageError(
            f"the integrity key is {len(key)} bytes; use at least {MIN_KEY_LEN} random bytes"
        )


class SealedIndex(msgspec.Struct, frozen=True, kw_only=True):
    """The clear part of a sealed manifest (authenticated, not encrypted): what ``ls``,
    ``rm`` and ``prune`` read without a key."""

    algorithm: str
    key_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{16}$")]
    nonce: Annotated[bytes, msgspec.Meta(min_length=12, max_length=12)]
    index: Manifest  # the image's ids and parent; its one file lists the stored chunks


class SealedBody(msgspec.Struct, frozen=True, kw_only=True):
    """The encrypted part: the manifest itself and its chunks' secrets."""

    manifest: Manifest
    secrets: list[sealing.ChunkSecret]


def _index(manifest: Manifest, overhead: int) -> Manifest:
    """The clear index of ``manifest``: every distinct chunk once, by address, with
    its stored size, in address order (nothing of the files' layout)."""
    refs = [ChunkRef(d, n + overhead) for d, n in sorted(manifest.chunk_refs().items())]
    files = {sealing.INDEX_FILE: FileEntry(size=sum(r.size for r in refs), chunks=refs)}
    return msgspec.structs.replace(manifest, files=files)


def encode(manifest: Manifest, key: bytes | None, chunks: object = None) -> bytes:
    """The manifest object's bytes: sealed (encrypted) with ``chunks``' key when it is a
    ``sealing.ConvergentChunks``, else signed with ``key`` when given."""
    check_key_len(key)
    if isinstance(chunks, sealing.ConvergentChunks):
        return _encode_sealed(manifest, chunks)
    body = msgspec.msgpack.encode(manifest)
    if len(body) > MAX_BODY:
        raise ManifestError(f"the manifest is {len(body)} bytes, over {MAX_BODY}")
    head = HEADER.pack(MAGIC, FORMAT_VERSION, FLAG_HMAC if key else 0, len(body))
    if key is None:
        return head + body
    return head + body + hmac.new(key, head + body, hashlib.sha256).digest()


def _encode_sealed(manifest: Manifest, chunks: sealing.ConvergentChunks) -> bytes:
    refs = manifest.chunk_refs()
    secrets = [sealing.ChunkSecret(d, chunks.secrets[d]) for d in sorted(refs)]
    body = msgspec.msgpack.encode(SealedBody(manifest=manifest, secrets=secrets))
    nonce = sealing.new_nonce()
    clear = msgspec.msgpack.encode(
        SealedIndex(
            algorithm=sealing.ALGORITHM,
            key_id=chunks.key_id,
            nonce=nonce,
            index=_index(manifest, chunks.overhead),
        )
    )
    if len(clear) > MAX_BODY or len(body) > MAX_BODY:
        raise ManifestError(f"the manifest is {len(clear) + len(body)} bytes, over {MAX_BODY}")
    head = HEADER.pack(MAGIC, FORMAT_VERSION, FLAG_SEALED, len(clear))
    return head + clear + sealing.seal_body(chunks, nonce, head + clear, body)


def _split(data: bytes, where: str) -> tuple[int, bytes, bytes]:
    if len(data) < HEADER.size:
        raise ManifestError(f"{where}: manifest truncated ({len(data)} bytes)")
    magic, version, flags, length = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ManifestError(f"{where}: not a ckpt manifest")
    if version != FORMAT_VERSION:
        raise ManifestVersionError(
            f"{where}: manifest format {version}; this ckpt reads {FORMAT_VERSION}"
        )
    trailer = MAC_SIZE if flags & FLAG_HMAC else 0
    if flags & FLAG_SEALED:  # the ciphertext: whatever follows the index
        trailer = max(sealing.TAG_SIZE, len(data) - HEADER.size - length)
    if length > MAX_BODY or HEADER.size + length + trailer != len(data):
        raise ManifestError(f"{where}: manifest length {length} does not match its object")
    end = HEADER.size + length
    return flags, data[:end], data[end:]


def _parse(signed: bytes, where: str, flags: int = 0) -> Manifest:
    try:
        if flags & FLAG_SEALED:
            manifest = msgspec.msgpack.decode(signed[HEADER.size :], type=SealedIndex).index
        else:
            manifest = msgspec.msgpack.decode(signed[HEADER.size :], type=Manifest)
    except msgspec.DecodeError as exc:
        raise ManifestError(f"{where}: bad manifest: {exc}") from None
    return _checked(manifest, where)


def _checked(manifest: Manifest, where: str) -> Manifest:
    for name, entry in manifest.files.items():
        if sum(ref.size for ref in entry.chunks) != entry.size:
            raise ManifestError(f"{where}: file {name} size does not match its chunks")
    return manifest


def decode(data: bytes, key: bytes | None, where: str) -> Manifest:
    """Check and parse a manifest (see :func:`decode_with_chunks`)."""
    return decode_with_chunks(data, key, where)[0]


def is_sealed(data: bytes) -> bool:
    """Whether the manifest object ``data`` is sealed (its header's flag only)."""
    return len(data) >= HEADER.size and bool(HEADER.unpack_from(data)[2] & FLAG_SEALED)


def decode_with_chunks(
    data: bytes, key: bytes | None, where: str
) -> tuple[Manifest, sealing.PlainChunks | sealing.ConvergentChunks]:
    """Check and parse a manifest, and the codec its chunks open with.  With ``key``
    the HMAC must be present and match before anything is parsed; without one a
    signed manifest is refused (its writer meant it to be checked); a sealed one
    opens with its key only."""
    check_key_len(key)
    flags, signed, mac = _split(data, where)
    if flags & FLAG_SEALED:
        return _decode_sealed(signed, mac, key, where)
    if key is None:
        if flags & FLAG_HMAC:
            raise ManifestError(f"{where}: the image is sealed with a key; pass its key file")
    else:
        if not flags & FLAG_HMAC:
            raise ChunkIntegrityError(f"{where}: the manifest is not sealed, but a key was given")
        if not hmac.compare_digest(mac, hmac.new(key, signed, hashlib.sha256).digest()):
            raise ChunkIntegrityError(
                f"{where}: the manifest fails its HMAC (edited, or a different key)"
            )
    return _parse(signed, where), sealing.PlainChunks()


def _decode_sealed(
    signed: bytes, sealed: bytes, key: bytes | None, where: str
) -> tuple[Manifest, sealing.ConvergentChunks]:
    try:
        index = msgspec.msgpack.decode(signed[HEADER.size :], type=SealedIndex)
    except msgspec.DecodeError as exc:
        raise ManifestError(f"{where}: bad manifest: {exc}") from None
    plain, chunks = sealing.open_body(key, index, signed, sealed, where)
    try:
        body = msgspec.msgpack.decode(plain, type=SealedBody)
    except msgspec.DecodeError as exc:
        raise ManifestError(f"{where}: bad sealed manifest: {exc}") from None
    manifest = _checked(body.manifest, where)
    for secret in body.secrets:
        if chunks.address_of(secret.mac) != secret.address:
            raise ManifestError(f"{where}: a chunk's secret does not match its address")
        chunks.secrets[secret.address] = secret.mac
    if _index(manifest, chunks.overhead) != index.index or not set(manifest.chunk_refs()) <= set(
        chunks.secrets
    ):
        raise ManifestError(f"{where}: the sealed manifest disagrees with its clear index")
    return manifest, chunks


def decode_unverified(data: bytes, where: str) -> Manifest:
    """Parse a manifest without checking its HMAC: for listing and pruning, which must
    see every image whatever its key, and never read the image's bytes (of a sealed
    manifest, its clear index)."""
    flags, signed, _ = _split(data, where)
    return _parse(signed, where, flags)


def unverified_key_id(data: bytes, where: str) -> str | None:
    """The key id a sealed manifest names in clear; None when it is not sealed."""
    flags, signed, _ = _split(data, where)
    if not flags & FLAG_SEALED:
        return None
    try:
        return msgspec.msgpack.decode(signed[HEADER.size :], type=SealedIndex).key_id
    except msgspec.DecodeError as exc:
        raise ManifestError(f"{where}: bad manifest: {exc}") from None


def verify_chunk(ref: ChunkRef, data: bytes, where: str) -> bytes:
    """``data`` if it is the chunk ``ref`` names, else ChunkIntegrityError."""
    if len(data) != ref.size or hashlib.sha256(data).digest() != ref.digest:
        raise ChunkIntegrityError(
            f"{where}: chunk {ref.hex[:16]} does not match its digest (tampered or corrupt)"
        )
    return data
