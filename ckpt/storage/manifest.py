"""The manifest: the one object that makes an image exist.

It lists every file of the image (``checkpoint.img``, ``pages.img``, ...) as a sequence
of content-addressed chunks, and says who made it and from what.  It is written last,
with a create-if-absent, so an image is either complete or invisible.

Layout of a manifest object::

    offset  size  field
    0       8     MAGIC  b"CKPTMANI"
    8       1     FORMAT_VERSION
    9       1     flags: FLAG_HMAC = an HMAC-SHA256 trailer follows the body
    10      4     N, body length, big-endian, at most MAX_BODY
    14      N     body: msgpack (msgspec) of :class:`Manifest`
    14+N    32    HMAC-SHA256(key, bytes 0 .. 14+N), with FLAG_HMAC only

With a key, the HMAC is checked before the body is parsed, and the body holds each
chunk's SHA-256, so every chunk is checked against an authenticated digest before use.
Without a key the digests still catch a corrupt or swapped chunk, not a forged manifest.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Annotated

import msgspec

from ckpt.storage.errors import ChunkIntegrityError, StorageError

MAGIC = b"CKPTMANI"
FORMAT_VERSION = 1
FLAG_HMAC = 1
HEADER = struct.Struct(">8sBBI")
MAC_SIZE = 32
MAX_BODY = 64 << 20  # a 1 TiB image in 512 KiB chunks needs ~90 MiB; 64 MiB is ~700 GiB
MAX_CHUNK = 16 << 20
MIN_KEY_LEN = 16
MAX_OBJECT = HEADER.size + MAX_BODY + MAC_SIZE  # the largest manifest object encode writes

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
    """One chunk: the SHA-256 of its bytes (its name in the store) and its length."""

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


def encode(manifest: Manifest, key: bytes | None) -> bytes:
    """The manifest object's bytes, sealed with ``key`` when given."""
    check_key_len(key)
    body = msgspec.msgpack.encode(manifest)
    if len(body) > MAX_BODY:
        raise ManifestError(f"the manifest is {len(body)} bytes, over {MAX_BODY}")
    head = HEADER.pack(MAGIC, FORMAT_VERSION, FLAG_HMAC if key else 0, len(body))
    if key is None:
        return head + body
    return head + body + hmac.new(key, head + body, hashlib.sha256).digest()


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
    if length > MAX_BODY or HEADER.size + length + trailer != len(data):
        raise ManifestError(f"{where}: manifest length {length} does not match its object")
    end = HEADER.size + length
    return flags, data[:end], data[end:]


def _parse(signed: bytes, where: str) -> Manifest:
    try:
        manifest = msgspec.msgpack.decode(signed[HEADER.size :], type=Manifest)
    except msgspec.DecodeError as exc:
        raise ManifestError(f"{where}: bad manifest: {exc}") from None
    for name, entry in manifest.files.items():
        if sum(ref.size for ref in entry.chunks) != entry.size:
            raise ManifestError(f"{where}: file {name} size does not match its chunks")
    return manifest


def decode(data: bytes, key: bytes | None, where: str) -> Manifest:
    """Check and parse a manifest.  With ``key`` the HMAC must be present and match
    before anything is parsed; without one a sealed manifest is refused (its writer
    meant it to be checked)."""
    check_key_len(key)
    flags, signed, mac = _split(data, where)
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
    return _parse(signed, where)


def decode_unverified(data: bytes, where: str) -> Manifest:
    """Parse a manifest without checking its HMAC: for listing and pruning, which must
    see every image whatever its key, and never read the image's bytes."""
    _, signed, _ = _split(data, where)
    return _parse(signed, where)


def verify_chunk(ref: ChunkRef, data: bytes, where: str) -> bytes:
    """``data`` if it is the chunk ``ref`` names, else ChunkIntegrityError."""
    if len(data) != ref.size or hashlib.sha256(data).digest() != ref.digest:
        raise ChunkIntegrityError(
            f"{where}: chunk {ref.hex[:16]} does not match its digest (tampered or corrupt)"
        )
    return data
