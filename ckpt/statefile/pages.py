"""The page file: pages.img holds non-zero pages in runs, pages_meta.img says where.

Pages arrive in ascending order.  Contiguous non-zero pages are gathered into runs of at
most ``PAGES_PER_CHUNK`` pages, each compressed on its own on the pool and written to
pages.img in order (few, large writes).  All-zero pages are only counted and listed as
zero runs: they cost nothing in pages.img.  Loading is eager (all runs on the pool) or
lazy: ``open`` returns after the metadata is read and a background thread fills runs in
order, while a page asked for earlier fetches its own run at once.

pages.img is read through a ``PageFile``: a local file (``LocalPageFile``), or any other
source of its bytes with the same three members, such as the chunks of an image in an
object store (ckpt/storage/lazy.py).  Whatever the source, every run is checked against
its tag before its pages are handed out.

A lazy load that finds a run truncated or corrupt (its tag does not match) never hands
out its pages: every later read of them raises the error, and ``on_error`` is called
once, from whichever thread found it first, so the host can stop the sandbox at once
rather than let it run on with memory it does not have.

Fault point ``pages-fill-delay`` (``ckpt/faults.py``) makes the background fill sleep
before each run, so a test can see requests served while pages still load.

This module writes pages (``PageWriter``) and loads them (``LoadedPages``,
``check_runs``, ``iter_stored``).  The run layout both sides share (``StoredRun``,
``_run_tag``), the ``PageFile`` sources and the map reader with its checks
(``read_pages_meta``, ``check_page_map``) are in ckpt/statefile/pages_map.py, whose
every check mirrors one step of the write here; their names are importable from this
module too.
"""

from __future__ import annotations

import bisect
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ckpt import faults
from ckpt.errors import IntegrityError, StatefileError
from ckpt.faults import Fault
from ckpt.statefile import seal
from ckpt.statefile.chunks import Ordered, compress_chunk, decompress_chunk, map_ordered
from ckpt.statefile.files import open_regular
from ckpt.statefile.format import (
    FLAG_KEYED,
    FORMAT_VERSION,
    PAGE_SIZE,
    PAGES_HEADER,
    PAGES_MAGIC,
    PAGES_META_HEADER,
    PAGES_META_MAGIC,
    PAGES_PER_CHUNK,
    STORED_RUN,
    ZERO_RUN,
)
from ckpt.statefile.integrity import Sealer

# the map's names are importable from here too
from ckpt.statefile.pages_map import (  # noqa: F401
    ZERO_PAGE,
    LocalPageFile,
    PageFile,
    PageMapError,
    PagesMeta,
    PageSummary,
    StoredRun,
    _check_page_count,
    _run_tag,
    check_page_map,
    open_page_file,
    read_pages_meta,
)


def _seal_run(
    sealer: Sealer,
    image_id: bytes,
    first: int,
    npages: int,
    raw: bytes,
    codec: int,
    level: int,
    index: int = 0,
) -> tuple[int, int, int, Any, bytes]:
    """Pool job: compress stored run ``index``, seal it (encrypted images), tag it."""
    used, stored = compress_chunk(raw, codec, level)
    if sealer.cipher is not None:
        stored = seal.seal_run(sealer.cipher, index, first, npages, used, stored)
    return first, npages, used, stored, _run_tag(sealer, image_id, first, npages, used, stored)


