"""Background page loads that meet a damaged page file: the error, once, and no pages.

The page metadata is checked when the image is opened; these cases damage pages.img
after that (while the lazy fill runs), as a disk or a concurrent writer could.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt import statefile
from ckpt.errors import IntegrityError, StatefileError
from ckpt.statefile import PAGE_SIZE
from ckpt.statefile.format import PAGES_PER_CHUNK
from ckpt.statefile.pages import LoadedPages

RUNS = 4


def _pages() -> list[tuple[int, bytes]]:
    return [(i, os.urandom(PAGE_SIZE)) for i in range(PAGES_PER_CHUNK * RUNS)]


def _held(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Hold the background fill until the returned event is set."""
    gate = threading.Event()
    original = LoadedPages._fill

    def held_fill(self: LoadedPages) -> None:
        gate.wait(120)
        original(self)

    monkeypatch.setattr(LoadedPages, "_fill", held_fill)
    return gate


def _open(img: Path, errors: list[BaseException]) -> LoadedPages:
    return statefile.open_image(img).open_pages(lazy=True, on_error=errors.append)


def _damage(img: Path, how: str) -> int:
    """Truncate pages.img inside its last run, or flip a byte in it; the run's index."""
    path = img / "pages.img"
    size = path.stat().st_size
    if how == "truncate":
        os.truncate(path, size - 100)
    else:
        with open(path, "r+b") as f:
            f.seek(size - 100)
            byte = f.read(1)
            f.seek(size - 100)
            f.write(bytes([byte[0] ^ 0x40]))
    return RUNS - 1


@pytest.mark.parametrize("how", ["truncate", "corrupt"])
def test_damage_found_by_the_fill_is_reported_once_and_hides_the_run(
    make_image, monkeypatch, how: str
) -> None:
    pages = _pages()
    img = make_image("img", b"", pages)
    gate = _held(monkeypatch)
    errors: list[BaseException] = []
    loaded = _open(img, errors)
    bad_run = _damage(img, how)
    first_bad = bad_run * PAGES_PER_CHUNK
    assert loaded.read_page(0) == pages[0][1]  # an intact run, touched first
    gate.set()
    with pytest.raises(IntegrityError, match=r"run 3 \(pages 768\.\.\)"):
        loaded.wait()
    assert len(errors) == 1 and isinstance(errors[0], IntegrityError)
    for index in (first_bad, first_bad + 5, len(pages) - 1):
        with pytest.raises(IntegrityError):
            loaded.read_page(index)  # never a page of the damaged run
    assert len(errors) == 1  # reported once, however often it is met


def test_damage_found_by_a_touch_before_the_fill_reports_it(make_image, monkeypatch) -> None:
    pages = _pages()
    img = make_image("img", b"", pages)
    gate = _held(monkeypatch)
    errors: list[BaseException] = []
    loaded = _open(img, errors)
    _damage(img, "corrupt")
    try:
        with pytest.raises(IntegrityError, match="run 3"):
            loaded.read_page(len(pages) - 1)
        assert len(errors) == 1
    finally:
        gate.set()
    with pytest.raises(IntegrityError):
        loaded.wait()
    assert len(errors) == 1


def test_an_intact_background_load_reports_nothing(make_image) -> None:
    pages = _pages()
    img = make_image("img", b"", pages)
    errors: list[BaseException] = []
    loaded = _open(img, errors)
    loaded.wait()
    assert errors == [] and loaded.done
    assert all(loaded.read_page(i) == p for i, p in pages)


def test_fill_delay_fault_slows_the_fill_but_not_a_touch(make_image, monkeypatch) -> None:
    monkeypatch.setenv("CKPT_FAULT", "pages-fill-delay:0.5")
    pages = _pages()
    img = make_image("img", b"", pages)
    loaded = statefile.open_image(img).open_pages(lazy=True)
    try:
        assert loaded.read_page(len(pages) - 1) == pages[-1][1]
        assert not loaded.done
    finally:
        loaded.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(offset=st.integers(min_value=0), bit=st.integers(min_value=0, max_value=7))
def test_any_flipped_bit_in_pages_img_is_an_error_never_other_bytes(
    make_image, tmp_path_factory, offset: int, bit: int
) -> None:
    pages = [(i, os.urandom(PAGE_SIZE)) for i in range(40)] + [
        (100 + i, bytes([i]) * PAGE_SIZE) for i in range(40)
    ]
    img = make_image(f"img{offset}-{bit}", b"", pages)
    path = img / "pages.img"
    data = bytearray(path.read_bytes())
    header = 32
    at = header + offset % (len(data) - header)
    data[at] ^= 1 << bit
    path.write_bytes(bytes(data))  # same size: only a run's tag can tell
    errors: list[BaseException] = []
    loaded = _open(img, errors)
    for index, want in pages:
        try:
            got = loaded.read_page(index)
        except StatefileError:
            continue
        assert got == want
    with pytest.raises(StatefileError):
        loaded.wait()
    assert len(errors) == 1
