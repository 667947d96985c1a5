"""Post-copy's reconnect without processes: the destination's relay waits out a cut
channel once committed and takes the source's next one, telling it which pages it
still lacks and asking again for those its sandbox waits on; the source's side
retries until a deadline and stops at a refusal; the sandbox resends only the pages
named to it."""

from __future__ import annotations

import os
import queue
import socket
import threading
import time

import pytest

from ckpt.images import pagefeed
from ckpt.migration import messages as m
from ckpt.migration.errors import MigrationError, PeerClosed, PeerError
from ckpt.migration.postcopy import DestRelay
from ckpt.migration.reconnect import Resumable, rejoin

PAGE = b"p" * 4096
NONCE = b"n" * 32
CUT = object()  # a fake channel's recv raises here: the link broke


class _Channel:
    """Feeds ``messages`` to the relay (``CUT``: a broken link); keeps what it sends."""

    def __init__(self, messages: list[object]) -> None:
        self.inbox: queue.Queue[object] = queue.Queue()
        for msg in messages:
            self.inbox.put(msg)
        self.sent: list[m.Message] = []
        self.closed = threading.Event()
        self.frames_received = 0

    def recv(self) -> m.Message:
        while not self.closed.is_set():
            try:
                msg = self.inbox.get(timeout=0.05)
            except queue.Empty:
                continue
            if msg is CUT:
                raise PeerClosed("the link broke")
            return msg  # type: ignore[return-value]
        raise PeerClosed("closed")

    def send(self, msg: m.Message) -> None:
        if self.closed.is_set():
            raise PeerClosed("closed")
        self.sent.append(msg)

    def send_error(self, code: int, text: str, linger: float = 0.0) -> None:
        self.sent.append(m.Error(int(code), text))
        self.close()

    def close(self) -> None:
        self.closed.set()


def _relay(tmp_path, messages, resume_s=10.0):  # type: ignore[no-untyped-def]
    ch = _Channel(messages)
    relay = DestRelay(ch, tmp_path, limit=1 << 20, nonce=NONCE, resume_s=resume_s)
    relay.listen()
    relay.start(os.getpid(), 10)
    feed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    feed.settimeout(10)
    feed.connect(str(relay.path))
    read = pagefeed.recv_exact(feed)
    assert pagefeed.read_map(read, 1 << 20) == relay.runs
    return ch, relay, feed, read


def _frames(read, until: int) -> list[tuple[int, bytes]]:  # type: ignore[no-untyped-def]
    out = []
    while True:
        kind, payload = pagefeed.read_frame(read)
        out.append((kind, payload))
        if kind == until:
            return out


def _arrived(frames: list[tuple[int, bytes]]) -> list[int]:
    from ckpt.images.pagexfer import _run

    pages = []
    for kind, payload in frames:
        if kind == pagefeed.Feed.RUN:
            run = _run(payload)
            pages += range(run.first, run.first + run.npages)
    return pages


