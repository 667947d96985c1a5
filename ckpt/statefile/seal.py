"""Encryption at rest: every piece of an image sealed with AES-256-GCM.

An encrypted image (header flag ``FLAG_ENCRYPTED``, always with ``FLAG_KEYED``) keeps
only a small header in the clear: magic, version, flags, codec, chunk size, image id and
the ``ENC_HEADER`` that follows it (algorithm, key id, salt).  Everything else that
holds the sandbox's data is sealed after compression: each chunk of checkpoint.img,
the metadata JSON, each stored run of pages.img and the whole page map
(pages_meta.img).  The HMAC tags of a keyed image still cover what is stored (the
ciphertext), so the chain keeps catching dropped, reordered and truncated pieces
before anything is decrypted.

Why these choices:

- AES-256-GCM, not ChaCha20-Poly1305: measured faster on hosts with AES-NI, which
  every host ckpt targets has.
- One subkey per purpose (chunks, metadata, pages, map), each HKDF-SHA256 of the key
  file's bytes with the image's random salt: a subkey is never used by two images.
- Nonces are not random: ``purpose id u32 | index u64`` under the purpose's subkey,
  where the index is the piece's place in its file (chunk i, run i; 0 for the single
  metadata and map).  Each place is sealed once per image, so no nonce repeats under
  one key; random nonces would make that a matter of luck.
- The associated data binds a piece to its place (image id, purpose, index and the
  fields that say how to read it: lengths, codec, pages), so a piece moved to another
  place, file or image fails its tag.
- The key id in the header is an HKDF fingerprint of the key (not of the salt), the
  same for every image of one key: a wrong key is named as such, in one line, before
  any tag is computed.
"""

from __future__ import annotations

import os
import struct
from typing import Any

from ckpt.errors import IntegrityError, StatefileError
from ckpt.statefile.format import (
    FLAG_ENCRYPTED,
    FLAG_KEYED,
    FORMAT_VERSION,
    MAX_PAGES_META_LEN,
    PAGES_META_MAGIC,
)

ALG_AES_256_GCM = 1
ALGORITHMS = {ALG_AES_256_GCM: "aes-256-gcm"}
SALT_SIZE = 16
KEY_ID_SIZE = 8
AEAD_TAG_SIZE = 16  # bytes a sealed piece is longer than its plaintext
# Follows HEADER in checkpoint.img when FLAG_ENCRYPTED is set: algorithm, key id, salt.
ENC_HEADER = struct.Struct("<B7x8s16s")

PURPOSE_CHUNKS = 1
PURPOSE_METADATA = 2
PURPOSE_PAGES = 3
PURPOSE_MAP = 4
_PURPOSE_NAMES = {
    PURPOSE_CHUNKS: b"chunks",
    PURPOSE_METADATA: b"metadata",
    PURPOSE_PAGES: b"pages",
    PURPOSE_MAP: b"map",
}
_NONCE = struct.Struct("<IQ")  # purpose, index: 12 bytes, GCM's native nonce size
_AD = struct.Struct("<16sIQ")  # image id, purpose, index (then the piece's own fields)
_RUN = struct.Struct("<QIBI")  # first page, pages, codec, sealed length
_CHUNK = struct.Struct("<IBI")  # raw length, codec, sealed length
MAP_FLAGS = FLAG_KEYED | FLAG_ENCRYPTED

# pages_meta.img of an encrypted image: this clear header, then the sealed page map
# (the whole pages_meta.img an unencrypted image would hold, with its HMAC tag).
# The flags byte sits where the plain map's does, so a reader of the plain format
# refuses it by its flags.
SEALED_MAP_HEADER = struct.Struct("<8sHB5x16s")


class EncryptedImageError(StatefileError):
    """An encrypted image was opened without a key."""


class KeyMismatchError(IntegrityError):
    """The key given is not the key the image was sealed with."""


def preload() -> None:
    """Import now what sealing, opening and HMAC tags need (cryptography's AEAD and
    HKDF, hashlib's HMAC) and use each once: 50-90 ms in a process that has not, paid
    by every checkpoint written in a child forked from such a process
    (``--leave-running``) and by every restore.  The first use counts too (OpenSSL
    fetches each algorithm, ``abc`` caches its checks: 10 ms in a forked child).  The
    template calls it once for all the sandboxes it forks, and a sandbox before its
    first keyed checkpoint; nothing here starts a thread."""
    import hashlib
    import hmac

    from cryptography.exceptions import InvalidTag  # noqa: F401

    hmac.new(bytes(32), b"", hashlib.sha256).digest()
    Cipher(bytes(32), bytes(SALT_SIZE), bytes(16)).seal(PURPOSE_MAP, 0, b"", b"")


def _hkdf(key: bytes, salt: bytes | None, info: bytes, length: int = 32) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(key)


def key_id(key: bytes) -> bytes:
    """The short fingerprint of a key the header carries; reveals nothing of the key."""
    return _hkdf(key, None, b"ckpt image key id", KEY_ID_SIZE)


