"""``ckpt image rekey``: an encrypted image rewritten under a new key, without a
sandbox, so a key can be rotated and the old one retired.

A local image is read with its key (every tag checked) and written again, atomically
in its place, by the same ``ImageWriter``: the kernel state as its plain stream, the
page runs as stored (compressed, decrypted, never decompressed), the metadata and
stats as they were, under the new key with a new salt.  Its image id is kept, so a
sandbox that took it may still name it as a ``--parent-path``.

An object-store image is re-sealed chunk by chunk (ckpt/storage/sealing.py): each
chunk decrypted with the old key and sealed with the new one, at the same boundaries,
then the manifest replaced by one sealed with the new key (a swap on its ETag, so a
checkpoint that replaced it meanwhile is not lost).  The old key's chunks stay until
``ckpt image prune`` finds no image using them.

Which key opens the image: the one of the ``--key-file`` files whose key id is the
one the image names, so a rotation can pass every key still in use.  A chain (an
image with a parent or children) is refused: its images must share one key, and
rewriting one of them alone would break it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckpt.errors import StatefileError, UsageError
from ckpt.images.location import Location

READ_SIZE = 1 << 20


class NotEncrypted(UsageError):
    """``rekey`` of an image that has no key to change."""


@dataclass
class Rekeyed:
    """What a rekey did (``--json`` renders it)."""

    image: str
    old_key_id: str
    new_key_id: str
    bytes_rewritten: int


def _pick(keys: list[bytes], wanted: str, key_id: Any, where: str) -> bytes:
    """The key among ``keys`` whose id is ``wanted``; one line otherwise."""
    for key in keys:
        if key_id(key) == wanted:
            return key
    given = ", ".join(key_id(k) for k in keys) or "none"
    raise UsageError(
        f"{where}: encrypted with key id {wanted}, and no --key-file given has it"
        f" (given: {given}); pass the key it was sealed with"
    )


def rekey(location: Location, keys: list[bytes], new_key: bytes, env: dict[str, str]) -> Rekeyed:
    """Rewrite the encrypted image at ``location`` under ``new_key``; the old key is
    the one of ``keys`` the image names."""
    if location.path is not None:
        return _rekey_local(location.path, keys, new_key)
    return _rekey_store(location, keys, new_key, env)


def _rekey_local(path: Path, keys: list[bytes], new_key: bytes) -> Rekeyed:
    from ckpt.statefile import chain, open_image, open_image_unverified
    from ckpt.statefile.image import ROUNDS_DIR, ImageWriter
    from ckpt.statefile.seal import key_id

    where = str(path)
    head = open_image_unverified(path).header
    if not head.encrypted:
        raise NotEncrypted(f"{where}: the image is not encrypted; take a checkpoint with --encrypt")
    old = open_image(path, key=_pick(keys, head.key_id, lambda k: key_id(k).hex(), where))
    if chain.depth(old) or chain.children(path) or (path / ROUNDS_DIR).exists():
        raise StatefileError(
            f"{where} is part of a chain, whose images share one key: rekey a full image"
            " (take a checkpoint without --parent-path)"
        )
    meta = {
        k: v
        for k, v in old.metadata.items()
        if not k.startswith("_") and k not in ("pages", "state_bytes")
    }
    fmt = old.metadata.get("_format") or {}
    compression = meta.get("compression") or "zstd"
    options: dict[str, Any] = {"level": meta.get("level")} if compression == "zstd" else {}
    if fmt.get("chunk_size"):
        options["chunk_size"] = fmt["chunk_size"]
    stats = old.stats()
    written = 0
    with ImageWriter(
        path,
        force=True,
        compression=compression,
        key=new_key,
        encrypt=True,
        metadata=meta,
        image_id=old.header.image_id,
        **options,
    ) as new:
        stream = old.state_reader()
        while block := stream.read(READ_SIZE):
            new.state_file.write(block)
            written += len(block)
        runs = list(old.iter_stored())  # checked and decrypted with the old key
        written += sum(len(r[3]) for r in runs)
        new.write_runs(runs)
        if stats is not None:
            new.write_stats(stats)
    return Rekeyed(where, head.key_id, key_id(new_key).hex(), written)


def _rekey_store(
    location: Location, keys: list[bytes], new_key: bytes, env: dict[str, str]
) -> Rekeyed:
    from ckpt.images.factory import store_of
    from ckpt.storage.errors import ImageChanged, StorageError
    from ckpt.storage.manifest import unverified_key_id
    from ckpt.storage.repository import Repository
    from ckpt.storage.sealing import key_id

    store, _, name = store_of(location, env)
    where = str(location)
    probe = Repository(store)
    current = store.head(probe.manifest_key(name))
    data = probe._read_manifest_bytes(name)
    old_id = unverified_key_id(data, where)
    if old_id is None:
        raise NotEncrypted(f"{where}: the image is not encrypted; take a checkpoint with --encrypt")
    old_repo = Repository(store, _pick(keys, old_id, key_id, where))
    reader = old_repo.open_image(name)
    manifest = reader.manifest
    if manifest.parent is not None or probe.children(name):
        raise StorageError(
            f"{where} is part of a chain, whose images share one key: rekey a full image"
            " (take a checkpoint without --parent-path)"
        )
    new_repo = Repository(store, new_key, sealed=True, chunk_size=manifest.chunk_size)
    upload = new_repo.upload(name, sandbox_id=manifest.sandbox_id, force=True)
    written = 0
    with upload:
        if current is None or upload.replaces != current.etag:
            raise ImageChanged(
                f"{where} was replaced or removed while it was being re-keyed; nothing"
                " was written: run it again"
            )
        for file_name in manifest.files:
            out = upload.open(file_name)
            for chunk in reader.iter_file(file_name):  # each checked with the old key
                written += out.write(chunk)
                out.cut()  # the same boundaries: unchanged chunks stay shared
            out.close()
        upload.commit()
    return Rekeyed(where, old_id, key_id(new_key), written)
