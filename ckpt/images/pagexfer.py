"""Page transfer: the one interface between what produces an image's pages and what
keeps them, so a dump never asks where its pages go.

The unit is a :class:`PageRun`: ``npages`` consecutive pages from ``first``, either
zero (``codec`` is :data:`ZERO`, no data) or stored as one statefile run (``data`` is
their bytes compressed with ``codec``, at most ``PAGES_PER_CHUNK`` pages), exactly as
pages.img keeps it.  The runs of one image ascend and never overlap.  A run is
compressed once, where it is read, and kept as it is wherever it goes.

* :class:`ImageSink`: where one image goes while it is written.  ``ImageWriter`` (an
  image directory) and ``StoreImageWriter`` (an object store, ``store_sink.py``) are
  sinks; :class:`StreamImage` writes the same image as frames on a byte stream, which
  is how a sandbox hands a migration its pages without writing them to disk.
* :class:`PageSource`: where an image's pages come from, run by run.  An image on disk
  is one (:class:`ImageSource`); a migration's peer is the other side of a stream.

The stream (:class:`StreamImage` writes it, :func:`read_stream` reads it) is a
sequence of frames ``kind:u8 length:u32le payload``::

    STATE  state-stream bytes, in order (only an image with kernel state)
    RUN    first:u64 npages:u32 codec:i8, then the run's data
    END    JSON: image_id (hex), metadata, pages, state_bytes   (the image is whole)
    ABORT  UTF-8 reason                                         (the image is not)
    MAP    runs first:u64 count:u32 of pages that come later, out of order (a
           post-copy source's first frames, ckpt/sandbox/host/pageserver.py)

No kind is ``{`` (0x7b), so a reader that finds a JSON line where a frame should
start knows the writer failed before it began.  Every length is checked against
:data:`MAX_FRAME` before it is read.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, Protocol

from ckpt.errors import StatefileError
from ckpt.statefile.chunks import Ordered, compress_chunk
from ckpt.statefile.format import CODEC_NONE, CODEC_ZSTD, PAGE_SIZE, PAGES_PER_CHUNK
from ckpt.statefile.pages_map import ZERO_PAGE, PageSummary

ZERO = -1  # the codec of a run of zero pages, which carries no data
STATE_CHUNK = 1 << 20  # state bytes per STATE frame
MAX_FRAME = PAGES_PER_CHUNK * PAGE_SIZE + 64  # a RUN stored raw, with its head
FRAME = struct.Struct("<BI")  # kind, payload length
RUN_HEAD = struct.Struct("<QIb")  # first page, pages, codec


class PageRun(NamedTuple):
    """``npages`` pages from ``first``: zero (codec ``ZERO``, ``data`` empty), or one
    stored run (``data`` compressed with ``codec``, at most ``PAGES_PER_CHUNK`` pages)."""

    first: int
    npages: int
    codec: int
    data: bytes


class ImageSink(Protocol):
    """Where one image goes while a dump writes it; a context manager that commits on
    a clean exit and leaves nothing that looks complete otherwise."""

    image_id: bytes
    metadata: dict[str, Any]

    @property
    def state_file(self) -> Any:
        """A writable binary file for ``state.save`` (images with kernel state)."""

    def write_pages(self, pages: Iterable[tuple[int, Any]]) -> PageSummary:
        """Keep ``(index, 4096 bytes)`` pairs, ascending; zero pages only recorded."""

    def write_runs(self, runs: Iterable[PageRun]) -> PageSummary:
        """Keep runs already compressed, ascending, as they are."""

    def note_save(self, result: Any, engine: str) -> None:
        """Record a ``state.save`` result in the metadata."""

    def __enter__(self) -> Any: ...

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None: ...


class PageSource(Protocol):
    """Where an image's pages come from: every run, ascending, each as it is stored."""

    def runs(self) -> Iterator[PageRun]: ...


class ImageSource:
    """The pages of an image on disk (``statefile.Image``), run by run, each checked
    against its tag and never decompressed."""

    def __init__(self, image: Any) -> None:
        self.image = image

    def runs(self) -> Iterator[PageRun]:
        for first, npages, codec, data in self.image.iter_stored():
            yield PageRun(first, npages, codec if codec >= 0 else ZERO, bytes(data))