class Cipher:
    """Seals and opens the pieces of one image; safe to use from any thread."""

    __slots__ = ("_aeads", "algorithm", "image_id", "key_id", "salt")

    def __init__(self, key: bytes, salt: bytes, image_id: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.salt = salt
        self.image_id = image_id
        self.key_id = key_id(key)
        self.algorithm = ALG_AES_256_GCM
        self._aeads = {
            p: AESGCM(_hkdf(key, salt, b"ckpt image subkey " + name))
            for p, name in _PURPOSE_NAMES.items()
        }

    @classmethod
    def new(cls, key: bytes, image_id: bytes) -> Cipher:
        """A cipher for a new image: a fresh random salt."""
        return cls(key, os.urandom(SALT_SIZE), image_id)

    def header(self) -> bytes:
        """The clear ``ENC_HEADER`` that follows checkpoint.img's header."""
        return ENC_HEADER.pack(self.algorithm, self.key_id, self.salt)

    def _ad(self, purpose: int, index: int, fields: bytes) -> bytes:
        return _AD.pack(self.image_id, purpose, index) + fields

    def seal(self, purpose: int, index: int, fields: bytes, data: Any) -> bytes:
        """``data`` sealed for its place: ``purpose`` piece ``index`` described by
        ``fields`` (bound, not stored)."""
        nonce = _NONCE.pack(purpose, index)
        return self._aeads[purpose].encrypt(nonce, data, self._ad(purpose, index, fields))

    def open(self, purpose: int, index: int, fields: bytes, data: Any, where: str) -> bytes:
        """Undo ``seal``; a piece altered, moved or of another image is refused."""
        from cryptography.exceptions import InvalidTag

        nonce = _NONCE.pack(purpose, index)
        try:
            return self._aeads[purpose].decrypt(
                nonce, bytes(data), self._ad(purpose, index, fields)
            )
        except InvalidTag:
            raise IntegrityError(
                f"{where}: aes-256-gcm tag mismatch (the piece was modified, moved or truncated)"
            ) from None


def cipher_for(
    key: bytes | None, enc_header: bytes, image_id: bytes, where: str, *, verify: bool = True
) -> Cipher | None:
    """The cipher of an encrypted image from its clear ``ENC_HEADER``: refused in one
    line without a key or with another key.  None when ``verify`` is off (no key)."""
    alg, kid, salt = ENC_HEADER.unpack(enc_header)
    if alg not in ALGORITHMS:
        raise StatefileError(f"{where}: unknown encryption algorithm {alg} at offset 40")
    if not verify:
        return None
    if key is None:
        raise EncryptedImageError(
            f"{where}: encrypted (key id {kid.hex()}); pass its key with --key-file"
        )
    if key_id(key) != kid:
        raise KeyMismatchError(
            f"{where}: the key file does not match this image (key id {kid.hex()})"
        )
    return Cipher(key, salt, image_id)


def header_key_id(enc_header: bytes) -> str:
    """The key id an ``ENC_HEADER`` names, as hex."""
    return ENC_HEADER.unpack(enc_header)[1].hex()


def check_parent_sealing(parent_encrypted: bool, child_encrypted: bool, what: str) -> None:
    """A chain is encrypted throughout or not at all: a parent's pages restore into
    the child's memory, so mixing would leave part of it in the clear."""
    if parent_encrypted != child_encrypted:
        parent = "encrypted" if parent_encrypted else "not encrypted"
        child = "encrypted" if child_encrypted else "not encrypted"
        raise IntegrityError(
            f"{what} is {parent} and its child is {child}: a chain is encrypted throughout "
            "or not at all (checkpoint with --encrypt exactly when the parent was)"
        )


def seal_run(cipher: Cipher, index: int, first: int, npages: int, codec: int, data: Any) -> bytes:
    """Stored run ``index`` of pages.img, sealed for its place and pages."""
    return cipher.seal(PURPOSE_PAGES, index, _RUN.pack(first, npages, codec, len(data)), data)


def open_run(
    cipher: Cipher, index: int, first: int, npages: int, codec: int, data: Any, where: str
) -> bytes:
    """Undo ``seal_run``."""
    fields = _RUN.pack(first, npages, codec, max(0, len(data) - AEAD_TAG_SIZE))
    return cipher.open(PURPOSE_PAGES, index, fields, data, where)


def chunk_fields(raw_len: int, codec: int, plain_len: int) -> bytes:
    """What a chunk's seal binds besides its place: its raw length, codec and the
    length of what was sealed."""
    return _CHUNK.pack(raw_len, codec, plain_len)


def seal_map(cipher: Cipher, plain: bytes) -> bytes:
    """pages_meta.img of an encrypted image: a clear header, then the sealed map."""
    head = SEALED_MAP_HEADER.pack(PAGES_META_MAGIC, FORMAT_VERSION, MAP_FLAGS, cipher.image_id)
    return head + cipher.seal(PURPOSE_MAP, 0, head, plain)


def open_map(raw: bytes, cipher: Cipher | None, image_id: bytes, where: Any) -> bytes:
    """The plain page map of pages_meta.img's bytes ``raw``: unsealed when the image is
    encrypted, refused when the map and checkpoint.img disagree on that."""
    sealed = (
        len(raw) >= SEALED_MAP_HEADER.size
        and raw[:8] == PAGES_META_MAGIC
        and raw[10] & FLAG_ENCRYPTED
    )
    if not sealed:
        if cipher is not None:
            raise IntegrityError(
                f"{where}: the page map is not encrypted, unlike checkpoint.img: the files "
                "do not belong together"
            )
        return raw
    if cipher is None:
        raise EncryptedImageError(
            f"{where}: the page map is encrypted, unlike checkpoint.img (or pass the key)"
        )
    head = raw[: SEALED_MAP_HEADER.size]
    if head != SEALED_MAP_HEADER.pack(PAGES_META_MAGIC, FORMAT_VERSION, MAP_FLAGS, image_id):
        raise IntegrityError(
            f"{where}: the sealed page map's header (offset 0) is corrupt or of another image"
        )
    if len(raw) > SEALED_MAP_HEADER.size + AEAD_TAG_SIZE + MAX_PAGES_META_LEN:
        raise IntegrityError(f"{where}: the sealed page map is too large")
    return cipher.open(PURPOSE_MAP, 0, head, raw[SEALED_MAP_HEADER.size :], f"{where}: page map")
