"""A local cache of chunks read from a store, so a second lazy restore of an image (or of
another image sharing its chunks) reads them from disk instead of the network.

Layout: ``DIR/XX/ADDRESS``, one file per chunk, as in the repository: the object as the
store holds it (an encrypted image's chunks stay encrypted here).  A chunk enters
the cache only after it matched its digest, by a temporary file renamed into place, so
no reader sees half of one.  It is checked again on every read (length, then SHA-256,
or its tag when sealed):
the directory outlives any one image, and whatever is found there is trusted no more
than the store; a file that fails is removed and the chunk is read from the store.

Size: at most ``CKPT_CHUNK_CACHE_MIB`` (default 4096) MiB; ``trim`` removes the chunks
read least recently (their mtime, set on each hit) until the cache fits.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from ckpt.errors import CkptError
from ckpt.storage.manifest import ChunkRef


def max_bytes() -> int:
    """The cache's bound in bytes, from ``CKPT_CHUNK_CACHE_MIB`` (ckpt/settings.py)."""
    from ckpt import settings

    return settings.current().chunk_cache_mib << 20


class ChunkCache:
    """Verified chunks on local disk, named by digest (see module doc)."""

    def __init__(self, directory: Path, limit: int | None = None) -> None:
        self.dir = Path(directory)
        self.limit = max_bytes() if limit is None else limit

    @classmethod
    def default(cls) -> ChunkCache | None:
        """The cache under ckpt's cache directory, or None when it is off or unusable."""
        from ckpt.cachedir import chunk_dir

        where = chunk_dir()
        return cls(where) if where is not None else None

    def _path(self, ref: ChunkRef) -> Path:
        hexed = ref.hex
        return self.dir / hexed[:2] / hexed

    def get(
        self,
        ref: ChunkRef,
        open_stored: Callable[[bytes], bytes] | None = None,
        size: int | None = None,
    ) -> bytes | None:
        """The chunk, if the cache holds a file that matches it; else None.  A sealed
        chunk's object is ``size`` bytes and ``open_stored`` checks and decrypts it
        (default: the plain chunk, checked against its SHA-256)."""
        path = self._path(ref)
        if size is None:
            size = ref.size
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size != size:
                data = b""
            else:
                data = os.pread(fd, size, 0)
        except OSError:
            data = b""
        finally:
            os.close(fd)
        plain: bytes | None = None
        if len(data) == size:
            if open_stored is None:
                plain = data if hashlib.sha256(data).digest() == ref.digest else None
            else:
                with contextlib.suppress(CkptError):
                    plain = open_stored(data)
        if plain is None:
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # read recently: trimmed last
        return plain

    def put(self, ref: ChunkRef, data: bytes) -> None:
        """Keep ``data`` (the object as stored), which the caller checked against
        ``ref``.  A cache that cannot
        be written (disk full, removed) only costs the next restore a fetch."""
        path = self._path(ref)
        temp = path.parent / f".tmp-{secrets.token_hex(8)}"
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(temp, path)
        except OSError:
            with contextlib.suppress(OSError):
                temp.unlink()

    def trim(self) -> int:
        """Remove the chunks read least recently until the cache fits its bound; return
        how many were removed."""
        entries: list[tuple[float, int, str]] = []
        total = 0
        with contextlib.suppress(OSError):
            for sub in os.scandir(self.dir):
                if not sub.is_dir(follow_symlinks=False) or len(sub.name) != 2:
                    continue
                for entry in os.scandir(sub.path):
                    with contextlib.suppress(OSError):
                        info = entry.stat(follow_symlinks=False)
                        if stat.S_ISREG(info.st_mode):
                            entries.append((info.st_mtime, info.st_size, entry.path))
                            total += info.st_size
        removed = 0
        for _mtime, size, path in sorted(entries):
            if total <= self.limit:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
            total -= size
        return removed
