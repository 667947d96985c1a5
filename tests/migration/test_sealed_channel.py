"""``encrypt=True``: frames after the handshake sealed with AES-256-GCM (``sealed.py``).

What is checked: sealed frames round-trip both ways; a payload is not readable in its
frame; every changed byte (header, ciphertext, tag) and every replayed, reordered,
reflected or spliced frame is refused; the two directions and successive frames never
seal under one (key, nonce); a source that does not ask meets a destination that
requires it and both refuse in one line."""

from __future__ import annotations

import threading

import pytest

from ckpt.migration import (
    Ack,
    AuthenticationError,
    Done,
    Listener,
    MigrationError,
    PageRuns,
    StateChunk,
    connect,
    pack_pages,
)
from ckpt.migration.errors import EncryptionRefused
from ckpt.migration.framing import HEADER
from ckpt.migration.messages import Kind
from ckpt.migration.sealed import TAG_LEN
from ckpt.statefile.format import CODEC_NONE

from . import test_tls
from .conftest import SECRET, open_pair, raw_send, seal
from .test_channel import _pages

MARKER = b"TOPSECRET-sealed-frame-marker"
SEALED = {"client_options": {"encrypt": True}}


@pytest.fixture
def sealed_pair(pair_factory):  # type: ignore[no-untyped-def]
    return pair_factory(**SEALED)


def _clear_pages() -> PageRuns:
    """A page run stored raw, holding ``MARKER``: readable in any unsealed frame."""
    page = (MARKER * 200)[:4096]
    return pack_pages(1, [(i, page) for i in range(4)], codec=CODEC_NONE)


def test_sealed_frames_round_trip_both_ways(sealed_pair) -> None:
    client, server = sealed_pair
    assert client.sealed and server.sealed
    sent = [
        pack_pages(3, _pages(300, start=7)),
        StateChunk(offset=0, data=b"state" * 1000, last=True),
        Ack(seq=5),
        Done(frames=4),
    ]
    for a, b in ((client, server), (server, client)):
        for msg in sent:
            a.send(msg)
            assert b.recv() == msg
    assert client.frames_sent == server.frames_received == len(sent)


def test_a_destination_without_encrypt_follows_the_source(pair_factory) -> None:
    client, server = pair_factory()
    assert not client.sealed and not server.sealed
    client, server = pair_factory(server_options={"encrypt": True}, **SEALED)
    assert client.sealed and server.sealed


def test_a_sealed_frame_does_not_show_its_payload(pair_factory) -> None:
    """The same message in the clear channel shows the marker (so this can fail)."""
    plain_client, plain_server = pair_factory()
    frame = seal(plain_client, _clear_pages())
    assert MARKER in frame
    raw_send(plain_client, frame)
    assert plain_server.recv() == _clear_pages()
    client, server = pair_factory(**SEALED)
    frame = seal(client, _clear_pages())
    assert MARKER not in frame and MARKER[:12] not in frame
    raw_send(client, frame)
    assert server.recv() == _clear_pages()


@pytest.mark.parametrize("where", ["ciphertext", "tag", "last"])
def test_a_changed_byte_of_a_sealed_frame_is_refused(sealed_pair, where: str) -> None:
    client, server = sealed_pair
    frame = bytearray(seal(client, StateChunk(offset=0, data=b"x" * 500)))
    at = {"ciphertext": HEADER.size + 3, "tag": len(frame) - TAG_LEN, "last": len(frame) - 1}
    frame[at[where]] ^= 0x01
    raw_send(client, bytes(frame))
    with pytest.raises(AuthenticationError, match="fails its seal"):
        server.recv()


def test_the_header_is_bound_kind(sealed_pair) -> None:
    """``Ack(seq=1)`` and ``Done(frames=1)`` have the same payload: only the header's
    kind tells them apart, so a kind changed on the way must fail the tag."""
    client, server = sealed_pair
    frame = bytearray(seal(client, Ack(seq=1)))
    assert frame[4] == Kind.ACK
    frame[4] = Kind.DONE
    raw_send(client, bytes(frame))
    with pytest.raises(AuthenticationError):
        server.recv()


def test_the_header_is_bound_length(sealed_pair) -> None:
    """A length cut by one moves a byte from the ciphertext into the tag: refused."""
    client, server = sealed_pair
    frame = bytearray(seal(client, StateChunk(offset=0, data=b"y" * 100)))
    length, kind = HEADER.unpack_from(frame)
    frame[: HEADER.size] = HEADER.pack(length - 1, kind)
    raw_send(client, bytes(frame))
    with pytest.raises(AuthenticationError):
        server.recv()


def test_replayed_reordered_and_reflected_sealed_frames_are_refused(pair_factory) -> None:
    client, server = pair_factory(**SEALED)
    frame = seal(client, Ack(seq=1))
    raw_send(client, frame)
    assert server.recv() == Ack(seq=1)
    raw_send(client, frame)  # replayed
    with pytest.raises(AuthenticationError):
        server.recv()
    client, server = pair_factory(**SEALED)
    first, second = seal(client, Ack(seq=1)), seal(client, Ack(seq=2))
    raw_send(client, second + first)  # reordered
    with pytest.raises(AuthenticationError):
        server.recv()
    client, server = pair_factory(**SEALED)
    raw_send(client, seal(server, Ack(seq=1)))  # the server's own frame 1, reflected
    with pytest.raises(AuthenticationError):
        server.recv()


