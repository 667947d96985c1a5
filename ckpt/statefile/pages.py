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

Testing hook: ``CKPT_FAULT=pages-fill-delay:SECONDS`` makes the background fill sleep
that long before each run, so a test can see requests served while pages still load.

Why one file: the writer (``PageWriter``), the map reader and its checks
(``read_pages_meta``, ``check_page_map``) and the loader (``LoadedPages``) share one run
layout (``StoredRun``, ``_run_tag``, ``_seal_run``), and each check made on load mirrors
one step of the write; kept together, a change to the layout is one diff and the two
sides cannot drift apart.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, Protocol

from ckpt.errors import IntegrityError, StatefileError
from ckpt.statefile import seal
from ckpt.statefile.chunks import Ordered, compress_chunk, decompress_chunk, map_ordered
from ckpt.statefile.files import open_regular, read_regular
from ckpt.statefile.format import (
    CODEC_NAMES,
    FLAG_KEYED,
    FORMAT_VERSION,
    MAX_PAGES,
    MAX_PAGES_META_LEN,
    PAGE_SIZE,
    PAGES_HEADER,
    PAGES_MAGIC,
    PAGES_META_HEADER,
    PAGES_META_MAGIC,
    PAGES_PER_CHUNK,
    STORED_RUN,
    ZERO_RUN,
    tag_size,
)
from ckpt.statefile.integrity import Sealer

ZERO_PAGE = bytes(PAGE_SIZE)


@dataclass(frozen=True)
class PageSummary:
    """Totals of a page file: what was scanned, skipped as zero, and stored."""

    scanned: int = 0
    zero: int = 0
    stored: int = 0
    stored_runs: int = 0
    zero_runs: int = 0
    stored_bytes: int = 0  # bytes of run data in pages.img (after compression)
    pages_img_bytes: int = 0  # size of pages.img, header included

    @property
    def compression_ratio(self) -> float:
        """Raw bytes of stored pages per byte in pages.img (1.0 when nothing is stored)."""
        return (self.stored * PAGE_SIZE / self.stored_bytes) if self.stored_bytes else 1.0

    def as_dict(self) -> dict[str, Any]:
        # Its fields are ints: no need for asdict's recursive deep copy.
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["compression_ratio"] = round(self.compression_ratio, 3)
        return d


class StoredRun(NamedTuple):
    """One stored run: its pages, codec, place in pages.img and tag.  A named tuple,
    not a frozen dataclass: a 1 GiB image has thousands, built in C at this speed
    (the frozen dataclass's per-field setattr was a third of reading the metadata)."""

    first_page: int
    npages: int
    codec: int
    offset: int
    stored_len: int
    tag: bytes


def _run_tag(
    sealer: Sealer, image_id: bytes, first: int, npages: int, codec: int, data: Any
) -> bytes:
    fields = STORED_RUN.pack(first, npages, codec, 0, len(data))
    return sealer.mac((image_id, fields, data))


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


# -- reading ---------------------------------------------------------------------


class PageFile(Protocol):
    """Where pages.img's bytes come from: its size, ranged reads from any thread, close.
    ``where`` names it in messages."""

    where: str
    size: int

    def pread(self, length: int, offset: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer only at the end)."""

    def close(self) -> None:
        """Release the source; reads after it fail."""


class LocalPageFile:
    """pages.img in an image directory, opened once as a regular file."""

    def __init__(self, path: Path) -> None:
        self.where = str(path)
        self._fd = open_regular(path, "the page file")
        try:
            self.size = os.fstat(self._fd).st_size
        except OSError as exc:
            self.close()
            raise StatefileError(f"{path}: cannot read the page file: {exc.strerror}") from exc

    def pread(self, length: int, offset: int) -> bytes:
        fd = self._fd
        if fd < 0:
            raise StatefileError(f"{self.where}: read after the page file was closed")
        try:
            return os.pread(fd, length, offset)
        except OSError as exc:
            raise StatefileError(
                f"{self.where}: cannot read at offset {offset}: {exc.strerror}"
            ) from exc

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def open_page_file(pages: str | os.PathLike[str] | PageFile) -> PageFile:
    """``pages`` itself, or the local file at that path."""
    return LocalPageFile(Path(pages)) if isinstance(pages, str | os.PathLike) else pages


@dataclass(frozen=True)
class PagesMeta:
    """pages_meta.img, checked against its tag, pages.img's size and the image id."""

    summary: PageSummary
    runs: tuple[StoredRun, ...]
    zero_runs: tuple[tuple[int, int], ...]
    compression: str


