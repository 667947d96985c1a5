"""The post-copy page feed (ckpt/images/pagefeed.py) against a fake relay on a socket
pair: a page comes once and is handed out once; a page read before it came is asked
for and waited for; a feed that ends short fails every read with how many pages never
came, and tells the host once; the map is checked before anything is sized from it."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from ckpt.errors import StatefileError
from ckpt.images import pagefeed
from ckpt.images.pagefeed import RUN_REF, Feed, PagesLost, RemotePages, WithRemote, frame
from ckpt.images.pagexfer import RUN_HEAD, ZERO
from ckpt.statefile.format import CODEC_NONE

PAGE = 4096


def _page(i: int) -> bytes:
    return (b"%08d" % i) * (PAGE // 8)


def _run_frame(first: int, count: int) -> bytes:
    raw = b"".join(_page(i) for i in range(first, first + count))
    return frame(Feed.RUN, RUN_HEAD.pack(first, count, CODEC_NONE) + raw)


def _read_frame(sock: socket.socket) -> tuple[int, bytes]:
    return pagefeed.read_frame(pagefeed.recv_exact(sock))


@pytest.fixture
def pair():  # type: ignore[no-untyped-def]
    a, b = socket.socketpair()
    b.settimeout(10)
    yield a, b
    a.close()
    b.close()


def _remote(sock: socket.socket, runs: list[tuple[int, int]], **kw) -> RemotePages:  # type: ignore[no-untyped-def]
    remote = RemotePages(sock, runs, **kw)
    remote.start()
    return remote


def test_pushed_pages_are_handed_out_and_held_is_said_once_all_came(pair) -> None:  # type: ignore[no-untyped-def]
    mine, relay = pair
    remote = _remote(mine, [(10, 4), (20, 2)])
    relay.sendall(_run_frame(10, 4) + _run_frame(20, 2))
    assert _read_frame(relay) == (Feed.HELD, b"")
    assert remote.done and remote.faulted == 0 and remote.arrived == 6
    assert bytes(remote.read_page_view(11)) == _page(11)
    assert remote.read_page(21) == _page(21)


def test_a_page_read_before_it_came_is_asked_for_and_waited_for(pair) -> None:  # type: ignore[no-untyped-def]
    mine, relay = pair
    remote = _remote(mine, [(0, 100)])
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(remote.read_page(42)))
    reader.start()
    kind, payload = _read_frame(relay)
    assert kind == Feed.WANT
    first, count = RUN_REF.unpack(payload)
    assert first == 42 and 1 <= count <= pagefeed.WANT_AHEAD
    assert not got  # it waits for the page
    relay.sendall(_run_frame(42, 1))
    reader.join(10)
    assert got == [_page(42)] and remote.faulted == 1 and not remote.done


def test_a_page_asked_for_and_pushed_too_counts_once(pair) -> None:  # type: ignore[no-untyped-def]
    mine, relay = pair
    remote = _remote(mine, [(0, 2)])
    relay.sendall(_run_frame(0, 1) + _run_frame(0, 2))
    assert _read_frame(relay) == (Feed.HELD, b"")
    assert remote.arrived == 2 and remote.missing == 0


def test_zero_runs_give_zero_pages(pair) -> None:  # type: ignore[no-untyped-def]
    mine, relay = pair
    remote = _remote(mine, [(5, 3)])
    relay.sendall(frame(Feed.RUN, RUN_HEAD.pack(5, 3, ZERO)))
    assert _read_frame(relay) == (Feed.HELD, b"")
    assert remote.read_page(6) == bytes(PAGE)


@pytest.mark.parametrize("ending", ["lost", "end", "close"])
def test_a_feed_that_ends_short_fails_reads_and_tells_the_host_once(pair, ending) -> None:  # type: ignore[no-untyped-def]
    mine, relay = pair
    told: list[BaseException] = []
    remote = _remote(mine, [(0, 10)], on_error=told.append)
    relay.sendall(_run_frame(0, 3))
    deadline = time.monotonic() + 10
    while remote.arrived < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    if ending == "lost":
        relay.sendall(frame(Feed.LOST, b"the channel broke"))
    elif ending == "end":
        relay.sendall(frame(Feed.END))
    else:
        relay.shutdown(socket.SHUT_RDWR)
    with pytest.raises(PagesLost, match="7 of 10 pages never arrived"):
        remote.read_page(5)
    with pytest.raises(PagesLost):
        remote.read_page(6)
    assert remote.read_page(1) == _page(1)  # what came is still good
    assert len(told) == 1 and isinstance(told[0], PagesLost)


def test_a_page_that_never_comes_fails_after_the_wait(pair) -> None:  # type: ignore[no-untyped-def]
    mine, _relay = pair
    remote = _remote(mine, [(0, 2)], wait_s=0.2)
    with pytest.raises(PagesLost, match="did not arrive within"):
        remote.read_page(0)


def test_a_page_not_in_the_map_is_refused(pair) -> None:  # type: ignore[no-untyped-def]
    mine, _relay = pair
    remote = _remote(mine, [(4, 2)])
    with pytest.raises(StatefileError, match="not a remote page"):
        remote.read_page(3)


@pytest.mark.parametrize(
    "runs",
    [[(10, 2), (5, 1)], [(0, 2), (1, 1)], [(0, 0)], [(90, 20)], [(0, 60), (60, 41)]],
    ids=["unordered", "overlapping", "empty", "past-limit", "over-total"],
)
def test_a_bad_map_is_refused_before_use(runs) -> None:  # type: ignore[no-untyped-def]
    data = b"".join(pagefeed.map_frames(runs))
    view = memoryview(data)
    at = [0]

    def read(n: int) -> bytes:
        out = bytes(view[at[0] : at[0] + n])
        at[0] += n
        return out

    with pytest.raises(StatefileError, match="out of order or range"):
        pagefeed.read_map(read, 100)


def test_a_good_map_reads_back() -> None:
    runs = [(i * 3, 2) for i in range(pagefeed.MAP_RUNS_PER_FRAME + 5)]  # two MAP frames
    data = b"".join(pagefeed.map_frames(runs))
    r, w = os.pipe()
    try:
        with os.fdopen(w, "wb") as out:
            threading.Thread(target=lambda: (out.write(data), out.close())).start()
            with os.fdopen(r, "rb") as f:
                got = pagefeed.read_map(lambda n: f.read(n), 1 << 20)
    finally:
        pass
    assert got == runs


class _Image:
    """Image pages for every frame below 8: each page's bytes name the image."""

    def __init__(self) -> None:
        from ckpt.statefile.pages import _Indices

        self.indices = _Indices([(0, 8)])
        self.done = True

    def read_page(self, index: int) -> bytes:
        return b"I" * PAGE

    def close(self) -> None:
        pass


