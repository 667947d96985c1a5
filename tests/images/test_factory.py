"""``ckpt.images.factory``: the writer and reader a Location gets, chosen there only."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt.images import Location, factory
from ckpt.images.store_sink import StoreImageWriter
from ckpt.images.store_source import StoreImage
from ckpt.statefile import Image, ImageWriter
from ckpt.statefile.format import PAGE_SIZE
from ckpt.storage.repository import Repository
from ckpt.storage.store import LocalStore


def _pages() -> list[tuple[int, bytes]]:
    return [(0, b"\x07" * PAGE_SIZE), (3, b"\x09" * PAGE_SIZE)]


@pytest.mark.parametrize("text", ["{tmp}/img", "file://{tmp}/img"])
def test_a_directory_gets_the_directory_writer_and_reader(tmp_path: Path, text: str) -> None:
    where = Location.parse(text.format(tmp=tmp_path))
    w = factory.writer(where, metadata={"sandbox_id": "s"})
    assert type(w) is ImageWriter
    with w as img:
        img.write_pages(_pages())
    assert (tmp_path / "img" / "checkpoint.img").is_file()
    image = factory.reader(where, None)
    assert isinstance(image, Image) and not isinstance(image, StoreImage)
    assert image.dir == tmp_path / "img"


def test_a_store_url_gets_the_store_writer(tmp_path: Path) -> None:
    """The store's writer, fed here by a repository in a local directory (the store
    client is the storage tests' to exercise); nothing is written under the cwd."""
    repo = Repository(LocalStore(tmp_path / "repo"))
    where = Location.parse("s3://bucket/prefix/img")
    w = factory.writer(where, repository=repo, sandbox_id="s", metadata={"sandbox_id": "s"})
    assert isinstance(w, StoreImageWriter)
    with w as img:
        img.write_pages(_pages())
    assert [i.name for i in repo.images()] == ["img"]
    staged = tmp_path / "staged" / "img"
    repo.open_image("img").download(staged)
    assert factory.reader(staged, None).metadata["sandbox_id"] == "s"


def test_a_store_reader_with_a_chunk_source(tmp_path: Path) -> None:
    factory.writer(Location.parse(str(tmp_path / "img"))).__enter__().__exit__(None, None, None)
    source = object()
    image = factory.reader(tmp_path / "img", None, source=source)
    assert isinstance(image, StoreImage) and image.source is source


def test_a_store_writer_needs_its_repository_and_a_reader_a_directory() -> None:
    where = Location.parse("s3://bucket/prefix/img")
    with pytest.raises(ValueError, match="needs its repository"):
        factory.writer(where)
    with pytest.raises(ValueError, match="stage"):
        factory.reader(where, None)