class PageWriter:
    """Writes pages.img as pages arrive and pages_meta.img when finished."""

    def __init__(
        self, pages_f: BinaryIO, sealer: Sealer, image_id: bytes, codec: int, level: int
    ) -> None:
        self._f = pages_f
        self._sealer = sealer
        self._image_id = image_id
        self._codec = codec
        self._level = level
        self._ordered = Ordered()
        self._runs: list[StoredRun] = []
        self._zero_runs: list[tuple[int, int]] = []
        self._offset = PAGES_HEADER.size
        self._scanned = self._zero = self._stored = 0
        self._stored_bytes = 0
        self._submitted = 0  # stored runs handed to the pool: the next run's index
        self.written = False
        pages_f.write(PAGES_HEADER.pack(PAGES_MAGIC, FORMAT_VERSION, image_id))

    def write_pages(self, pages: Iterable[tuple[int, Any]]) -> PageSummary:
        """Consume ``(index, 4096-byte page)`` pairs in ascending order; return totals.

        Pages stream through: a run is handed to the pool as soon as it is complete,
        and at most ``Ordered.max_inflight`` runs are held, whatever the memory size.
        """
        if self.written:
            raise StatefileError("write_pages was already called for this image")
        self.written = True
        # The pool's workers wait for the GIL each time zstd hands a run back; with the
        # default 5 ms switch interval they wait on this loop far longer than they
        # compress (memory:256 in process: 166 -> 213 MiB/s at 0.5 ms, median of 3).
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, 0.0005))
        try:
            self._write_pages(pages)
        finally:
            sys.setswitchinterval(switch)
        for done in self._ordered.drain():
            self._emit(done)
        return self.summary()

    def write_runs(self, runs: Iterable[tuple[int, int, int, bytes]]) -> PageSummary:
        """Consume runs already compressed, ascending: ``(first, npages, codec, stored)``,
        or ``(first, npages, -1, b"")`` for zero pages; return totals.  For pages that
        arrive compressed (a migration): the caller has checked each run decompresses
        to ``npages`` pages; here it is tagged and written as it is."""
        if self.written:
            raise StatefileError("write_pages was already called for this image")
        self.written = True
        end = 0
        for first, npages, codec, stored in runs:
            if first < end or npages < 1 or (codec >= 0 and npages > PAGES_PER_CHUNK):
                raise StatefileError(
                    f"page runs must ascend, stored ones of 1..{PAGES_PER_CHUNK} pages"
                )
            end = first + npages
            self._scanned += npages
            if codec < 0:
                last = self._zero_runs[-1] if self._zero_runs else None
                if last is not None and last[0] + last[1] == first:
                    self._zero_runs[-1] = (last[0], last[1] + npages)
                else:
                    self._zero_runs.append((first, npages))
                self._zero += npages
                continue
            self._stored += npages
            if self._sealer.cipher is not None:
                stored = seal.seal_run(
                    self._sealer.cipher, len(self._runs), first, npages, codec, stored
                )
            tag = _run_tag(self._sealer, self._image_id, first, npages, codec, stored)
            self._emit((first, npages, codec, stored, tag))
        return self.summary()

    def _write_pages(self, pages: Iterable[tuple[int, Any]]) -> None:
        zero_page = ZERO_PAGE
        zero_runs = self._zero_runs
        run: list[Any] = []
        run_first = run_next = -1
        zero_first = zero_n = 0
        last = -1
        zero = stored = 0
        try:
            for index, data in pages:
                if index <= last:
                    raise StatefileError(
                        f"pages must come in ascending order: page {index} after page {last}"
                    )
                if len(data) != PAGE_SIZE:
                    raise StatefileError(f"page {index} is {len(data)} bytes, not {PAGE_SIZE}")
                last = index
                if type(data) is not bytes:
                    data = bytes(data)  # the caller may reuse its buffer
                if data == zero_page:
                    if zero_n and zero_first + zero_n == index:
                        zero_n += 1
                    else:
                        if zero_n:
                            zero_runs.append((zero_first, zero_n))
                        zero_first, zero_n = index, 1
                    zero += 1
                    continue
                if run and (index != run_next or len(run) == PAGES_PER_CHUNK):
                    self._submit(run_first, b"".join(run))
                    run = []
                if not run:
                    run_first = index
                run.append(data)
                run_next = index + 1
                stored += 1
            if run:
                self._submit(run_first, b"".join(run))
            if zero_n:
                zero_runs.append((zero_first, zero_n))
        finally:
            self._zero += zero
            self._stored += stored
            self._scanned += zero + stored

    def _submit(self, first: int, raw: bytes) -> None:
        npages = len(raw) // PAGE_SIZE
        index, self._submitted = self._submitted, self._submitted + 1
        for done in self._ordered.submit(
            _seal_run,
            self._sealer,
            self._image_id,
            first,
            npages,
            raw,
            self._codec,
            self._level,
            index,
        ):
            self._emit(done)

    def _emit(self, done: tuple[int, int, int, Any, bytes]) -> None:
        first, npages, codec, stored, tag = done
        self._f.write(stored)
        self._runs.append(StoredRun(first, npages, codec, self._offset, len(stored), tag))
        self._offset += len(stored)
        self._stored_bytes += len(stored)

    def summary(self) -> PageSummary:
        return PageSummary(
            scanned=self._scanned,
            zero=self._zero,
            stored=self._stored,
            stored_runs=len(self._runs),
            zero_runs=len(self._zero_runs),
            stored_bytes=self._stored_bytes,
            pages_img_bytes=self._offset,
        )

    def abort(self) -> None:
        self._ordered.cancel()

    def meta_bytes(self) -> bytes:
        """The whole pages_meta.img content (written by the image on commit)."""
        s = self._sealer
        flags = FLAG_KEYED if s.keyed else 0
        parts = [
            PAGES_META_HEADER.pack(
                PAGES_META_MAGIC,
                FORMAT_VERSION,
                flags,
                self._codec,
                len(self._runs),
                self._image_id,
                self._scanned,
                self._zero,
                self._stored,
                self._offset,
                len(self._zero_runs),
                0,
            )
        ]
        for r in self._runs:
            parts.append(STORED_RUN.pack(r.first_page, r.npages, r.codec, r.offset, r.stored_len))
            parts.append(r.tag)
        for first, n in self._zero_runs:
            parts.append(ZERO_RUN.pack(first, n))
        body = b"".join(parts)
        if s.cipher is not None:
            return seal.seal_map(s.cipher, body + s.mac((body,)))
        return body + s.mac((body,))


