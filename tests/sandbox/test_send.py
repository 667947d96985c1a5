"""The ``send`` verb inside the sandbox (``send.py``), on a stand-in host: a pre-dump
streams every page, then only what was dirtied since the image named by ``after``; a
stale ``after`` is refused before anything is sent; a send whose reader goes away
marks its pages dirty again, so the next image misses nothing.  No sandbox is started."""

from __future__ import annotations

import io
import threading
from types import SimpleNamespace

import pytest

from ckpt.errors import SandboxError
from ckpt.images.pagexfer import PageRun, StreamEnd, read_stream
from ckpt.sandbox.host import send
from ckpt.sandbox.host.remote_image import ImageSession
from ckpt.sandbox.wire.protocol import SendRequest

PAGES = 20


class Memory:
    """A memory file of ``PAGES`` distinct pages, every one dirty at first."""

    def __init__(self) -> None:
        self.refs = {i: 1 for i in range(PAGES)}
        self.dirty: set[int] = set(self.refs)

    def take_dirty(self, record: bool = False) -> list[int]:
        taken, self.dirty = sorted(self.dirty), set()
        return taken

    def dirty_count(self) -> int:
        return len(self.dirty)

    def mark_dirty(self, frames: list[int]) -> None:
        self.dirty.update(frames)

    def pages(self, frames: list[int]):  # type: ignore[no-untyped-def]
        for f in frames:
            yield f, bytes([1 + f]) * 4096


def _host() -> SimpleNamespace:
    kernel = SimpleNamespace(memory_file=Memory(), workload="kv:1")
    return SimpleNamespace(
        kernel=kernel, cond=threading.Condition(), id="s1", last_dump=None, images=ImageSession()
    )


def _pages_sent(out: bytes) -> list[int]:
    f = io.BytesIO(out)
    events = list(read_stream(f.read))
    assert isinstance(events[-1], StreamEnd)
    runs = [e for e in events if isinstance(e, PageRun)]
    return [i for r in runs for i in range(r.first, r.first + r.npages)]


def test_a_pre_dump_streams_every_page_then_only_the_dirty_ones() -> None:
    host = _host()
    out = bytearray()
    counters = send.send(host, SendRequest(), out.extend)
    assert _pages_sent(bytes(out)) == list(range(PAGES))
    assert counters["image_id"] == host.last_dump
    host.kernel.memory_file.mark_dirty([3, 4, 17])
    out = bytearray()
    again = send.send(host, SendRequest(after=counters["image_id"]), out.extend)
    assert _pages_sent(bytes(out)) == [3, 4, 17]
    assert again["pages_written"] == 3 and host.last_dump == again["image_id"]


def test_a_stale_after_is_refused_before_anything_is_sent() -> None:
    host = _host()
    first = send.send(host, SendRequest(), bytearray().extend)
    host.kernel.memory_file.mark_dirty([1])
    out = bytearray()
    with pytest.raises(SandboxError, match="not"):
        send.send(host, SendRequest(after="00" * 16), out.extend)
    assert out == b""
    assert host.last_dump == first["image_id"] and host.kernel.memory_file.dirty == {1}


def test_a_send_whose_reader_goes_away_leaves_its_pages_dirty() -> None:
    host = _host()
    first = send.send(host, SendRequest(), bytearray().extend)
    host.kernel.memory_file.mark_dirty([2, 5, 9])

    def gone(data: bytes) -> None:
        raise BrokenPipeError("the reader went away")

    with pytest.raises(BrokenPipeError):
        send.send(host, SendRequest(after=first["image_id"]), gone)
    assert host.kernel.memory_file.dirty == {2, 5, 9}
    assert host.last_dump == first["image_id"]  # a retry against it misses nothing