def test_with_remote_takes_remote_frames_from_the_feed_and_the_rest_from_the_image(pair) -> None:  # type: ignore[no-untyped-def]
    mine, relay = pair
    remote = _remote(mine, [(2, 2), (10, 1)])
    pages = WithRemote(remote, _Image())
    assert list(pages.indices.ranges()) == [(0, 8), (10, 1)]
    relay.sendall(_run_frame(2, 2) + _run_frame(10, 1))
    assert _read_frame(relay) == (Feed.HELD, b"")
    assert pages.read_page(1) == b"I" * PAGE
    assert pages.read_page(3) == _page(3)
    assert bytes(pages.read_page_view(10)) == _page(10)
    assert pages.done


def test_a_page_replaced_whole_before_it_came_is_not_kept(pair) -> None:  # type: ignore[no-untyped-def]
    mine, relay = pair
    remote = _remote(mine, [(0, 3)])
    remote.forget(1)  # overwritten before it came
    relay.sendall(_run_frame(0, 2))
    deadline = time.monotonic() + 10
    while remote.arrived < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    remote.forget(0)  # overwritten after it came
    assert remote._pages == {}  # neither is held
    relay.sendall(_run_frame(2, 1))
    assert _read_frame(relay) == (Feed.HELD, b"")  # both still count as arrived