# -- loading ---------------------------------------------------------------------


class _Indices(Sequence[int]):
    """Every recorded page index (stored and zero), ascending, without a list per page."""

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self._starts = [s for s, _ in ranges]
        self._cum = [0]
        for _, n in ranges:
            self._cum.append(self._cum[-1] + n)

    def __len__(self) -> int:
        return self._cum[-1]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        r = bisect.bisect_right(self._cum, i) - 1
        return self._starts[r] + (i - self._cum[r])

    def __iter__(self) -> Any:
        for s, a, b in zip(self._starts, self._cum, self._cum[1:], strict=False):
            yield from range(s, s + (b - a))

    def ranges(self) -> Iterator[tuple[int, int]]:
        """(first page, count) for each run of recorded pages, ascending."""
        for s, a, b in zip(self._starts, self._cum, self._cum[1:], strict=False):
            yield s, b - a

    def __contains__(self, page: object) -> bool:
        if not isinstance(page, int):
            return False
        r = bisect.bisect_right(self._starts, page) - 1
        return r >= 0 and page < self._starts[r] + (self._cum[r + 1] - self._cum[r])


def _fetch_run(
    source: PageFile, r: StoredRun, i: int, sealer: Sealer, image_id: bytes, verify: bool
) -> bytes:
    """Read, check and decompress stored run ``i`` from ``source`` (any thread)."""
    where = f"{source.where}: run {i} (pages {r.first_page}..) at offset {r.offset}"
    raw = source.pread(r.stored_len, r.offset)
    if len(raw) != r.stored_len:
        raise IntegrityError(f"{where}: truncated ({len(raw)} of {r.stored_len} bytes)")
    if verify and sealer.cipher is None:
        # An encrypted run's AEAD tag (open_run) binds what its HMAC tag does (image
        # id, place, pages, codec, length) under a key of this image, and the map that
        # lists the runs is sealed: a second pass over the run for its HMAC cost 180 ms
        # of 1.0 s CPU restoring memory:512, for nothing.  The writer's HMAC covers
        # that AEAD tag only (pages_map._run_tag); older images' cover the whole run.
        expected = _run_tag(sealer, image_id, r.first_page, r.npages, r.codec, raw)
        sealer.check(expected, r.tag, where)
    if sealer.cipher is not None:
        raw = seal.open_run(sealer.cipher, i, r.first_page, r.npages, r.codec, raw, where)
    data = decompress_chunk(raw, r.codec, r.npages * PAGE_SIZE, where)
    return bytes(data)


