"""The channel end to end over loopback: every kind, the handshake, tampering, deadlines."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import tracemalloc

import pytest

from ckpt.migration import (
    Ack,
    AuthenticationError,
    Connections,
    DeadlineExceeded,
    Done,
    Error,
    ErrorCode,
    FrameError,
    HandshakeError,
    Hello,
    KeyMismatch,
    MigrationError,
    Offer,
    PageRuns,
    PeerClosed,
    PeerError,
    Restored,
    RoundEnd,
    StateChunk,
    pack_pages,
    unpack_pages,
)
from ckpt.migration.framing import HEADER
from ckpt.migration.handshake import MAGIC, OPENING
from ckpt.migration.messages import Fault, Kind, PageMap, Resume

from .conftest import SECRET, raw_send, seal


def _pages(n: int, start: int = 0) -> list[tuple[int, bytes]]:
    """``n`` pages in runs of one to three, with gaps between the runs."""
    out, index = [], start
    for i in range(n):
        out.append((index, os.urandom(64) * 64))
        index += 1 if i % 3 else 5
    return out


def test_every_kind_round_trips_both_ways(pair) -> None:
    client, server = pair
    pages = _pages(40, start=7)
    sent = [
        Hello(1, "ckpt", 1 << 20),
        pack_pages(3, pages),
        StateChunk(offset=4096, data=b"state" * 100, last=True),
        Ack(seq=5),
        Done(frames=4),
        Offer("kv-1", "kv:4", "typed", 1 << 20, cpus=0.5, port=8080),
        RoundEnd(round=2, pages=40, final=True, state_bytes=500, metadata={"engine": "typed"}),
        Restored(address="198.18.0.2:8080", restore_ms=12.5),
        Connections(data=b"\x91" + b"state" * 10),
        PageMap(runs=[(0, 4), (9, 2)], last=False),
        Fault(runs=[(9, 1)]),
        Resume(sandbox_id="kv-1", nonce=b"n" * 32),
    ]
    for a, b in ((client, server), (server, client)):
        for msg in sent:
            a.send(msg)
            got = b.recv()
            assert got == msg
        assert unpack_pages(pack_pages(3, pages)) == pages
    assert {type(m).KIND for m in sent} | {Kind.ERROR} == set(Kind)


def test_error_message_is_raised_as_peer_error(pair) -> None:
    client, server = pair
    client.send_error(ErrorCode.EXISTS, "sandbox web1 already exists\non the destination")
    with pytest.raises(PeerError) as info:
        server.recv()
    assert info.value.code == ErrorCode.EXISTS
    assert "\n" not in str(info.value) and "web1" in str(info.value)


def test_wrong_key_fails_on_both_sides_in_one_line(watchdog) -> None:
    from ckpt.migration import Listener, connect

    errors: list[BaseException] = []
    with Listener("127.0.0.1", 0, SECRET) as lst:

        def serve() -> None:
            try:
                lst.accept(timeout=10)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=serve)
        t.start()
        with pytest.raises(KeyMismatch) as info:
            connect(*lst.address, bytes(reversed(SECRET)))
        t.join(15)
    assert str(info.value) == "the peer's key differs: check --key-file"
    assert len(errors) == 1 and isinstance(errors[0], KeyMismatch)
    assert str(errors[0]) == "the peer's key differs: check --key-file"


def test_replayed_frame_is_refused(pair) -> None:
    client, server = pair
    frame = seal(client, Ack(seq=1))
    raw_send(client, frame)
    assert server.recv() == Ack(seq=1)
    raw_send(client, frame)
    with pytest.raises(AuthenticationError):
        server.recv()


def test_reordered_frames_are_refused(pair) -> None:
    client, server = pair
    first = seal(client, Ack(seq=1))
    second = seal(client, Ack(seq=2))
    raw_send(client, second + first)
    with pytest.raises(AuthenticationError):
        server.recv()


def test_frame_spliced_from_another_connection_is_refused(pair_factory) -> None:
    client1, _server1 = pair_factory()
    client2, server2 = pair_factory()
    # Same secret, same sequence number, same direction: only the connection differs.
    raw_send(client2, seal(client1, Ack(seq=1)))
    with pytest.raises(AuthenticationError):
        server2.recv()


def test_frame_reflected_back_to_its_sender_is_refused(pair) -> None:
    client, server = pair
    # The server's own next frame 1 (its Hello was 0) comes back to it as the client's 1.
    raw_send(client, seal(server, Ack(seq=1)))
    with pytest.raises(AuthenticationError):
        server.recv()


@pytest.mark.parametrize("where", ["length", "kind", "payload", "mac"])
def test_bit_flips_are_refused(pair_factory, where: str) -> None:
    for bit in range(0, 8 * 4, 3) if where == "length" else range(8):
        client, server = pair_factory(server_options={"io_timeout": 2.0})
        frame = bytearray(seal(client, StateChunk(offset=0, data=b"x" * 200)))
        index = {"length": bit // 8, "kind": 4, "payload": 5 + 17, "mac": len(frame) - 9}[where]
        frame[index] ^= 1 << (bit % 8)
        raw_send(client, bytes(frame))
        if where == "length" and int.from_bytes(frame[:4], "big") > len(frame) - 5 - 32:
            client.close()  # a longer frame: the rest never comes, the link goes down
        expected = AuthenticationError if where in ("payload", "mac") else MigrationError
        with pytest.raises(expected):
            server.recv()


def test_kind_flipped_to_another_known_kind_fails_the_mac(pair) -> None:
    client, server = pair
    frame = bytearray(seal(client, Ack(seq=1)))
    frame[4] = Kind.DONE  # Done(frames) has the same shape as Ack(seq)
    raw_send(client, bytes(frame))
    with pytest.raises(AuthenticationError):
        server.recv()


def test_oversized_length_is_refused_before_reading_the_payload(pair) -> None:
    client, server = pair
    raw_send(client, HEADER.pack(0xFFFFFFFF, Kind.PAGE_RUNS))  # and nothing after it
    tracemalloc.start()
    try:
        with pytest.raises(FrameError, match="over the"):
            server.recv()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_unknown_kind_is_refused(pair) -> None:
    client, server = pair
    raw_send(client, HEADER.pack(10, 99) + bytes(42))
    with pytest.raises(FrameError, match="unknown kind 99"):
        server.recv()


def test_channel_is_closed_after_a_bad_frame(pair) -> None:
    client, server = pair
    raw_send(client, HEADER.pack(10, 99))
    with pytest.raises(FrameError):
        server.recv()
    with pytest.raises(PeerClosed):
        server.recv()
    with pytest.raises(MigrationError):
        client.recv()  # the server closed its end


def test_peer_that_stops_mid_frame_hits_the_deadline(pair_factory) -> None:
    client, server = pair_factory(server_options={"io_timeout": 0.3})
    frame = seal(client, StateChunk(offset=0, data=b"y" * 1000))
    raw_send(client, frame[:500])
    with pytest.raises(DeadlineExceeded):
        server.recv()


def test_trickling_peer_cannot_stretch_a_frame_past_the_deadline(pair_factory) -> None:
    client, server = pair_factory(server_options={"io_timeout": 0.5})
    frame = seal(client, StateChunk(offset=0, data=b"z" * 200))
    stop = threading.Event()

    def trickle() -> None:  # one byte every 20 ms: each recv returns well within 0.5 s
        for b in frame:
            if stop.wait(0.02):
                return
            try:
                raw_send(client, bytes([b]))
            except OSError:
                return

    t = threading.Thread(target=trickle)
    t.start()
    try:
        with pytest.raises(DeadlineExceeded):
            server.recv()
    finally:
        stop.set()
        t.join(10)


def test_overall_deadline_bounds_a_silent_peer(pair_factory) -> None:
    _client, server = pair_factory(server_options={"io_timeout": 60.0, "deadline": 0.5})
    with pytest.raises(DeadlineExceeded):
        server.recv()


def test_peer_that_closes_mid_frame_is_reported(pair) -> None:
    client, server = pair
    raw_send(client, seal(client, Ack(seq=1))[:7])
    client.close()
    with pytest.raises(PeerClosed):
        server.recv()


def test_garbage_opening_fails_the_handshake(watchdog) -> None:
    import socket

    from ckpt.migration import Listener

    errors: list[BaseException] = []
    with Listener("127.0.0.1", 0, SECRET) as lst:

        def serve() -> None:
            try:
                lst.accept(timeout=10)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=serve)
        t.start()
        with socket.create_connection(lst.address, timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(40))
            t.join(15)
    assert len(errors) == 1 and isinstance(errors[0], HandshakeError)
    assert "not a ckpt migration peer" in str(errors[0])


def test_other_protocol_version_fails_the_handshake(watchdog) -> None:
    import socket

    from ckpt.migration import Listener

    errors: list[BaseException] = []
    with Listener("127.0.0.1", 0, SECRET) as lst:

        def serve() -> None:
            try:
                lst.accept(timeout=10)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=serve)
        t.start()
        with socket.create_connection(lst.address, timeout=10) as s:
            s.sendall(OPENING.pack(MAGIC, 99, os.urandom(32)))
            t.join(15)
    assert len(errors) == 1 and isinstance(errors[0], HandshakeError)
    assert "protocol 99" in str(errors[0])


def test_silent_peer_cannot_hang_the_handshake(watchdog) -> None:
    import socket

    from ckpt.migration import Listener

    errors: list[BaseException] = []
    with Listener("127.0.0.1", 0, SECRET, handshake_timeout=0.3) as lst:

        def serve() -> None:
            try:
                lst.accept(timeout=10)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=serve)
        t.start()
        with socket.create_connection(lst.address, timeout=10):
            t.join(15)
    assert len(errors) == 1 and isinstance(errors[0], DeadlineExceeded)


def test_send_refuses_a_frame_over_the_peers_limit(pair_factory) -> None:
    client, server = pair_factory(server_options={"max_payload": 4096})
    with pytest.raises(MigrationError, match="frame limit"):
        client.send(StateChunk(offset=0, data=bytes(8192)))
    client.send(StateChunk(offset=0, data=bytes(1000)))
    assert server.recv() == StateChunk(offset=0, data=bytes(1000))


def test_page_runs_with_more_pages_than_the_limit_are_refused() -> None:
    msg = pack_pages(0, [(i, bytes(4096)) for i in range(8)])
    with pytest.raises(FrameError, match="more than 4 pages"):
        unpack_pages(msg, max_pages=4)
    bad = PageRuns(round=0, runs=[(5, 2), (6, 1)], codec=0, data=bytes(3 * 4096))
    with pytest.raises(FrameError, match="overlapping"):
        unpack_pages(bad)
    lying = PageRuns(round=0, runs=[(0, 2)], codec=1, data=msg.data)
    with pytest.raises(FrameError, match="decompress"):
        unpack_pages(lying)


def test_unused_error_kind_struct_round_trips_as_error(pair) -> None:
    client, server = pair
    client.send(Error(code=99, message="a code this side does not know"))
    with pytest.raises(PeerError) as info:
        server.recv()
    assert info.value.code == 99


def test_stats_count_frames_and_bytes(pair) -> None:
    client, server = pair
    client.send(StateChunk(offset=0, data=bytes(100)))
    server.recv()
    assert client.frames_sent == 1 and server.frames_received == 1
    assert client.bytes_sent > 100 and server.bytes_received > 100


def test_a_peer_that_echoes_the_opening_is_refused(watchdog) -> None:
    """A reflector (a server that sends back what it gets) must not pass as a peer."""
    import socket

    from ckpt.migration import connect

    received = bytearray()
    with socket.create_server(("127.0.0.1", 0)) as srv:

        def echo() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(10)
                try:
                    while data := conn.recv(65536):
                        received.extend(data)
                        conn.sendall(data)
                except OSError:
                    pass

        t = threading.Thread(target=echo)
        t.start()
        with pytest.raises(HandshakeError) as info:
            connect(*srv.getsockname()[:2], SECRET)
        t.join(15)
    # Refused on the opening itself: no key was derived, no sealed Hello went out (a
    # Hello reflected back would fail its MAC too, but only after it was sent).
    assert not isinstance(info.value, KeyMismatch), info.value
    assert len(received) == OPENING.size


def test_peer_that_stops_reading_makes_send_hit_the_deadline(pair_factory) -> None:
    client, _server = pair_factory(client_options={"io_timeout": 0.5})
    chunk = StateChunk(offset=0, data=bytes(1 << 20))
    with pytest.raises(DeadlineExceeded):
        for _ in range(256):  # far more than the socket buffers hold
            client.send(chunk)


def test_frames_over_the_pre_authentication_limit_pass_after_the_handshake(pair) -> None:
    """The handshake reads at most a Hello's size; once both keys are proven the
    connection's own limit applies, or no page batch could ever cross."""
    client, server = pair
    big = StateChunk(offset=0, data=os.urandom(64 << 10))
    client.send(big)
    assert server.recv() == big
    server.send(big)
    assert client.recv() == big


