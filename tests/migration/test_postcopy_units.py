"""Post-copy's pieces without processes: the PageMap and Fault messages' checks, the
push order (the working set first, each page once), and the kernel's record of the
frames touched since the last round."""

from __future__ import annotations

import pytest

from ckpt.kernel.framebits import runs_of_frames
from ckpt.migration import messages as m
from ckpt.migration.errors import FrameError
from ckpt.sandbox.host.pageserver import Remote, push_order


def _roundtrip(msg: m.Message) -> m.Message:
    return m.decode(msg.KIND, m.encode(msg))


def test_a_page_map_and_a_fault_round_trip() -> None:
    page_map = m.PageMap(runs=[(0, 3), (10, 1)], last=False)
    assert _roundtrip(page_map) == page_map
    fault = m.Fault(runs=[(7, 2)])
    assert _roundtrip(fault) == fault
    assert _roundtrip(m.Fault(runs=[])) == m.Fault(runs=[])  # the keep-alive


@pytest.mark.parametrize(
    "runs",
    [[(10, 1), (5, 1)], [(0, 3), (2, 1)], [(0, 0)], [(-1, 2)], [(1 << 40, 1)]],
    ids=["unordered", "overlapping", "empty", "negative", "past-the-address-space"],
)
def test_a_page_map_out_of_order_or_range_is_refused(runs: list[tuple[int, int]]) -> None:
    payload = m.encode(m.PageMap(runs=runs))
    with pytest.raises(FrameError):
        m.decode(m.Kind.PAGE_MAP, payload)


def test_too_many_runs_are_refused() -> None:
    runs = [(i * 2, 1) for i in range(m.MAX_MAP_RUNS + 1)]
    with pytest.raises(FrameError, match="over"):
        m.decode(m.Kind.PAGE_MAP, m.encode(m.PageMap(runs=runs)))
    with pytest.raises(FrameError, match="over"):
        m.decode(m.Kind.FAULT, m.encode(m.Fault(runs=runs[: m.MAX_FAULT_RUNS + 1])))


def test_the_push_sends_the_working_set_first_then_the_rest_each_once() -> None:
    remote = Remote(frames=[1, 2, 3, 5, 8, 9], first=[9, 4, 2, 9, 1])  # 4: not remote
    order = push_order(remote)
    assert order[:3] == [9, 2, 1]
    assert order[3:] == [3, 5, 8]
    assert sorted(order) == remote.frames


def test_frames_gather_into_runs() -> None:
    assert runs_of_frames([]) == []
    assert runs_of_frames([0, 1, 2, 5, 7, 8]) == [(0, 3), (5, 1), (7, 2)]


def test_the_kernel_records_what_it_touched_since_a_round_most_recent_first() -> None:
    from ckpt.kernel.mm import MemoryFile

    mf = MemoryFile()
    frames = [mf.alloc() for _ in range(6)]
    assert mf.take_touched() == []  # no round yet: nothing recorded
    mf.take_dirty(record=True)
    mf.write(frames[1], 0, b"x")
    mf.read(frames[4])
    mf.write(frames[2], 0, b"y")
    mf.read(frames[1])
    assert mf.take_touched() == [frames[1], frames[2], frames[4]]
    mf.read(frames[0])
    assert mf.take_touched() == []  # taken: the record stops until the next round
    mf.take_dirty()  # a checkpoint's take does not record
    mf.read(frames[0])
    assert mf.take_touched() == []


class _Remote:
    """A page source that must not be read: a whole-page write needs nothing of it."""

    def __init__(self, frames: list[int]) -> None:
        from ckpt.statefile.pages import _Indices

        self.indices = _Indices([(f, 1) for f in frames])
        self.forgotten: list[int] = []

    def read_page(self, index: int) -> bytes:
        if index in self.forgotten:
            raise AssertionError(f"page {index} was read after it was replaced whole")
        return b"o" * 4096

    def forget(self, index: int) -> None:
        self.forgotten.append(index)


def test_a_page_written_whole_is_never_fetched_and_its_source_forgets_it() -> None:
    from ckpt.kernel.mm import MemoryFile

    mf = MemoryFile()
    frames = [mf.alloc() for _ in range(3)]
    source = _Remote(frames)
    mf.restore_pages(source)  # type: ignore[arg-type]
    mf.write(frames[0], 0, b"n" * 4096)  # whole: not fetched
    mf.write(frames[1], 10, b"xy")  # partial: fetched first
    assert source.forgotten == [frames[0]]
    assert mf.read(frames[0]) == b"n" * 4096
    assert mf.read(frames[1]) == b"o" * 10 + b"xy" + b"o" * 4084
    assert mf.unfetched == 1


class _Channel:
    """The messages a source would send, in order; what the relay sends is kept."""

    def __init__(self, messages: list[m.Message]) -> None:
        import queue

        self.inbox: queue.Queue[m.Message] = queue.Queue()
        for msg in messages:
            self.inbox.put(msg)
        self.sent: list[m.Message] = []
        self.frames_received = 0

    def recv(self) -> m.Message:
        return self.inbox.get(timeout=10)

    def send(self, msg: m.Message) -> None:
        self.sent.append(msg)


def test_a_push_that_ends_with_other_counts_than_mapped_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ckpt.images import pagefeed
    from ckpt.migration.postcopy import DestRelay

    page = b"p" * 4096
    messages = [
        m.PageMap(runs=[(0, 2)], last=True),
        m.pack_pages(1, [(0, page)]),
        m.RoundEnd(round=1, pages=1),  # the map said 2
    ]
    ch = _Channel(messages)
    relay = DestRelay(ch, tmp_path, limit=1 << 20)
    relay.listen()
    relay.start(__import__("os").getpid(), 10)
    import socket

    feed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    feed.settimeout(10)
    feed.connect(str(relay.path))
    try:
        assert pagefeed.read_map(pagefeed.recv_exact(feed), 1 << 20) == [(0, 2)]
        assert relay.pages == 2
        with pytest.raises(FrameError, match="not as mapped"):
            relay.next(10)
        kinds = []
        while True:  # the run, then LOST: the sandbox hears its source is gone
            kind, _ = pagefeed.read_frame(pagefeed.recv_exact(feed))
            kinds.append(kind)
            if kind == pagefeed.Feed.LOST:
                break
        assert kinds[0] == pagefeed.Feed.RUN
    finally:
        feed.close()
        relay.close()
