"""The page transfer: a streamed image (``StreamImage`` → ``read_stream``) carries the
same runs, byte for byte, as the same pages written to an image directory, and a
reader checks every frame before it takes it."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from ckpt import statefile
from ckpt.errors import StatefileError
from ckpt.images.pagexfer import (
    MAX_FRAME,
    ZERO,
    Frame,
    ImageSource,
    PageRun,
    StreamEnd,
    StreamImage,
    read_stream,
)
from ckpt.statefile.chunks import decompress_chunk
from ckpt.statefile.format import PAGE_SIZE, PAGES_PER_CHUNK

ZERO_PAGE = bytes(PAGE_SIZE)


def _pages() -> list[tuple[int, bytes]]:
    """Runs that end every way a run can: a gap, a zero page, a full chunk."""
    pages = [(0, b"a" * PAGE_SIZE), (1, b"b" * PAGE_SIZE), (2, ZERO_PAGE), (3, ZERO_PAGE)]
    pages += [(5, ZERO_PAGE), (6, b"c" * PAGE_SIZE), (9, b"d" * PAGE_SIZE)]
    pages += [(i, bytes([1 + i % 250]) * PAGE_SIZE) for i in range(10, 10 + PAGES_PER_CHUNK + 7)]
    return pages


def _stream(pages: list[tuple[int, bytes]], state: bytes = b"", meta: dict | None = None):  # type: ignore[no-untyped-def]
    out = bytearray()
    with StreamImage(out.extend, metadata=meta or {}) as img:
        if state:
            img.state_file.write(state)
        summary = img.write_pages(iter(pages))
    return bytes(out), summary, img


def _reader(data: bytes, asked: list[int] | None = None):  # type: ignore[no-untyped-def]
    f = io.BytesIO(data)

    def read_exact(n: int) -> bytes:
        if asked is not None:
            asked.append(n)
        got = f.read(n)
        if len(got) != n:
            raise EOFError
        return got

    return read_exact


def test_a_streamed_image_has_the_runs_of_the_same_pages_in_a_directory(tmp_path: Path) -> None:
    pages = _pages()
    with statefile.ImageWriter(tmp_path / "img", sync=False) as img:
        img.write_pages(iter(pages))
    on_disk = list(ImageSource(statefile.open_image(tmp_path / "img")).runs())
    data, summary, _ = _stream(pages)
    streamed = [e for e in read_stream(_reader(data)) if isinstance(e, PageRun)]
    assert streamed == on_disk
    assert summary.scanned == len(pages) and summary.zero == 3
    assert all(r.npages <= PAGES_PER_CHUNK for r in streamed)


def test_the_runs_hold_exactly_the_pages() -> None:
    pages = _pages()
    data, _, _ = _stream(pages)
    got: dict[int, bytes] = {}
    for e in read_stream(_reader(data)):
        if not isinstance(e, PageRun):
            continue
        if e.codec == ZERO:
            got.update((e.first + i, ZERO_PAGE) for i in range(e.npages))
            continue
        raw = decompress_chunk(e.data, e.codec, e.npages * PAGE_SIZE, "test")
        got.update((e.first + i, raw[i * PAGE_SIZE : (i + 1) * PAGE_SIZE]) for i in range(e.npages))
    assert got == dict(pages)


def test_state_then_pages_then_an_end_that_counts_them() -> None:
    state = b"kernel" * 400_000  # over one STATE frame
    data, _, img = _stream(_pages()[:3], state, {"workload": "kv:1"})
    events = list(read_stream(_reader(data)))
    states = [e for e in events if isinstance(e, bytes)]
    assert b"".join(states) == state and len(states) > 1
    first_run = next(i for i, e in enumerate(events) if isinstance(e, PageRun))
    assert all(isinstance(e, bytes) for e in events[:first_run])
    end = events[-1]
    assert isinstance(end, StreamEnd)
    assert end == StreamEnd(img.image_id.hex(), {"workload": "kv:1"}, 3, len(state))


def test_a_failed_image_ends_in_abort_not_end() -> None:
    out = bytearray()
    with pytest.raises(RuntimeError), StreamImage(out.extend) as img:
        img.write_pages(iter(_pages()[:2]))
        raise RuntimeError("the dump failed")
    events = list(read_stream(_reader(bytes(out))))
    assert events and not any(isinstance(e, StreamEnd) for e in events)


def test_a_frame_over_the_limit_is_refused_before_it_is_read() -> None:
    asked: list[int] = []
    data = struct.pack("<BI", Frame.RUN, MAX_FRAME + 1) + b"x" * 64
    with pytest.raises(StatefileError, match="at most"):
        list(read_stream(_reader(data, asked)))
    assert asked == [5]  # the header only: the length was never asked for


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack("<QIb", 0, PAGES_PER_CHUNK + 1, 1) + b"x",  # a stored run too long
        struct.pack("<QIb", 0, 0, 1) + b"x",  # no pages
        struct.pack("<QIb", 0, 1, 7) + b"x",  # an unknown codec
        struct.pack("<QIb", 0, 1, ZERO) + b"x",  # zero pages with data
        b"\x00" * 5,  # shorter than a run's head
    ],
)
def test_a_run_that_cannot_be_kept_is_refused(payload: bytes) -> None:
    data = struct.pack("<BI", Frame.RUN, len(payload)) + payload
    with pytest.raises(StatefileError):
        list(read_stream(_reader(data)))


def test_an_unknown_frame_kind_is_refused() -> None:
    with pytest.raises(StatefileError, match="unknown kind"):
        list(read_stream(_reader(struct.pack("<BI", 9, 0))))