def _pre_auth_peer(frame_header: bytes) -> BaseException:
    """A peer that sends a valid opening, then ``frame_header`` as its frame 0 and
    nothing more; returns what the listener's accept raised."""
    import socket

    from ckpt.migration import Listener
    from ckpt.migration.framing import Deadline, Wire
    from ckpt.migration.handshake import exchange_openings

    errors: list[BaseException] = []
    with Listener("127.0.0.1", 0, SECRET, handshake_timeout=5.0) as lst:

        def serve() -> None:
            try:
                lst.accept(timeout=10)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=serve)
        t.start()
        with socket.create_connection(lst.address, timeout=10) as s:
            wire = Wire(s)
            exchange_openings(wire, Deadline(10))
            wire.write(frame_header, Deadline(10), "a header")
            t.join(15)
    assert len(errors) == 1
    return errors[0]


def test_a_frame_over_the_pre_authentication_limit_is_refused_by_its_header(watchdog) -> None:
    """Before the peer's Hello verifies, a header announcing more than a Hello can need
    is refused at once: its payload is never waited for (nor allocated)."""
    exc = _pre_auth_peer(HEADER.pack(4 * 1024 + 1, Kind.HELLO))
    assert isinstance(exc, FrameError), exc
    assert "over the 4096-byte limit" in str(exc)


