"""Chunk compression on both cores, in order, with bounded memory.

Chunks (~1 MiB) are compressed and decompressed independently on a shared thread pool:
zstandard, hashlib and zlib release the GIL on large buffers, so two cores really work
in parallel.  At most ``max_inflight`` chunks are queued at once, so memory stays
bounded whatever the stream size.  A chunk that zstd cannot shrink is stored raw (its
frame says so), so incompressible data costs one copy, not a decompression.

The pool is a few lines of ``threading`` rather than ``concurrent.futures``: that
package brings ``logging``, ``queue`` and ``heapq`` (~10 ms of CPU) into every sandbox
process, and we need only submit, result and cancel.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import zstandard

from ckpt.errors import StatefileError
from ckpt.statefile.format import CODEC_NONE, CODEC_ZSTD

T = TypeVar("T")

_PENDING, _RUNNING, _DONE, _CANCELLED = range(4)


class Job:
    """One queued call: its result (or exception) once a worker has run it."""

    __slots__ = ("_args", "_done", "_error", "_fn", "_pool", "_result", "_state")

    def __init__(self, pool: Pool, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._pool = pool
        self._fn: Callable[..., Any] | None = fn
        self._args: tuple[Any, ...] = args
        self._state = _PENDING
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None

    def _run(self) -> None:
        fn, args = self._fn, self._args
        self._fn, self._args = None, ()
        try:
            self._result = fn(*args)  # type: ignore[misc]
        except BaseException as exc:  # handed to whoever asks for the result
            self._error = exc
        finally:
            self._state = _DONE
            self._done.set()

    def cancel(self) -> bool:
        """Drop the job if no worker has taken it yet; True if it will never run."""
        with self._pool.cond:
            if self._state != _PENDING:
                return self._state == _CANCELLED
            self._state = _CANCELLED
            with contextlib.suppress(ValueError):
                self._pool.jobs.remove(self)
        self._fn, self._args = None, ()
        self._done.set()
        return True

    def result(self) -> Any:
        """Wait for the call; return its value or raise its exception."""
        self._done.wait()
        if self._state == _CANCELLED:
            raise RuntimeError("the chunk job was cancelled")
        if self._error is not None:
            raise self._error
        return self._result


class Pool:
    """``workers`` daemon threads taking jobs from one queue in submission order."""

    def __init__(self, workers: int) -> None:
        self.jobs: deque[Job] = deque()
        self.cond = threading.Condition(threading.Lock())
        self.threads = [
            threading.Thread(target=self._work, name=f"ckpt-chunk_{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self.threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Job:
        job = Job(self, fn, args)
        with self.cond:
            self.jobs.append(job)
            self.cond.notify()
        return job

    def _work(self) -> None:
        while True:
            with self.cond:
                while not self.jobs:
                    self.cond.wait()
                job = self.jobs.popleft()
                job._state = _RUNNING
            job._run()


_pool: Pool | None = None
_pool_lock = threading.Lock()
_local = threading.local()


def workers() -> int:
    """Threads used for chunk work: one per core we may run on (at least 2)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 2
    return max(2, min(n, 8))


def pool() -> Pool:
    """The process-wide chunk pool (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = Pool(workers())
        return _pool


def _forget_pool_after_fork() -> None:
    # A forked child has none of the parent's threads: a pool inherited from the
    # parent would accept work and never run it.  The child builds its own.
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def default_inflight() -> int:
    """Chunks queued at once: enough to keep every worker busy while one is written."""
    return 2 * workers() + 1


def _compressor(level: int) -> zstandard.ZstdCompressor:
    # ZstdCompressor objects are not thread-safe: one per thread and level.
    cache: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "cctx", None)
    if cache is None:
        cache = _local.cctx = {}
    cctx = cache.get(level)
    if cctx is None:
        cctx = cache[level] = zstandard.ZstdCompressor(level=level, write_content_size=True)
    return cctx


def _decompressor() -> zstandard.ZstdDecompressor:
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = zstandard.ZstdDecompressor()
    return dctx


def compress_chunk(raw: bytes | bytearray | memoryview, codec: int, level: int) -> tuple[int, Any]:
    """Return ``(codec_used, stored)``: zstd output, or ``raw`` itself if that is smaller."""
    if codec == CODEC_ZSTD:
        out = _compressor(level).compress(raw)
        if len(out) < len(raw):
            return CODEC_ZSTD, out
    return CODEC_NONE, raw


def decompress_chunk(stored: bytes | bytearray | memoryview, codec: int, raw_len: int, where: str):
    """Undo ``compress_chunk``; the output size is checked before anything is allocated."""
    if codec == CODEC_NONE:
        if len(stored) != raw_len:
            raise StatefileError(f"{where}: raw chunk is {len(stored)} bytes, frame says {raw_len}")
        return stored
    if codec != CODEC_ZSTD:
        raise StatefileError(f"{where}: unknown chunk codec {codec}")
    try:
        size = zstandard.frame_content_size(stored)
    except zstandard.ZstdError as exc:
        raise StatefileError(f"{where}: not a zstd frame ({exc})") from exc
    if size < 0:  # frame_content_size answers -1 for a frame without one
        raise StatefileError(
            f"{where}: the zstd frame does not declare its decompressed size; ckpt's "
            f"frames do, and this one may hold at most {raw_len} bytes"
        )
    if size != raw_len:
        more = "more than" if size > raw_len else "not"
        raise StatefileError(
            f"{where}: the zstd frame declares {size} bytes, {more} the {raw_len} "
            "its table entry allows"
        )
    try:
        out = _decompressor().decompress(stored)
    except zstandard.ZstdError as exc:
        raise StatefileError(f"{where}: corrupt zstd data ({exc})") from exc
    if len(out) != raw_len:
        raise StatefileError(f"{where}: decompressed {len(out)} bytes, frame says {raw_len}")
    return out


class Ordered:
    """Submit work to the pool; take results back in submission order, bounded."""

    def __init__(self, max_inflight: int | None = None) -> None:
        self.max_inflight = max_inflight or default_inflight()
        self._queue: deque[Job] = deque()

    def submit(self, fn: Callable[..., T], *args: Any) -> list[T]:
        """Queue ``fn(*args)``; return the results that had to be taken to stay bounded."""
        self._queue.append(pool().submit(fn, *args))
        done = []
        while len(self._queue) > self.max_inflight:
            done.append(self._queue.popleft().result())
        return done

    def drain(self) -> Iterator[Any]:
        """Every remaining result, in order."""
        while self._queue:
            yield self._queue.popleft().result()

    def cancel(self) -> None:
        """Drop queued work (on error); running items finish and are discarded."""
        while self._queue:
            job = self._queue.popleft()
            if not job.cancel():
                # Aborting: the first error is already on its way up.
                with contextlib.suppress(Exception):
                    job.result()


def map_ordered(
    fn: Callable[[T], Any], items: Iterable[T], max_inflight: int | None = None
) -> Iterator[Any]:
    """``map(fn, items)`` on the pool, results in order, at most ``max_inflight`` queued.

    ``items`` is consumed lazily on the calling thread, so reading the next chunk from
    the file overlaps with decompressing the previous ones.
    """
    ordered = Ordered(max_inflight)
    try:
        for item in items:
            yield from ordered.submit(fn, item)
        yield from ordered.drain()
    finally:
        ordered.cancel()
