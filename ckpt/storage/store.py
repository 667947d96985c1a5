"""Where image bytes live, behind one small interface: put, create-if-absent, ranged get,
head, list and delete of whole objects named by ``/``-separated keys.

Two implementations: :class:`LocalStore` (a directory) and :class:`ckpt.storage.s3.S3Store`
(an object store, imported only when an ``s3://`` URL is opened, so commands that never
touch S3 do not pay for the client).  Keys are relative to the store's root (a directory,
or ``BUCKET/PREFIX``); a key never starts with ``/`` and never holds ``.`` or ``..``
components.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ckpt.storage.errors import BadStoreURL, ObjectExists, ObjectMissing, StorageError


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One stored object: its key, its size in bytes and when it was last written
    (Unix seconds, by the store's own clock)."""

    key: str
    size: int
    modified: float
    etag: str | None = None  # what :meth:`Store.swap` compares; None if the store gave none


class Store(Protocol):
    """The operations ckpt needs from any place that holds images."""

    url: str

    def check(self) -> None:
        """Raise the one-line error for a store that cannot be used now."""

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Write ``data`` at ``key``, replacing any object there atomically.  ``data``
        is read during the call only: the caller may reuse its buffer afterwards."""

    def create(self, key: str, data: bytes | memoryview) -> None:
        """Write ``data`` at ``key`` only if no object is there (raises ObjectExists)."""

    def swap(self, key: str, data: bytes | memoryview, etag: str) -> None:
        """Replace the object at ``key`` only if it is still the one whose ``head``
        gave ``etag`` (raises ObjectExists otherwise): a compare-and-swap, so two
        writers that both read one version cannot both replace it."""

    def get(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        """Bytes ``[start, start+length)`` of ``key`` (to the end when ``length`` is
        None); raises ObjectMissing."""

    def head(self, key: str) -> ObjectInfo | None:
        """The object's size and time, or None when it is absent."""

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` ("" or a key prefix ending in "/"), in no
        particular order."""

    def children(self, prefix: str) -> list[str]:
        """Names one level below ``prefix`` ("" or ending in "/") that hold objects,
        without listing what is under them (a repository's images, not its chunks)."""

    def delete(self, key: str) -> None:
        """Remove ``key``; an absent key is not an error."""


def check_key(key: str) -> str:
    """A key as every store accepts it, or StorageError (a bug in ckpt, not user input)."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StorageError(f"bad object key {key!r}")
    return key


class LocalStore:
    """A store in a local directory: one file per object.  Writes go to a temporary
    file beside the target and appear by rename (put) or by hard link, which fails when
    the name exists (create), so a reader never sees half an object."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.url = str(self.root)

    def check(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise BadStoreURL(f"{self.url} is not a directory")

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _write_temp(self, path: Path, data: bytes | memoryview) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.parent / f".tmp-{secrets.token_hex(8)}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return temp

    def put(self, key: str, data: bytes | memoryview) -> None:
        path = self._path(key)
        os.replace(self._write_temp(path, data), path)

    def create(self, key: str, data: bytes | memoryview) -> None:
        path = self._path(key)
        temp = self._write_temp(path, data)
        try:
            os.link(temp, path, follow_symlinks=False)
        except FileExistsError:
            raise ObjectExists(f"{self.url}/{key} already exists") from None
        finally:
            temp.unlink(missing_ok=True)

    def swap(self, key: str, data: bytes | memoryview, etag: str) -> None:
        path = self._path(key)
        temp = self._write_temp(path, data)
        try:
            fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # swappers of this directory, one at a time
                info = self.head(key)
                if info is None or info.etag != etag:
                    raise ObjectExists(f"{self.url}/{key} changed since it was read")
                os.replace(temp, path)
            finally:
                os.close(fd)
        finally:
            temp.unlink(missing_ok=True)

    def get(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        try:
            fd = os.open(self._path(key), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise ObjectMissing(f"{self.url}/{key} does not exist") from None
        try:
            if length is None:
                length = max(0, os.fstat(fd).st_size - start)
            return os.pread(fd, length, start)
        finally:
            os.close(fd)

    def head(self, key: str) -> ObjectInfo | None:
        try:
            info = os.lstat(self._path(key))
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        etag = f"{info.st_ino:x}-{info.st_mtime_ns:x}-{info.st_size:x}"  # a rename: new inode
        return ObjectInfo(key, info.st_size, info.st_mtime, etag)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            base = "" if rel == "." else rel + "/"
            if not (base.startswith(prefix) or prefix.startswith(base)):
                dirnames.clear()
                continue
            for name in filenames:
                key = base + name
                if name.startswith(".tmp-") or not key.startswith(prefix):
                    continue
                info = self.head(key)
                if info is not None:
                    yield info

    def children(self, prefix: str) -> list[str]:
        base = self.root / prefix if prefix else self.root
        try:
            with os.scandir(base) as entries:
                return [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(key))


def open_store(url: str) -> Store:
    """The store a URL names: ``s3://BUCKET[/PREFIX]`` (settings from the AWS variables,
    see :func:`ckpt.storage.s3.S3Settings.from_env`), ``file:///DIR`` or a plain path."""
    if url.startswith("s3://"):
        from ckpt.storage.s3 import S3Store  # lazy: importing the client costs ~30 ms

        return S3Store.from_url(url)
    if "://" in url and not url.startswith("file://"):
        raise BadStoreURL(f"{url}: unsupported scheme; use s3://BUCKET/PREFIX or a directory")
    path = url.removeprefix("file://")
    if not path:
        raise BadStoreURL("empty store path")
    return LocalStore(Path(path))