def _paced(client, frames: int, size: int, every: float) -> threading.Thread:  # type: ignore[no-untyped-def]
    """Send ``frames`` state chunks of ``size`` bytes, one every ``every`` seconds."""

    def run() -> None:
        with contextlib.suppress(MigrationError):
            for i in range(frames):
                time.sleep(every)
                client.send(StateChunk(offset=i * size, data=bytes(size)))

    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_step_that_brings_too_little_is_cut_by_the_step_deadline(pair_factory) -> None:
    """Each frame comes well within ``io_timeout``; the step as a whole does not."""
    client, server = pair_factory(server_options={"io_timeout": 30.0, "phase_timeout": 1.0})
    t = _paced(client, 8, 100, 0.4)
    try:
        with pytest.raises(DeadlineExceeded, match="a step of the migration"):
            for _ in range(8):
                server.recv()
    finally:
        client.close()
        t.join(15)


def test_the_step_deadline_restarts_when_this_side_answers(pair_factory) -> None:
    client, server = pair_factory(server_options={"io_timeout": 30.0, "phase_timeout": 1.5})
    t = _paced(client, 6, 100, 0.4)  # 2.4 s in all, 0.4 s a step
    try:
        for _ in range(6):
            assert isinstance(server.recv(), StateChunk)
            server.send(Ack(seq=server.frames_received))  # a step ends
    finally:
        t.join(15)


def test_the_step_deadline_grows_with_the_bytes_the_step_brings(pair_factory) -> None:
    client, server = pair_factory(
        server_options={"io_timeout": 30.0, "phase_timeout": 1.5, "phase_min_rate": 65536.0}
    )
    t = _paced(client, 6, 65536, 0.4)  # each frame buys 1 s more than it took
    try:
        for _ in range(6):
            assert isinstance(server.recv(), StateChunk)
    finally:
        t.join(15)


def test_a_peer_that_misses_a_deadline_is_still_told_why(pair_factory) -> None:
    client, server = pair_factory(server_options={"io_timeout": 0.3})
    with pytest.raises(DeadlineExceeded) as info:
        server.recv()
    server.send_error(ErrorCode.PROTOCOL, str(info.value))
    with pytest.raises(PeerError, match="before the deadline"):
        client.recv()
    with pytest.raises(PeerClosed):
        server.recv()