def check_runs(
    meta: PagesMeta,
    pages_path: Path | PageFile,
    sealer: Sealer,
    image_id: bytes,
    *,
    verify: bool = True,
) -> int:
    """Read, check and decompress every stored run, keeping none of them: what
    ``inspect --verify`` does, in memory bounded by the runs in flight whatever the
    page map claims.  Returns the pages checked."""
    source = open_page_file(pages_path)
    try:
        jobs = enumerate(meta.runs)
        for _ in map_ordered(
            lambda job: _fetch_run(source, job[1], job[0], sealer, image_id, verify), jobs
        ):
            pass
    finally:
        source.close()
    return meta.summary.stored


def iter_stored(
    meta: PagesMeta, pages_path: Path, sealer: Sealer, image_id: bytes, *, verify: bool = True
) -> Iterator[tuple[int, int, int, bytes]]:
    """Every run as recorded, ascending: ``(first, npages, codec, stored bytes)``, each
    stored run checked against its tag but not decompressed, each zero run as
    ``(first, npages, -1, b"")``: for sending an image's pages on as they are."""
    stored = [(r.first_page, r.npages, i) for i, r in enumerate(meta.runs)]
    zeros = [(first, npages, -1) for first, npages in meta.zero_runs]
    fd = open_regular(pages_path, "the page file")
    try:
        for first, npages, i in sorted(stored + zeros):
            if i < 0:
                yield first, npages, -1, b""
                continue
            r = meta.runs[i]
            where = f"{pages_path}: run {i} (pages {first}..) at offset {r.offset}"
            raw = os.pread(fd, r.stored_len, r.offset)
            if len(raw) != r.stored_len:
                raise IntegrityError(f"{where}: truncated ({len(raw)} of {r.stored_len} bytes)")
            if verify and sealer.cipher is None:  # encrypted: its AEAD tag, as _fetch_run
                sealer.check(_run_tag(sealer, image_id, first, npages, r.codec, raw), r.tag, where)
            if sealer.cipher is not None:
                raw = seal.open_run(sealer.cipher, i, first, npages, r.codec, raw, where)
            yield first, npages, r.codec, raw
    finally:
        os.close(fd)