def test_a_sealed_frame_spliced_from_another_connection_is_refused(pair_factory) -> None:
    client1, _server1 = pair_factory(**SEALED)
    client2, server2 = pair_factory(**SEALED)
    raw_send(client2, seal(client1, Ack(seq=1)))
    with pytest.raises(AuthenticationError):
        server2.recv()


def _body(frame: bytes) -> bytes:
    return frame[HEADER.size : -TAG_LEN]


def test_no_two_frames_are_sealed_under_one_key_and_nonce(sealed_pair) -> None:
    """Under one (key, nonce) GCM gives the same keystream: equal payloads would give
    equal ciphertexts.  The two directions' frame 1, and successive frames of one
    direction, must all differ."""
    client, server = sealed_pair
    msg = StateChunk(offset=0, data=bytes(256))
    to_server = [seal(client, msg) for _ in range(3)]
    to_client = [seal(server, msg) for _ in range(3)]
    bodies = [_body(f) for f in to_server + to_client]
    assert len(set(bodies)) == len(bodies)


def _handshake_both(client_encrypt: bool, server_encrypt: bool) -> list[BaseException]:
    """Connect once; the errors both sides raised, the client's first."""
    errors: dict[str, BaseException] = {}
    with Listener("127.0.0.1", 0, SECRET, encrypt=server_encrypt) as lst:

        def serve() -> None:
            try:
                lst.accept(timeout=10).close()
            except BaseException as exc:
                errors["server"] = exc

        t = threading.Thread(target=serve)
        t.start()
        try:
            connect(*lst.address, SECRET, encrypt=client_encrypt).close()
        except BaseException as exc:
            errors["client"] = exc
        t.join(15)
    return [errors[k] for k in ("client", "server") if k in errors]


def test_a_source_that_does_not_encrypt_is_refused_by_an_encrypting_server(watchdog) -> None:
    errors = _handshake_both(client_encrypt=False, server_encrypt=True)
    assert [type(e) for e in errors] == [EncryptionRefused, EncryptionRefused]
    client, server = (str(e) for e in errors)
    assert "\n" not in client + server
    assert "--encrypt" in client and "destination accepts only encrypted" in client
    assert "--encrypt" in server and "source did not ask" in server
    assert _handshake_both(client_encrypt=True, server_encrypt=True) == []


def test_encrypt_is_negotiated_inside_the_authenticated_hello(watchdog) -> None:
    """A relay that clears the source's request in its hello (msgpack ``true`` to
    ``false``, the last byte of the payload) is caught by the hello's MAC."""
    import socket

    from ckpt.migration.framing import MAC_LEN
    from ckpt.migration.handshake import OPENING

    with Listener("127.0.0.1", 0, SECRET) as lst, socket.create_server(("127.0.0.1", 0)) as mid:
        got: dict[str, object] = {}

        def serve() -> None:
            try:
                got["server"] = lst.accept(timeout=10)
            except BaseException as exc:
                got["error"] = exc

        def relay() -> None:
            a, _ = mid.accept()
            b = socket.create_connection(lst.address)
            for s in (a, b):
                s.settimeout(10)
            b.sendall(_read(a, OPENING.size))
            a.sendall(_read(b, OPENING.size))
            head = _read(a, HEADER.size)
            length, _ = HEADER.unpack(head)
            payload = bytearray(_read(a, length + MAC_LEN))
            assert payload[length - 1] == 0xC3  # msgpack true: encrypt
            payload[length - 1] = 0xC2  # false
            b.sendall(head + bytes(payload))
            head = _read(b, HEADER.size)
            a.sendall(head + _read(b, HEADER.unpack(head)[0] + MAC_LEN))
            got["socks"] = (a, b)

        threads = [threading.Thread(target=f) for f in (serve, relay)]
        for t in threads:
            t.start()
        client = None
        try:
            client = connect(*mid.getsockname()[:2], SECRET, encrypt=True)
        finally:
            for t in threads:
                t.join(15)
            for s in got.get("socks", ()):  # type: ignore[attr-defined]
                s.close()
        assert "server" not in got and isinstance(got["error"], MigrationError)
        assert "key differs" in str(got["error"])
        with pytest.raises(MigrationError):  # the source learns at its next read
            client.recv()
        client.close()


def _read(sock, n: int) -> bytes:  # type: ignore[no-untyped-def]
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("relay: the peer closed")
        buf += chunk
    return buf


def test_sealed_frames_over_tls(tmp_path, watchdog) -> None:  # type: ignore[no-untyped-def]
    from ckpt.migration import ClientTLS, ServerTLS

    cert, key = test_tls.self_signed.__wrapped__(tmp_path)  # the same cert, made the same way
    client, server = open_pair(
        server_options={"tls": ServerTLS(cert, key)},
        client_options={"tls": ClientTLS(cert), "encrypt": True},
    )
    try:
        assert client.sealed and server.sealed
        msg = pack_pages(1, _pages(50))
        client.send(msg)
        assert server.recv() == msg
    finally:
        client.close()
        server.close()
