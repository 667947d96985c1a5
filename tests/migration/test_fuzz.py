"""Hypothesis fuzzes the frame reader, the handshake opening and the message decoders:
whatever the bytes, the only outcome besides a valid message is a ``MigrationError``."""

from __future__ import annotations

import contextlib
import os

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.migration import AuthenticationError, MigrationError, PageRuns, unpack_pages
from ckpt.migration.framing import (
    HEADER,
    MAC_LEN,
    TO_SERVER,
    Deadline,
    FrameOpener,
    FrameSealer,
    Wire,
)
from ckpt.migration.handshake import MAGIC, OPENING, exchange_openings
from ckpt.migration.messages import MESSAGE_TYPES, Kind, decode

KEY = os.urandom(32)


class BytesSocket:
    """Just enough of a socket for ``Wire``: reads come from ``data``, writes vanish."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.requested = 0

    def settimeout(self, timeout: float | None) -> None:
        pass

    def recv_into(self, buf: memoryview, n: int) -> int:
        self.requested += n
        k = min(n, len(self.data))
        buf[:k] = self.data[:k]
        self.data = self.data[k:]
        return k

    def sendall(self, data: bytes) -> None:
        pass


def read_all(data: bytes, max_payload: int = 1 << 16) -> int:
    """Read frames from ``data`` until one is refused; returns how many were accepted."""
    wire = Wire(BytesSocket(data))  # type: ignore[arg-type]
    opener = FrameOpener(KEY, TO_SERVER, max_payload)
    accepted = 0
    while True:
        try:
            kind, payload = opener.read(wire, Deadline(5))
            decode(kind, payload)
        except MigrationError:
            return accepted
        accepted += 1


@given(st.binary(max_size=4096))
def test_random_bytes_only_raise_migration_error(data: bytes) -> None:
    assert read_all(data) == 0  # no MAC under KEY comes out of random bytes


@given(
    st.sampled_from(sorted(MESSAGE_TYPES)),
    st.binary(max_size=256),
    st.binary(min_size=MAC_LEN, max_size=MAC_LEN),
    st.binary(max_size=64),
)
def test_random_payload_behind_a_valid_header_is_refused(kind, payload, tag, tail) -> None:
    """Without the key no tag is the payload's MAC: the frame is refused by its MAC,
    before its payload is decoded, whatever the payload is."""
    sock = BytesSocket(HEADER.pack(len(payload), kind) + payload + tag + tail)
    opener = FrameOpener(KEY, TO_SERVER, 1 << 16)
    with pytest.raises(AuthenticationError):
        opener.read(Wire(sock), Deadline(5))  # type: ignore[arg-type]
    assert opener.seq == 0


@given(st.sampled_from(sorted(MESSAGE_TYPES)), st.binary(max_size=512))
def test_authenticated_garbage_payload_decodes_or_is_refused(kind: int, payload: bytes) -> None:
    """A peer holding the key is still not trusted to send well-formed messages."""
    frame = FrameSealer(KEY, TO_SERVER).seal(kind, payload)
    wire = Wire(BytesSocket(frame))  # type: ignore[arg-type]
    got_kind, got = FrameOpener(KEY, TO_SERVER, 1 << 16).read(wire, Deadline(5))
    try:
        msg = decode(got_kind, got)
    except MigrationError:
        return
    assert kind == msg.KIND
    if isinstance(msg, PageRuns):
        with contextlib.suppress(MigrationError):
            unpack_pages(msg, max_pages=64)


@given(
    st.integers(0, 2**40),
    st.lists(st.tuples(st.integers(-5, 2**40), st.integers(-5, 2**20)), max_size=8),
    st.integers(-1, 3),
    st.binary(max_size=512),
)
def test_page_runs_from_a_keyed_peer_unpack_or_are_refused(round_no, runs, codec, data) -> None:
    try:
        msg = decode(Kind.PAGE_RUNS, msgspec.msgpack.encode([round_no, runs, codec, data]))
        unpack_pages(msg, max_pages=64)
    except MigrationError:
        pass


@given(st.binary(min_size=OPENING.size, max_size=OPENING.size))
def test_random_opening_is_refused(data: bytes) -> None:
    try:
        exchange_openings(Wire(BytesSocket(data)), Deadline(5))  # type: ignore[arg-type]
    except MigrationError:
        return
    assert data.startswith(MAGIC)  # only a well-formed opening passes


def test_oversized_length_reads_nothing_past_the_header() -> None:
    sock = BytesSocket(HEADER.pack(0xFFFFFFFF, Kind.STATE_CHUNK) + bytes(1 << 16))
    opener = FrameOpener(KEY, TO_SERVER, 1 << 20)
    try:
        opener.read(Wire(sock), Deadline(5))  # type: ignore[arg-type]
    except MigrationError as exc:
        assert "over the" in str(exc)
    else:
        raise AssertionError("an oversized frame was accepted")
    assert sock.requested == HEADER.size