class PageMapError(IntegrityError):
    """pages_meta.img describes pages that cannot be this image's: runs that overlap or
    are out of order, pages outside the address space, totals that do not add up."""


def _check_page_count(where: str | os.PathLike[str], scanned: int, frames: int) -> None:
    if 0 <= frames < scanned:
        raise PageMapError(
            f"{where}: records {scanned} pages, but the kernel state has only "
            f"{frames} frames; the page file is not this image's"
        )


def check_page_map(
    meta: PagesMeta, where: str | os.PathLike[str], *, limit: int = MAX_PAGES, frames: int = -1
) -> None:
    """Refuse a page map before anything is sized from it.  Restore and
    ``inspect --verify`` both call it (through ``read_pages_meta``), restore a second
    time with the bounds its kernel state declares.

    Every stored and zero run must lie in ``[0, limit)``, all of them sorted and
    disjoint; the header totals must equal the runs' sums; and with ``frames`` given
    (the frames the kernel allocated, each recorded once by a checkpoint) no more
    pages than that may be recorded, so what a restore allocates for stored pages is
    bounded by what the kernel state holds, not by what the page map claims.
    """
    s = meta.summary
    stored = sum(r.npages for r in meta.runs)
    zero = sum(n for _, n in meta.zero_runs)
    if stored != s.stored or zero != s.zero or s.scanned != stored + zero:
        raise PageMapError(
            f"{where}: totals (scanned {s.scanned}, stored {s.stored}, zero {s.zero}) "
            f"are not the sums of the runs ({stored} stored, {zero} zero)"
        )
    _check_page_count(where, s.scanned, frames)
    end = 0  # where the previous run ended: runs must start at or after it
    spans = sorted(
        [(r.first_page, r.npages, "stored") for r in meta.runs]
        + [(first, n, "zero") for first, n in meta.zero_runs]
    )
    for first, n, kind in spans:
        if n <= 0 or first < end:
            raise PageMapError(
                f"{where}: {kind} run of {n} pages at page {first} overlaps the run "
                f"before it (which ends at page {end})"
            )
        end = first + n
        if end > limit:
            raise PageMapError(
                f"{where}: {kind} run of {n} pages at page {first} lies outside the "
                f"{limit} pages of the address space"
            )


