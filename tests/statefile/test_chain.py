"""Image chains without a sandbox: links, the depth bound, merged pages, removal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckpt.errors import CkptError, StatefileError
from ckpt.statefile import ImageWriter, chain, clean_stale, open_image
from ckpt.statefile.format import PAGE_SIZE

SID = "sb"


def _page(tag: int) -> bytes:
    return bytes([tag]) * PAGE_SIZE


def _write(path: Path, pages: dict[int, bytes], base: Path | None = None, **meta) -> Path:
    link = chain.link_metadata(path, open_image(base)) if base else {}
    metadata = {"sandbox_id": SID, "kind": chain.PRE_DUMP, **link, **meta}
    with ImageWriter(path, metadata=metadata, force=True) as img:
        img.write_pages(sorted(pages.items()))
    return path


def test_newest_image_wins_and_every_page_is_found(tmp_path: Path) -> None:
    a = _write(tmp_path / "a", {0: _page(1), 1: _page(2), 2: _page(3), 5: _page(4)})
    b = _write(tmp_path / "b", {1: _page(9), 3: bytes(PAGE_SIZE)}, a)
    c = _write(tmp_path / "c", {2: _page(7)}, b)
    images = chain.open_chain(open_image(c), None)
    assert [i.dir for i in images] == [c, b, a]
    with chain.open_pages(images) as pages:
        assert list(pages.indices) == [0, 1, 2, 3, 5]
        assert 4 not in pages.indices and 5 in pages.indices
        got = {i: pages.read_page(i) for i in pages.indices}
    assert got == {0: _page(1), 1: _page(9), 2: _page(7), 3: bytes(PAGE_SIZE), 5: _page(4)}


def test_depth_is_checked_before_any_parent_is_opened(tmp_path: Path) -> None:
    meta = {"parent": {"image_id": "00" * 16, "path": "../nowhere"}}
    deep = _write(tmp_path / "deep", {0: _page(1)}, chain_depth=chain.MAX_CHAIN, **meta)
    with pytest.raises(StatefileError, match="over the limit"):
        chain.open_chain(open_image(deep), None)
    ok = _write(tmp_path / "ok", {0: _page(1)}, chain_depth=chain.MAX_CHAIN - 1, **meta)
    with pytest.raises(StatefileError, match="nowhere"):  # within the bound: followed
        chain.open_chain(open_image(ok), None)


def test_a_chain_at_the_limit_takes_no_further_child(tmp_path: Path) -> None:
    prev = _write(tmp_path / "i0", {0: _page(0)})
    for i in range(1, chain.MAX_CHAIN):
        prev = _write(tmp_path / f"i{i}", {0: _page(i)}, prev)
    assert len(chain.open_chain(open_image(prev), None)) == chain.MAX_CHAIN
    with pytest.raises(StatefileError, match="limit"):
        chain.link_metadata(tmp_path / "next", open_image(prev))


def test_a_replaced_parent_is_named(tmp_path: Path) -> None:
    a = _write(tmp_path / "a", {0: _page(1)})
    b = _write(tmp_path / "b", {0: _page(2)}, a)
    _write(a, {0: _page(3)})  # replaced: same sandbox, another image id
    with pytest.raises(CkptError, match=f"parent image {a} is another image"):
        chain.open_chain(open_image(b), None)


def test_replacing_a_pre_copy_image_removes_its_rounds(tmp_path: Path) -> None:
    target = tmp_path / "img"
    with ImageWriter(target, metadata={"sandbox_id": SID}) as img:
        img.write_pages([(0, _page(1))])
        assert img.temp_dir is not None
        _write(img.temp_dir / "rounds" / "r0", {0: _page(1)})
    assert (target / "rounds" / "r0" / "pages.img").exists()
    with ImageWriter(target, metadata={"sandbox_id": SID}, force=True) as img:
        img.write_pages([(0, _page(2))])
    assert sorted(os.listdir(target)) == ["checkpoint.img", "pages.img", "pages_meta.img"]
    assert sorted(os.listdir(tmp_path)) == ["img"]


def test_a_dead_pre_copys_rounds_are_swept(tmp_path: Path) -> None:
    dead = tmp_path / ".img.tmp-999999-abc"  # no such pid: its writer is gone
    _write(dead / "rounds" / "r0", {0: _page(1)})
    _write(dead / "rounds" / "r1", {0: _page(1)})
    clean_stale(tmp_path / "img")
    assert os.listdir(tmp_path) == []