class LoadedPages:
    """The pages of an image, loaded eagerly or filled lazily in the background."""

    def __init__(
        self,
        meta: PagesMeta,
        pages_path: Path | PageFile,
        sealer: Sealer,
        image_id: bytes,
        *,
        lazy: bool,
        verify: bool = True,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.summary = meta.summary
        self._on_error = on_error
        self._error_lock = threading.Lock()
        self._fill_delay = faults.delay(Fault.PAGES_FILL_DELAY) if lazy else 0.0
        self.lazy = lazy
        self._meta = meta
        self._sealer = sealer
        self._image_id = image_id
        self._verify = verify
        runs = meta.runs
        self._starts = [r.first_page for r in runs]
        self._zero_starts = [z[0] for z in meta.zero_runs]
        self._data: list[bytes | None] = [None] * len(runs)
        self._locks = [threading.Lock() for _ in runs]
        self._error: BaseException | None = None
        self._closed = False
        ranges = sorted([(r.first_page, r.npages) for r in runs] + list(meta.zero_runs))
        self.indices: Sequence[int] = _Indices(ranges)
        self._source: PageFile | None = open_page_file(pages_path)
        self._where = self._source.where
        self._thread: threading.Thread | None = None
        if not runs:
            self._close_fd()
        elif lazy:
            self._thread = threading.Thread(target=self._fill, name="ckpt-pages", daemon=True)
            self._thread.start()
        else:
            try:
                for i, data in enumerate(map_ordered(self._fetch, range(len(runs)))):
                    self._data[i] = data
            finally:
                self._close_fd()

    def _fetch(self, i: int) -> bytes:
        """Read, check and decompress stored run ``i`` (any thread)."""
        source = self._source
        if source is None:
            raise StatefileError(f"{self._where}: pages were closed before run {i} was loaded")
        return _fetch_run(source, self._meta.runs[i], i, self._sealer, self._image_id, self._verify)

    def _load(self, i: int) -> bytes:
        data = self._data[i]
        if data is not None:
            return data
        with self._locks[i]:
            data = self._data[i]
            if data is None:
                if self._error is not None:
                    raise self._error
                try:
                    data = self._data[i] = self._fetch(i)
                except BaseException as exc:
                    self._fail(exc)
                    raise
            return data

    def _fail(self, exc: BaseException) -> None:
        """Remember the first failure and tell ``on_error`` about it, once."""
        with self._error_lock:
            if self._error is not None:
                return
            self._error = exc
        if self._on_error is not None:
            self._on_error(exc)

    def _fill(self) -> None:
        try:
            for i in range(len(self._data)):
                if self._closed:
                    return
                if self._fill_delay and self._data[i] is None:
                    time.sleep(self._fill_delay)
                self._load(i)
        except BaseException as exc:
            self._fail(exc)
        finally:
            self._close_fd()

    def _close_fd(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            source.close()

    def _stored(self, index: int) -> tuple[int, int] | None:
        """(run, byte offset in it) of stored page ``index``, or None if no run holds it;
        raises the background load's error for a run it could not load."""
        r = bisect.bisect_right(self._starts, index) - 1
        if r >= 0:
            run = self._meta.runs[r]
            if index < run.first_page + run.npages:
                if self._data[r] is None and self._error is not None:
                    raise self._error
                return r, (index - run.first_page) * PAGE_SIZE
        return None

    def _zero(self, index: int) -> bytes:
        """Zeros for a page in a zero run; any other page is not in the image."""
        z = bisect.bisect_right(self._zero_starts, index) - 1
        if z >= 0:
            first, n = self._meta.zero_runs[z]
            if index < first + n:
                return ZERO_PAGE
        raise StatefileError(f"page {index} is not in the image")

    def read_page(self, index: int) -> bytes:
        """The 4096 bytes of page ``index``; zeros for a zero page.  Fetched now if lazy."""
        at = self._stored(index)
        if at is None:
            return self._zero(index)
        r, off = at
        return self._load(r)[off : off + PAGE_SIZE]

    def read_page_view(self, index: int) -> memoryview | bytes:
        """Page ``index`` as a read-only view into its loaded run (no copy), or zeros."""
        at = self._stored(index)
        if at is None:
            return self._zero(index)
        r, off = at
        return memoryview(self._load(r))[off : off + PAGE_SIZE]

    def stored_runs(self) -> Iterator[tuple[int, bytes]]:
        """Each stored run as (first page, its raw pages), in order (loaded if needed):
        the exact data the checkpoint compressed, for comparing with a plain codec."""
        for i, run in enumerate(self._meta.runs):
            yield run.first_page, self._load(i)

    def wait(self) -> None:
        """Block until every page is loaded; raise the background fill's error, if any."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error

    @property
    def done(self) -> bool:
        """Whether every stored run is in memory."""
        return all(d is not None for d in self._data)

    def close(self) -> None:
        """Stop a lazy fill early (pages not yet loaded become unreadable)."""
        self._closed = True
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> LoadedPages:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