def read_pages_meta(
    meta_path: Path,
    pages_path: Path | PageFile,
    sealer: Sealer,
    image_id: bytes,
    *,
    verify: bool = True,
    limit: int = MAX_PAGES,
    frames: int = -1,
) -> PagesMeta:
    """Parse and check pages_meta.img (and pages.img's header) before trusting any of it.

    ``limit`` and ``frames`` bound the page map as ``check_page_map`` says; the run
    counts are checked against them before the runs are parsed (each run holds a page
    at least), so a restore parses no more runs than its kernel has frames.
    ``pages_path`` may be an open ``PageFile`` instead of a path; it is closed.
    """
    raw = read_regular(meta_path, "the page metadata", MAX_PAGES_META_LEN)
    raw = seal.open_map(raw, sealer.cipher, image_id, meta_path)
    if len(raw) < PAGES_META_HEADER.size or raw[:8] != PAGES_META_MAGIC:
        raise StatefileError(f"{meta_path}: not a ckpt page metadata file (bad magic at offset 0)")
    (_, version, flags, codec, nstored, meta_id, scanned, zero, stored, pages_size, nzero, _r) = (
        PAGES_META_HEADER.unpack_from(raw)
    )
    if version != FORMAT_VERSION:
        raise StatefileError(f"{meta_path}: page metadata version {version} is not supported")
    if codec not in CODEC_NAMES:
        raise StatefileError(f"{meta_path}: unknown compression id {codec} at offset 11")
    if flags & ~FLAG_KEYED:
        raise StatefileError(f"{meta_path}: unknown page metadata flags {flags:#x} at offset 10")
    tsize = tag_size(flags)
    if verify and bool(flags & FLAG_KEYED) != sealer.keyed:
        raise IntegrityError(
            f"{meta_path}: page metadata is {'' if flags & FLAG_KEYED else 'not '}signed, "
            "unlike checkpoint.img: the files do not belong together"
        )
    _check_page_count(meta_path, scanned, frames)
    if not nstored + nzero <= scanned <= min(limit, MAX_PAGES):
        raise PageMapError(
            f"{meta_path}: its header records {scanned} pages in {nstored + nzero} runs; "
            f"at most {min(limit, MAX_PAGES)} pages fit the address space"
        )
    run_size = STORED_RUN.size + tsize
    expect = PAGES_META_HEADER.size + nstored * run_size + nzero * ZERO_RUN.size + tsize
    if len(raw) != expect:
        raise IntegrityError(
            f"{meta_path}: {len(raw)} bytes, but its header (offset 0) describes {expect} "
            "(truncated or corrupt)"
        )
    if verify:
        sealer.check(
            sealer.mac((raw[:-tsize],)), raw[-tsize:], f"{meta_path}: page metadata (offset 0)"
        )
    if meta_id != image_id:
        raise IntegrityError(
            f"{meta_path}: belongs to another image (image id {meta_id.hex()} at offset 16, "
            f"checkpoint.img has {image_id.hex()})"
        )
    source = open_page_file(pages_path)
    where = source.where
    try:
        if source.size != pages_size:
            raise IntegrityError(
                f"{where}: {source.size} bytes, page metadata says {pages_size} "
                "(truncated, or from another image)"
            )
        head = source.pread(PAGES_HEADER.size, 0)
    finally:
        source.close()
    if len(head) != PAGES_HEADER.size or head[:8] != PAGES_MAGIC:
        raise StatefileError(f"{where}: not a ckpt page file (bad magic at offset 0)")
    _, version, pid = PAGES_HEADER.unpack(head)
    if pid != image_id:
        raise IntegrityError(
            f"{where}: belongs to another image (image id {pid.hex()} at offset 16)"
        )
    if head != PAGES_HEADER.pack(PAGES_MAGIC, FORMAT_VERSION, image_id):
        raise IntegrityError(f"{where}: corrupt header (version {version}, offset 8)")

    runs: list[StoredRun] = []
    pos = PAGES_META_HEADER.size
    data_pos = PAGES_HEADER.size
    n_stored_pages = 0
    for i in range(nstored):
        first, npages, rcodec, offset, slen = STORED_RUN.unpack_from(raw, pos)
        tag = raw[pos + STORED_RUN.size : pos + run_size]
        if (
            not 0 < npages <= PAGES_PER_CHUNK
            or offset != data_pos
            or not 0 < slen <= pages_size - offset
            or (runs and first < runs[-1].first_page + runs[-1].npages)
        ):
            raise IntegrityError(f"{meta_path}: stored run {i} at offset {pos} is inconsistent")
        runs.append(StoredRun(first, npages, rcodec, offset, slen, tag))
        data_pos += slen
        n_stored_pages += npages
        pos += run_size
    zero_runs: list[tuple[int, int]] = []
    n_zero_pages = 0
    for i in range(nzero):
        first, npages = ZERO_RUN.unpack_from(raw, pos)
        if npages == 0 or npages > zero or (zero_runs and first < sum(zero_runs[-1])):
            raise IntegrityError(f"{meta_path}: zero run {i} at offset {pos} is inconsistent")
        zero_runs.append((first, npages))
        n_zero_pages += npages
        pos += ZERO_RUN.size
    if data_pos != pages_size or n_stored_pages != stored or n_zero_pages != zero:
        raise IntegrityError(f"{meta_path}: run totals do not match the header totals")
    if scanned != stored + zero:
        raise IntegrityError(f"{meta_path}: scanned {scanned} != stored {stored} + zero {zero}")
    summary = PageSummary(
        scanned=scanned,
        zero=zero,
        stored=stored,
        stored_runs=nstored,
        zero_runs=nzero,
        stored_bytes=pages_size - PAGES_HEADER.size,
        pages_img_bytes=pages_size,
    )
    meta = PagesMeta(summary, tuple(runs), tuple(zero_runs), CODEC_NAMES[codec])
    check_page_map(meta, meta_path, limit=limit, frames=frames)
    return meta


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


def _fill_delay() -> float:
    """Seconds to sleep before each run of a lazy fill (``CKPT_FAULT``, tests only)."""
    name, _, value = os.environ.get("CKPT_FAULT", "").partition(":")
    if name != "pages-fill-delay":
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        return 0.0


def _fetch_run(
    source: PageFile, r: StoredRun, i: int, sealer: Sealer, image_id: bytes, verify: bool
) -> bytes:
    """Read, check and decompress stored run ``i`` from ``source`` (any thread)."""
    where = f"{source.where}: run {i} (pages {r.first_page}..) at offset {r.offset}"
    raw = source.pread(r.stored_len, r.offset)
    if len(raw) != r.stored_len:
        raise IntegrityError(f"{where}: truncated ({len(raw)} of {r.stored_len} bytes)")
    if verify:
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
            if verify:
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
        self._fill_delay = _fill_delay() if lazy else 0.0
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