def runs_of(
    pages: Iterable[tuple[int, Any]], codec: int = CODEC_ZSTD, level: int = 1
) -> Iterator[PageRun]:
    """``(index, page)`` pairs, ascending, as runs: zero pages gathered into zero runs,
    the others into runs of at most ``PAGES_PER_CHUNK`` compressed on the pool, in
    order, at most ``Ordered.max_inflight`` held at once."""
    ordered = Ordered()
    run: list[bytes] = []
    first = zero_first = last = -1
    zeros = 0

    def flush() -> list[PageRun]:
        nonlocal run, zeros
        done: list[PageRun] = []
        if zeros:
            done += ordered.submit(PageRun, zero_first, zeros, ZERO, b"")
            zeros = 0
        if run:
            done += ordered.submit(_compressed, first, b"".join(run), codec, level)
            run = []
        return done

    try:
        for index, data in pages:
            if index <= last:
                raise StatefileError(f"pages must ascend: page {index} after page {last}")
            if len(data) != PAGE_SIZE:
                raise StatefileError(f"page {index} is {len(data)} bytes, not {PAGE_SIZE}")
            gap = index != last + 1
            last = index
            if data == ZERO_PAGE:
                if run or (zeros and gap):
                    yield from flush()
                if not zeros:
                    zero_first = index
                zeros += 1
                continue
            if zeros or (run and (gap or len(run) == PAGES_PER_CHUNK)):
                yield from flush()
            if not run:
                first = index
            run.append(bytes(data))
        yield from flush()
        yield from ordered.drain()
    finally:
        ordered.cancel()


