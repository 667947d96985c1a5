"""Reading an image's files from the store by chunk, on demand: what a ``--background``
restore from ``s3://`` reads pages.img through.

A :class:`ChunkSource` serves the chunks of one image: from a small memory window, else
the local :class:`~ckpt.storage.chunkcache.ChunkCache`, else the store (the chunk is
checked against its digest, then kept in the cache).  Each chunk is fetched once however
many threads ask for it at the same time; a read that needs a chunk another thread is
fetching waits for that fetch.

Read-ahead: each read asks the pool to fetch the next ``readahead`` chunks after the
last one it touched, so the background fill, which reads pages.img in order, finds its
next chunks fetched (or in flight) while it decompresses the current one.  A page asked
for out of order is fetched at once by the thread that asks, never queued behind the
read-ahead.

Every chunk is checked before use (the manifest's digests, themselves authenticated
by its HMAC with a key); a chunk that fails, or a store that fails, raises a one-line
``StorageError``, and the page loader stops the sandbox on it (ckpt/statefile/pages.py).

Memory: at most ``window`` chunks are kept (512 KiB each), plus those being fetched.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ckpt.storage.chunkcache import ChunkCache
from ckpt.storage.errors import StorageError, StoreUnreachable
from ckpt.storage.manifest import ChunkRef
from ckpt.storage.repository import ImageReader

READAHEAD = 8  # chunks (4 MiB) fetched ahead of the last read
PARALLEL = 8  # fetches in flight for the read-ahead
WAIT_S = 150.0  # a wait on another thread's fetch: longer than the store's own deadlines


@dataclass
class LazyStats:
    """Where the chunks came from (for the restore's log line and the benchmarks)."""

    from_store: int = 0
    from_cache: int = 0
    bytes_from_store: int = 0


class ChunkSource:
    """The chunks of one image, fetched on demand with read-ahead (see module doc).

    The source stays open while anyone holds it: :meth:`hold` / :meth:`release` count
    the holders (the restore that opened it, each open file); the last release stops
    the read-ahead pool, trims the cache and calls ``on_close``."""

    def __init__(
        self,
        reader: ImageReader,
        cache: ChunkCache | None,
        *,
        readahead: int = READAHEAD,
        parallel: int = PARALLEL,
        on_close: Callable[[ChunkSource], None] | None = None,
    ) -> None:
        self.reader = reader
        self._on_close = on_close
        self.cache = cache
        self.readahead = max(0, readahead)
        self.window = 2 * self.readahead + 4
        self._parallel = max(1, parallel)
        self.stats = LazyStats()
        self._lock = threading.Lock()
        self._mem: OrderedDict[bytes, bytes] = OrderedDict()
        self._inflight: dict[bytes, Future[bytes]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._holders = 1
        self._closed = False

    @property
    def where(self) -> str:
        return self.reader.repo.image_url(self.reader.manifest.name)

    # holders

    def hold(self) -> None:
        with self._lock:
            if self._closed:
                raise StorageError(f"{self.where}: the image's chunk source was closed")
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders > 0 or self._closed:
                return
            self._closed = True
            pool, self._pool = self._pool, None
            self._mem.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if self.cache is not None:
            self.cache.trim()
        if self._on_close is not None:
            self._on_close(self)

    # chunks

    def chunk(self, ref: ChunkRef) -> bytes:
        """The chunk, checked: from memory, the cache or the store (fetched once)."""
        with self._lock:
            data = self._mem.get(ref.digest)
            if data is not None:
                self._mem.move_to_end(ref.digest)
                return data
            pending = self._inflight.get(ref.digest)
            mine = pending is None
            if pending is None:
                pending = self._inflight[ref.digest] = Future()
        if not mine:
            try:
                return pending.result(timeout=WAIT_S)
            except TimeoutError:
                raise StoreUnreachable(
                    f"{self.where}: chunk {ref.hex[:16]} did not arrive within {WAIT_S:g} s"
                ) from None
        try:
            data = self._fetch(ref)
        except BaseException as exc:
            with self._lock:
                self._inflight.pop(ref.digest, None)
            pending.set_exception(exc)
            raise
        with self._lock:
            self._inflight.pop(ref.digest, None)
            if not self._closed:
                self._mem[ref.digest] = data
                while len(self._mem) > self.window:
                    self._mem.popitem(last=False)
        pending.set_result(data)
        return data

    def _fetch(self, ref: ChunkRef) -> bytes:
        cache, reader = self.cache, self.reader
        if cache is not None:
            data = cache.get(
                ref, lambda raw: reader.open_stored(ref, raw), ref.size + reader.chunks.overhead
            )
            if data is not None:
                with self._lock:
                    self.stats.from_cache += 1
                return data
        stored = reader.fetch_stored(ref)
        data = reader.open_stored(ref, stored)  # checked (decrypted), or raises
        with self._lock:
            self.stats.from_store += 1
            self.stats.bytes_from_store += len(stored)
        if cache is not None:
            cache.put(ref, stored)  # as stored: a sealed chunk stays sealed on disk
        return data

    def prefetch(self, refs: list[ChunkRef]) -> None:
        """Fetch ``refs`` in the background (those not held or in flight already)."""
        with self._lock:
            if self._closed:
                return
            todo = [r for r in refs if r.digest not in self._mem and r.digest not in self._inflight]
            if not todo:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._parallel, thread_name_prefix="ckpt-ahead")
            pool = self._pool
        for ref in todo:
            try:
                pool.submit(self._prefetch_one, ref)
            except RuntimeError:  # shut down meanwhile
                return

    def _prefetch_one(self, ref: ChunkRef) -> None:
        """A read-ahead fetch: its failure is left for the read that needs the chunk."""
        if self._closed:
            return
        with contextlib.suppress(Exception):  # raised again by the read that needs it
            self.chunk(ref)

    def open(self, name: str) -> ChunkedFile:
        """File ``name`` of the image, read through this source (closing it releases)."""
        self.hold()
        return ChunkedFile(self, name)


class ChunkedFile:
    """One file of the image as ranged reads over its chunks (the ``PageFile`` that
    ckpt/statefile/pages.py reads pages.img through)."""

    def __init__(self, source: ChunkSource, name: str) -> None:
        entry = source.reader.manifest.files.get(name)
        if entry is None:
            source.release()
            raise StorageError(f"{source.where}: the image has no file {name}")
        self.where = f"{source.where}/{name}"
        self.size = entry.size
        self._source = source
        self._refs = entry.chunks
        self._starts: list[int] = []
        pos = 0
        for ref in self._refs:
            self._starts.append(pos)
            pos += ref.size
        self._closed = False

    def pread(self, length: int, offset: int) -> bytes:
        if self._closed:
            raise StorageError(f"{self.where}: read after the file was closed")
        if offset < 0 or length < 0:
            raise StorageError(f"{self.where}: bad range {offset}+{length}")
        end = min(self.size, offset + length)
        if offset >= end:
            return b""
        index = bisect.bisect_right(self._starts, offset) - 1
        last = bisect.bisect_right(self._starts, end - 1) - 1
        self.prefetch_after(last)
        parts = []
        for i in range(index, last + 1):
            data = self._source.chunk(self._refs[i])
            lo = max(offset, self._starts[i]) - self._starts[i]
            hi = min(end, self._starts[i] + len(data)) - self._starts[i]
            parts.append(data[lo:hi])
        return b"".join(parts)

    def prefetch_after(self, index: int) -> None:
        """Read ahead the ``readahead`` chunks after chunk ``index``."""
        ahead = self._source.readahead
        if ahead:
            self._source.prefetch(list(self._refs[index + 1 : index + 1 + ahead]))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._source.release()
