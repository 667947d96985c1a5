"""Corruption, truncation, wrong keys and mismatched files are refused, never loaded."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ckpt import statefile
from ckpt.errors import IntegrityError, StatefileError
from tests.statefile.conftest import KEY, sample_pages

STREAM = os.urandom(700) + b"q" * 800


def load_everything(target: Path, key: bytes | None) -> None:
    """What a restore does: metadata, whole stream, every page (eager and lazy)."""
    image = statefile.open_image(target, key=key)
    image.read_state()
    image.open_pages(lazy=False)
    lazy = image.open_pages(lazy=True)
    for i in lazy.indices:
        lazy.read_page(i)
    lazy.wait()


def flipped_copies(src: Path, name: str, tmp: Path):
    """Yield (offset, image dir) with byte ``offset`` of ``name`` flipped, one at a time."""
    data = (src / name).read_bytes()
    work = tmp / "flip"
    shutil.copytree(src, work)
    for offset in range(len(data)):
        bad = bytearray(data)
        bad[offset] ^= 0x5A
        (work / name).write_bytes(bad)
        yield offset, work
    (work / name).write_bytes(data)


@pytest.mark.parametrize("key", [KEY, None], ids=["keyed", "crc"])
@pytest.mark.parametrize("name", ["checkpoint.img", "pages_meta.img", "pages.img"])
def test_every_flipped_byte_is_refused(make_image, tmp_path: Path, key, name: str) -> None:
    src = make_image("img", STREAM, sample_pages(), key=key, chunk_size=512)
    load_everything(src, key)  # the intact image loads
    accepted = []
    for offset, work in flipped_copies(src, name, tmp_path):
        try:
            load_everything(work, key)
        except StatefileError:
            continue
        accepted.append(offset)
    assert accepted == [], f"{name}: flipped bytes at {accepted[:10]} were accepted"


@pytest.mark.parametrize("key", [KEY, None], ids=["keyed", "crc"])
@pytest.mark.parametrize("name", ["checkpoint.img", "pages_meta.img", "pages.img"])
def test_truncation_at_every_offset_is_refused(make_image, tmp_path: Path, key, name) -> None:
    src = make_image("img", STREAM, sample_pages(), key=key, chunk_size=512)
    data = (src / name).read_bytes()
    work = tmp_path / "cut"
    shutil.copytree(src, work)
    for n in range(len(data)):
        (work / name).write_bytes(data[:n])
        with pytest.raises(StatefileError):
            load_everything(work, key)
    # One byte appended is refused too.
    (work / name).write_bytes(data + b"\0")
    with pytest.raises(StatefileError):
        load_everything(work, key)


def test_truncation_error_names_file_and_offset(make_image) -> None:
    src = make_image("img", STREAM, chunk_size=512)
    f = src / "checkpoint.img"
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.raises(IntegrityError) as exc:
        statefile.open_image(src)
    assert str(f) in str(exc.value) and "offset" in str(exc.value)


def test_wrong_key_is_refused(make_image) -> None:
    src = make_image("img", STREAM, sample_pages(), key=KEY)
    with pytest.raises(IntegrityError, match="hmac-sha256 mismatch"):
        statefile.open_image(src, key=b"another-key-of-32-bytes-length!!")


def test_signed_image_needs_the_key(make_image) -> None:
    src = make_image("img", STREAM, key=KEY)
    with pytest.raises(IntegrityError, match="--key-file"):
        statefile.open_image(src)


def test_unsigned_image_with_key_is_refused(make_image) -> None:
    src = make_image("img", STREAM)
    with pytest.raises(IntegrityError, match="not signed"):
        statefile.open_image(src, key=KEY)


def test_unverified_open_reads_signed_image_without_key(make_image) -> None:
    src = make_image("img", STREAM, sample_pages(), key=KEY)
    image = statefile.open_image_unverified(src)
    assert image.read_state() == STREAM
    assert image.open_pages().read_page(12) == sample_pages()[8][1]


def test_corrupt_last_chunk_hands_out_no_bytes_of_it(make_image) -> None:
    src = make_image("img", b"A" * 512 + b"B" * 512, key=KEY, chunk_size=512, compression="none")
    f = src / "checkpoint.img"
    data = bytearray(f.read_bytes())
    chunk1_data = 40 + 32 + 512  # header and its tag, chunk 0
    assert data[chunk1_data : chunk1_data + 512] == b"B" * 512
    data[chunk1_data + 100] ^= 1
    f.write_bytes(data)
    reader = statefile.open_image(src, key=KEY).state_reader()
    assert reader.read(512) == b"A" * 512
    with pytest.raises(IntegrityError, match="chunk 1"):
        reader.read(1)


@pytest.mark.parametrize("name", ["pages.img", "pages_meta.img"])
def test_missing_page_file(make_image, name: str) -> None:
    src = make_image("img", STREAM, sample_pages())
    (src / name).unlink()
    image = statefile.open_image(src)
    assert image.read_state() == STREAM
    with pytest.raises(StatefileError, match="missing"):
        image.open_pages()


@pytest.mark.parametrize("key", [KEY, None], ids=["keyed", "crc"])
@pytest.mark.parametrize("name", ["pages.img", "pages_meta.img", "checkpoint.img"])
def test_mismatched_file_from_another_image(make_image, key, name: str) -> None:
    # Same contents, different image: every file carries the image id.
    a = make_image("a", STREAM, sample_pages(), key=key)
    b = make_image("b", STREAM, sample_pages(), key=key)
    shutil.copy(b / name, a / name)
    with pytest.raises(IntegrityError, match=r"another image|page metadata says"):
        statefile.open_image(a, key=key).open_pages()


def test_page_file_from_signed_image_in_unsigned_one(make_image) -> None:
    a = make_image("a", STREAM, sample_pages())
    b = make_image("b", STREAM, sample_pages(), key=KEY)
    shutil.copy(b / "pages_meta.img", a / "pages_meta.img")
    with pytest.raises(IntegrityError):
        statefile.open_image(a).open_pages()


def test_lazy_load_refuses_corrupt_pages_img(make_image) -> None:
    src = make_image("img", STREAM, sample_pages(), key=KEY)
    f = src / "pages.img"
    data = bytearray(f.read_bytes())
    data[-5] ^= 0xFF  # inside the last stored run (pages 12-13)
    f.write_bytes(data)
    loaded = statefile.open_image(src, key=KEY).open_pages(lazy=True)
    with pytest.raises(IntegrityError, match="run 2"):
        loaded.read_page(13)
    with pytest.raises(IntegrityError):
        loaded.wait()
    with pytest.raises(IntegrityError):
        statefile.open_image(src, key=KEY).open_pages(lazy=False)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "bad magic"),
        (b"hello world, this is not an image at all" * 3, "bad magic"),
        (b"\x89CKPTSF\n", "truncated"),
    ],
)
def test_not_a_statefile(tmp_path: Path, content: bytes, match: str) -> None:
    f = tmp_path / "checkpoint.img"
    f.write_bytes(content)
    with pytest.raises(StatefileError, match=match):
        statefile.open_image(f)


def test_missing_and_non_image_paths(tmp_path: Path) -> None:
    with pytest.raises(StatefileError, match="no such"):
        statefile.open_image(tmp_path / "nope")
    with pytest.raises(StatefileError, match="not an image directory"):
        statefile.open_image(tmp_path)


def test_hostile_lengths_are_refused(make_image) -> None:
    # A crafted unkeyed file claiming a huge chunk is refused by the length checks.
    from ckpt.statefile.format import END_MAGIC, FOOTER

    src = make_image("img", b"x" * 100, compression="none")
    f = src / "checkpoint.img"
    data = bytearray(f.read_bytes())
    table_offset = FOOTER.unpack_from(data, len(data) - len(END_MAGIC) - 4 - FOOTER.size)[0]
    data[table_offset + 4 : table_offset + 8] = (2**31).to_bytes(4, "little")
    f.write_bytes(data)
    with pytest.raises(IntegrityError, match=r"bad lengths|footer"):
        statefile.open_image(src).read_state()