def _compressed(first: int, raw: bytes, codec: int, level: int) -> PageRun:
    used, stored = compress_chunk(raw, codec, level)
    return PageRun(first, len(raw) // PAGE_SIZE, used, bytes(stored))


class Frame(enum.IntEnum):
    STATE = 1
    RUN = 2
    END = 3
    ABORT = 4
    MAP = 5


MAP_RUN = struct.Struct("<QI")  # a MAP entry: first page, pages


class PageMap(NamedTuple):
    """A MAP frame: runs ``(first, count)`` of pages this stream sends later."""

    runs: list[tuple[int, int]]


class StreamEnd(NamedTuple):
    """The END frame: the image is whole."""

    image_id: str
    metadata: dict[str, Any]
    pages: int
    state_bytes: int


class _StateOut:
    """The state stream as a file ``state.save`` writes: STATE frames of about
    ``STATE_CHUNK`` bytes."""

    def __init__(self, send: Callable[[int, bytes], None]) -> None:
        self._send = send
        self._buf = bytearray()
        self.length = 0

    def write(self, data: Any) -> int:
        n = len(data)
        self._buf += data
        self.length += n
        if len(self._buf) >= STATE_CHUNK:
            self.flush()
        return n

    def tell(self) -> int:
        return self.length

    def flush(self) -> None:
        view = memoryview(self._buf)
        for at in range(0, len(view), STATE_CHUNK):
            self._send(Frame.STATE, bytes(view[at : at + STATE_CHUNK]))
        view.release()
        self._buf = bytearray()


class StreamImage:
    """An :class:`ImageSink` that writes the image as frames through ``write`` (a
    socket's ``sendall``): nothing touches a disk.  Pages are compressed here, once,
    into the runs a receiver keeps as they are."""

    def __init__(
        self,
        write: Callable[[bytes], Any],
        *,
        metadata: dict[str, Any] | None = None,
        compression: str = "zstd",
        level: int | None = None,
    ) -> None:
        self._write = write
        self.image_id = os.urandom(16)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self._codec = CODEC_ZSTD if compression == "zstd" else CODEC_NONE
        self._level = 1 if level is None else level
        self._state = _StateOut(self._send)
        self.page_summary: PageSummary | None = None
        self.committed = False
        self.temp_dir = None  # nothing staged: pre-copy rounds never go in a stream

    def _send(self, kind: int, payload: bytes) -> None:
        self._write(FRAME.pack(kind, len(payload)) + payload)

    def __enter__(self) -> StreamImage:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort(f"{exc_type.__name__}: {exc}")

    @property
    def state_file(self) -> _StateOut:
        return self._state

    def note_save(self, result: Any, engine: str) -> None:
        self.metadata.update(
            engine=engine,
            objects=getattr(result, "objects", None),
            types=getattr(result, "types", None),
        )

    def write_stats(self, stats: dict[str, Any]) -> None:
        raise StatefileError("a streamed image keeps no stats.json: take stats from a checkpoint")

    def write_pages(self, pages: Iterable[tuple[int, Any]]) -> PageSummary:
        return self.write_runs(runs_of(pages, self._codec, self._level))

    def write_runs(self, runs: Iterable[PageRun]) -> PageSummary:
        if self.page_summary is not None:
            raise StatefileError("write_pages was already called for this image")
        self._state.flush()
        s = {"scanned": 0, "zero": 0, "stored": 0, "zero_runs": 0, "stored_runs": 0, "bytes": 0}
        for run in runs:
            self._send(Frame.RUN, RUN_HEAD.pack(run.first, run.npages, run.codec) + run.data)
            s["scanned"] += run.npages
            kind = "zero" if run.codec == ZERO else "stored"
            s[kind] += run.npages
            s[f"{kind}_runs"] += 1
            s["bytes"] += len(run.data)
        self.page_summary = PageSummary(
            scanned=s["scanned"],
            zero=s["zero"],
            stored=s["stored"],
            stored_runs=s["stored_runs"],
            zero_runs=s["zero_runs"],
            stored_bytes=s["bytes"],
            pages_img_bytes=s["bytes"],
        )
        return self.page_summary

    def commit(self) -> None:
        """Send what is buffered and the END frame: the image is whole."""
        self._state.flush()
        pages = self.page_summary.scanned if self.page_summary is not None else 0
        self._write(end_frame(self.image_id, self.metadata, pages, self._state.length))
        self.committed = True

    def abort(self, reason: str) -> None:
        """Tell the reader the image is not whole (if it still listens)."""
        with contextlib.suppress(OSError):
            self._send(Frame.ABORT, reason.encode()[:1024])


def end_frame(image_id: bytes, metadata: dict[str, Any], pages: int, state_bytes: int) -> bytes:
    """The END frame of a stream that sent ``pages`` pages and ``state_bytes`` of state."""
    end = {
        "image_id": image_id.hex(),
        "metadata": metadata,
        "pages": pages,
        "state_bytes": state_bytes,
    }
    payload = json.dumps(end, default=str).encode()
    return FRAME.pack(Frame.END, len(payload)) + payload


StreamEvent = bytes | PageRun | StreamEnd | PageMap
"""What :func:`read_stream` yields: state bytes, a page run, or the end."""


def read_stream(read_exact: Callable[[int], bytes]) -> Iterator[StreamEvent]:
    """The events of one streamed image, read through ``read_exact(n)`` (which returns
    exactly ``n`` bytes or raises); stops after END, or silently after ABORT (the
    writer's reply says why).  Every length is checked before it is read."""
    while True:
        kind, length = FRAME.unpack(read_exact(FRAME.size))
        if length > MAX_FRAME:
            raise StatefileError(f"a page stream frame of {length} bytes (at most {MAX_FRAME})")
        payload = read_exact(length)
        if kind == Frame.STATE:
            yield payload
        elif kind == Frame.RUN:
            yield _run(payload)
        elif kind == Frame.END:
            yield _end(payload)
            return
        elif kind == Frame.ABORT:
            return
        elif kind == Frame.MAP and length % MAP_RUN.size == 0:
            yield PageMap(list(MAP_RUN.iter_unpack(payload)))
        else:
            raise StatefileError(f"a page stream frame of unknown kind {kind}")


def _run(payload: bytes) -> PageRun:
    if len(payload) < RUN_HEAD.size:
        raise StatefileError("a page stream RUN frame shorter than its head")
    first, npages, codec = RUN_HEAD.unpack_from(payload)
    data = payload[RUN_HEAD.size :]
    zero = codec == ZERO and not data
    if npages < 1 or not (
        zero or (codec in (CODEC_NONE, CODEC_ZSTD) and npages <= PAGES_PER_CHUNK)
    ):
        raise StatefileError(f"a page stream run of {npages} pages with codec {codec}")
    return PageRun(first, npages, codec, data)


def _end(payload: bytes) -> StreamEnd:
    try:
        end = json.loads(payload)
        return StreamEnd(
            str(end["image_id"]), dict(end["metadata"]), int(end["pages"]), int(end["state_bytes"])
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StatefileError(f"a page stream END frame that does not parse: {exc}") from exc


__all__ = [
    "MAX_FRAME",
    "ZERO",
    "Frame",
    "ImageSink",
    "ImageSource",
    "PageMap",
    "PageRun",
    "PageSource",
    "StreamEnd",
    "StreamEvent",
    "StreamImage",
    "read_stream",
    "runs_of",
]