def _wait(pred, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 10
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_committed_relay_resumes_on_the_next_channel_with_what_it_lacks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    first = [
        m.PageMap(runs=[(0, 4), (10, 2)], last=True),
        m.pack_pages(1, [(0, PAGE), (1, PAGE)]),
        m.Done(frames=3),
    ]
    ch, relay, feed, read = _relay(tmp_path, first)
    try:
        assert isinstance(relay.next(10), m.Done)
        assert relay.committed
        feed.sendall(pagefeed.frame(pagefeed.Feed.WANT, pagefeed.RUN_REF.pack(11, 1)))
        _wait(lambda: m.Fault(runs=[(11, 1)]) in ch.sent, "the Fault on the first channel")
        ch.inbox.put(CUT)
        second = _Channel([])
        with pytest.raises(MigrationError, match="nonce"):
            relay.resume(second, b"x" * 32)
        relay.resume(second, NONCE)
        assert ch.closed.is_set()  # the broken one is let go
        _wait(lambda: relay.ch is second, "the relay to take the new channel")
        assert second.sent[0] == m.PageMap(runs=[(2, 2), (10, 2)], last=True)
        assert m.Fault(runs=[(11, 1)]) in second.sent  # the sandbox still waits on it
        for msg in (
            m.pack_pages(1, [(11, PAGE)]),
            m.pack_pages(1, [(2, PAGE), (3, PAGE), (10, PAGE)]),
            m.RoundEnd(round=1, pages=4),
        ):
            second.inbox.put(msg)
        got = _frames(read, pagefeed.Feed.END)
        assert sorted(_arrived(got)) == [0, 1, 2, 3, 10, 11]
        assert relay.missing() == [] and relay.reconnects == 1
        feed.sendall(pagefeed.frame(pagefeed.Feed.HELD))
        relay.wait_held(10)
        relay.send_last(lambda now: m.Ack(seq=7), 1)
        assert second.sent[-1] == m.Ack(seq=7)
    finally:
        feed.close()
        relay.close()


def test_a_relay_not_committed_refuses_a_resume_and_fails_at_a_cut(tmp_path) -> None:  # type: ignore[no-untyped-def]
    _ch, relay, feed, read = _relay(tmp_path, [m.PageMap(runs=[(0, 2)], last=True), CUT])
    try:
        with pytest.raises(MigrationError, match="window"):
            relay.resume(_Channel([]), NONCE)
        with pytest.raises(PeerClosed):
            relay.next(10)
        assert _frames(read, pagefeed.Feed.LOST)[-1][0] == pagefeed.Feed.LOST
    finally:
        feed.close()
        relay.close()


def test_a_source_that_does_not_come_back_in_time_loses_the_pages(tmp_path) -> None:  # type: ignore[no-untyped-def]
    messages = [m.PageMap(runs=[(0, 2)], last=True), m.Done(frames=1), CUT]
    _ch, relay, feed, read = _relay(tmp_path, messages, resume_s=0.3)
    try:
        assert isinstance(relay.next(10), m.Done)
        _kind, payload = _frames(read, pagefeed.Feed.LOST)[-1]
        assert b"did not come back within 0.3 s" in payload
        with pytest.raises(MigrationError, match="did not come back"):
            relay.wait_held(10)
    finally:
        feed.close()
        relay.close()


def test_a_resume_for_no_waiting_migration_is_refused() -> None:
    resumable = Resumable()
    ch = _Channel([])
    with pytest.raises(MigrationError, match="no migration of kv-1"):
        resumable.take(ch, m.Resume(sandbox_id="kv-1", nonce=NONCE))
    assert isinstance(ch.sent[-1], m.Error) and ch.closed.is_set()


def test_a_resume_message_round_trips_and_is_checked() -> None:
    msg = m.Resume(sandbox_id="kv-1", nonce=NONCE)
    assert m.decode(m.Kind.RESUME, m.encode(msg)) == msg
    from ckpt.migration.errors import FrameError

    with pytest.raises(FrameError, match="nonce"):
        m.decode(m.Kind.RESUME, m.encode(m.Resume(sandbox_id="kv-1", nonce=b"n" * 65)))
    with pytest.raises(FrameError, match="ID"):
        m.decode(m.Kind.RESUME, m.encode(m.Resume(sandbox_id="a\nb", nonce=NONCE)))


class _Answer(_Channel):
    """A destination's answer to ``Resume``: its map, or an error."""

    def __init__(self, reply: list[object]) -> None:
        super().__init__(reply)

    def recv(self) -> m.Message:
        msg = super().recv()
        if isinstance(msg, m.Error):
            raise PeerError(msg.code, msg.message)
        return msg


def test_the_source_retries_until_it_reaches_the_destination() -> None:
    tries: list[int] = []
    answer = _Answer([m.PageMap(runs=[(3, 2)], last=True)])

    def connect() -> _Channel:
        tries.append(1)
        if len(tries) < 3:
            raise MigrationError("cannot reach 127.0.0.1:1: refused")
        return answer

    ch, missing = rejoin(connect, "kv-1", NONCE, 1 << 20, time.monotonic() + 10, OSError())
    assert ch is answer and missing == [(3, 2)] and len(tries) == 3
    assert answer.sent == [m.Resume(sandbox_id="kv-1", nonce=NONCE)]


def test_the_source_stops_at_a_refusal_and_at_its_deadline() -> None:
    tries: list[int] = []

    def refusing() -> _Channel:
        tries.append(1)
        return _Answer([m.Error(int(m.ErrorCode.REFUSED), "no migration of kv-1")])

    with pytest.raises(MigrationError, match="would not resume"):
        rejoin(refusing, "kv-1", NONCE, 1 << 20, time.monotonic() + 10, OSError())
    assert len(tries) == 1  # not asked again

    def unreachable() -> _Channel:
        raise MigrationError("cannot reach 127.0.0.1:1: refused")

    with pytest.raises(MigrationError, match="in time: cannot reach"):
        rejoin(unreachable, "kv-1", NONCE, 1 << 20, time.monotonic() + 0.3, OSError())


def test_the_sandbox_resends_only_remote_pages_it_is_named() -> None:
    from ckpt.errors import SandboxError
    from ckpt.sandbox.host.pageserver import _named

    def reader(runs: list[tuple[int, int]]):  # type: ignore[no-untyped-def]
        data = b"".join(
            pagefeed.frame(pagefeed.Feed.AGAIN, pagefeed.RUN_REF.pack(f, n)) for f, n in runs
        )
        data += pagefeed.frame(pagefeed.Feed.AGAIN)
        a, b = socket.socketpair()
        a.sendall(data)
        a.close()
        return pagefeed.recv_exact(b)

    frames = [1, 2, 3, 7, 8]
    assert _named(frames, reader([(2, 2), (7, 1)])) == [2, 3, 7]
    assert _named(frames, reader([(0, 2)])) == [1]  # 0 is not remote: never sent
    with pytest.raises(SandboxError, match="not remote"):
        _named(frames, reader([(1, 6)]))  # more than there are
    with pytest.raises(SandboxError, match="not remote"):
        _named(frames, reader([(8, 2)]))  # past the last remote page


def test_a_request_line_leaves_what_follows_it_in_the_socket() -> None:
    from ckpt.sandbox.wire.rpc import _read_line

    a, b = socket.socketpair()
    with a, b:
        b.settimeout(5)  # a line read past its end waits for a newline that never comes
        a.sendall(b'{"verb":"pages"}\nFRAMES')
        assert _read_line(b, exact=True) == b'{"verb":"pages"}\n'
        assert b.recv(100) == b"FRAMES"


def test_a_bad_map_read_while_the_sandbox_restores_fails_its_feed_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The relay reads the map as the sandbox restores; a map out of order ends the
    feed before the sandbox reads it (not at the feed's two-minute deadline), and the
    session hears the map's fault rather than the restore's."""
    from ckpt.migration.errors import FrameError

    ch = _Channel([m.PageMap(runs=[(5, 1), (0, 1)], last=True)])
    relay = DestRelay(ch, tmp_path, limit=1 << 20, nonce=NONCE)
    relay.listen()
    feed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    feed.settimeout(30)
    try:
        feed.connect(str(relay.path))  # as the restoring sandbox does, first
        relay.start(os.getpid(), 10)
        with pytest.raises(ConnectionError):
            pagefeed.read_map(pagefeed.recv_exact(feed), 1 << 20)
        with pytest.raises(FrameError, match="out of order"):
            relay.raise_failure()
    finally:
        feed.close()
        relay.close()
