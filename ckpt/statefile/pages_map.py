"""The page map: the run layout pages.img and pages_meta.img share, where pages.img's
bytes come from (``PageFile``), and reading and checking pages_meta.img.

Every check made here on load mirrors one step of ``PageWriter``'s write (ckpt/statefile/
pages.py): the same ``StoredRun`` fields, the same ``_run_tag`` over them, the same limits.
A change to the layout is a change to this module and the writer together.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from ckpt.errors import IntegrityError, StatefileError
from ckpt.statefile import seal
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
    if sealer.cipher is not None:
        # An encrypted run: its AES-256-GCM tag (its last 16 bytes) authenticates all
        # of it under a key of this image, and readers check the run by that tag
        # (pages._fetch_run), never by this one.  So the HMAC covers the AEAD tag, not
        # the whole run a second time: SHA-256 over 224 MB was 0.17 s CPU of a
        # memory:512 checkpoint.  Images whose run HMAC covers the whole run (written
        # before) read the same, as nothing reads that tag.
        data = memoryview(data)[-seal.AEAD_TAG_SIZE :]
    return sealer.mac((image_id, fields, data))


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
