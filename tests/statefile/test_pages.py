"""The page file: zero pages cost nothing, runs are split and found, lazy loading."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ckpt import statefile
from ckpt.errors import StatefileError
from ckpt.statefile import PAGE_SIZE
from ckpt.statefile.format import PAGES_HEADER, PAGES_PER_CHUNK
from ckpt.statefile.pages import LoadedPages
from tests.statefile.conftest import page, sample_pages


def test_zero_pages_cost_nothing_in_pages_img(make_image) -> None:
    zero = bytes(PAGE_SIZE)
    pages = [(i, zero if i % 2 else page(i)) for i in range(600)]
    img = make_image("img", b"", pages, compression="none")
    size = (img / "pages.img").stat().st_size
    assert size == PAGES_HEADER.size + 300 * PAGE_SIZE
    only_zero = make_image("z", b"", [(i, zero) for i in range(1000)], compression="none")
    assert (only_zero / "pages.img").stat().st_size == PAGES_HEADER.size
    loaded = statefile.open_image(only_zero).open_pages()
    assert loaded.read_page(999) == zero
    assert loaded.summary.zero == 1000 and loaded.summary.zero_runs == 1


def test_long_runs_are_split_into_chunks(make_image) -> None:
    n = PAGES_PER_CHUNK * 2 + 5
    pages = [(i, os.urandom(PAGE_SIZE)) for i in range(n)]
    img = make_image("img", b"", pages)
    loaded = statefile.open_image(img).open_pages()
    assert loaded.summary.stored_runs == 3
    assert [loaded.read_page(i) for i in range(n)] == [p for _, p in pages]


def test_pages_as_memoryviews_and_bytearrays(make_image) -> None:
    buf = bytearray(os.urandom(3 * PAGE_SIZE))
    mv = memoryview(buf)
    pages = [
        (7, mv[:PAGE_SIZE]),
        (8, bytearray(mv[PAGE_SIZE : 2 * PAGE_SIZE])),
        (9, mv[-PAGE_SIZE:]),
    ]
    img = make_image("img", b"", pages)
    loaded = statefile.open_image(img).open_pages()
    assert b"".join(loaded.read_page(i) for i in (7, 8, 9)) == bytes(buf)


def test_indices_and_unknown_page(make_image) -> None:
    img = make_image("img", b"", sample_pages())
    loaded = statefile.open_image(img).open_pages()
    want = [i for i, _ in sample_pages()]
    assert list(loaded.indices) == want
    assert len(loaded.indices) == len(want)
    assert loaded.indices[-1] == 13 and loaded.indices[4] == 4
    assert 10 in loaded.indices and 7 not in loaded.indices
    with pytest.raises(StatefileError, match="page 7 is not in the image"):
        loaded.read_page(7)


def test_no_pages_written_gives_an_empty_page_file(make_image) -> None:
    img = make_image("img", b"state only")
    loaded = statefile.open_image(img).open_pages(lazy=True)
    loaded.wait()
    assert list(loaded.indices) == [] and loaded.summary.scanned == 0


def test_lazy_page_read_before_its_turn(make_image, monkeypatch) -> None:
    """A page asked for before the background fill reaches it is fetched at once."""
    n = PAGES_PER_CHUNK * 4
    pages = [(i, os.urandom(PAGE_SIZE)) for i in range(n)]
    img = make_image("img", b"", pages)
    gate = threading.Event()
    original = LoadedPages._fill

    def held_fill(self: LoadedPages) -> None:
        gate.wait(120)  # the background fill has not started yet (set in the finally)
        original(self)

    monkeypatch.setattr(LoadedPages, "_fill", held_fill)
    loaded = statefile.open_image(img).open_pages(lazy=True)
    try:
        last = n - 1
        assert loaded.read_page(last) == pages[last][1]
        assert loaded.read_page(5) == pages[5][1]
        assert not loaded.done  # only the two runs asked for are in memory
        assert sum(d is not None for d in loaded._data) == 2
    finally:
        gate.set()
    loaded.wait()
    assert loaded.done
    assert all(loaded.read_page(i) == p for i, p in pages)


def test_lazy_close_stops_fill(make_image, monkeypatch) -> None:
    pages = [(i, os.urandom(PAGE_SIZE)) for i in range(PAGES_PER_CHUNK * 3)]
    img = make_image("img", b"", pages)
    gate = threading.Event()
    original = LoadedPages._fill
    monkeypatch.setattr(LoadedPages, "_fill", lambda self: (gate.wait(120), original(self)))
    loaded = statefile.open_image(img).open_pages(lazy=True)
    loaded._closed = True  # as close() does, before the fill starts
    gate.set()
    loaded.close()
    with pytest.raises(StatefileError, match="closed before"):
        loaded.read_page(0)


def test_eager_load_has_everything_in_memory(make_image, tmp_path: Path) -> None:
    img = make_image("img", b"", sample_pages())
    loaded = statefile.open_image(img).open_pages(lazy=False)
    (img / "pages.img").unlink()  # nothing is read after an eager load
    assert loaded.done
    assert loaded.read_page(13) == sample_pages()[-1][1]
