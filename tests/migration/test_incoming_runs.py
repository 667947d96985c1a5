"""The destination writes received frames as runs: a one-run frame as it came, zero
pages only recorded, anything else compressed again; the image reads back exactly the
pages that were sent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckpt import statefile
from ckpt.errors import StatefileError
from ckpt.migration import pack_pages, unpack_pages
from ckpt.migration.incoming import _runs
from ckpt.statefile.format import PAGE_SIZE

ZERO = bytes(PAGE_SIZE)


def _page(i: int) -> bytes:
    return (b"%06d" % i) * (PAGE_SIZE // 6) + bytes(PAGE_SIZE % 6)


def test_frames_become_runs_that_read_back_exactly(tmp_path: Path) -> None:
    frames = [
        pack_pages(0, [(i, _page(i)) for i in range(0, 5)]),  # one run: stored as it came
        pack_pages(0, [(i, ZERO) for i in range(5, 9)]),  # zeros: only recorded
        pack_pages(0, [(10, _page(10)), (12, ZERO), (13, _page(13))]),  # mixed runs
        pack_pages(0, [(i, os.urandom(PAGE_SIZE)) for i in range(300, 600)]),  # > 1 chunk
        pack_pages(0, [(i, ZERO) for i in range(700, 1724)]),  # a zero run over two
        pack_pages(0, [(i, ZERO) for i in range(1724, 1800)]),  # frames: one run
    ]
    sent = {i: p for f in frames for i, p in unpack_pages(f)}
    runs = [r for f in frames for r in _runs(f, unpack_pages(f))]
    assert runs[0][2:] == (frames[0].codec, frames[0].data)
    assert runs[1][2] == -1
    with statefile.ImageWriter(tmp_path / "img", metadata={"kind": "pre-dump"}) as img:
        summary = img.write_runs(iter(runs))
    assert (
        summary.scanned == len(sent) and summary.zero == 4 + 1100
    )  # page 12 shares a run with page 13
    assert summary.zero_runs == 2
    with statefile.open_image(tmp_path / "img").open_pages() as pages:
        assert sorted(pages.indices) == sorted(sent)
        for i, data in sent.items():
            assert pages.read_page(i) == data, i


def test_runs_out_of_order_are_refused(tmp_path: Path) -> None:
    stored = pack_pages(0, [(3, _page(3))])
    with (
        pytest.raises(StatefileError, match="ascend"),
        statefile.ImageWriter(tmp_path / "img") as img,
    ):
        img.write_runs(iter([(5, 1, -1, b""), (3, 1, stored.codec, stored.data)]))
    assert not (tmp_path / "img").exists()
