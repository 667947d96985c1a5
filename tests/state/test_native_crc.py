"""The native writer's frame CRC is zlib.crc32, on the folded (PCLMULQDQ) path and the
table path, at every length around the fold widths and from any start offset."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.state import native, registry

from .requires import requires_native

pytestmark = requires_native


def _walk():
    return native._core.Walk(native._plan_for, native._enum_plan, set(), registry._by_class)


@pytest.mark.parametrize("fast", [True, False], ids=["folded", "table"])
def test_crc_equals_zlib_at_every_length_near_the_fold_widths(fast: bool) -> None:
    walk = _walk()
    data = bytes((i * 151 + 7) & 0xFF for i in range(300))
    for n in range(300):
        for start in (0, 1, 17):
            if start <= n:
                got = walk.crc32(data[:n], start, fast)
                assert got == zlib.crc32(data[start:n]), (n, start, fast)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 40))
def test_crc_equals_zlib_on_random_bytes(data: bytes, start: int) -> None:
    start = min(start, len(data))
    walk = _walk()
    assert walk.crc32(data, start) == zlib.crc32(data[start:])
    assert walk.crc32(data, start, False) == zlib.crc32(data[start:])


def test_crc_of_large_all_ones_and_zeros() -> None:
    walk = _walk()
    for data in (b"\xff" * (1 << 20), bytes(1 << 20) + b"\x01"):
        assert walk.crc32(data, 0) == zlib.crc32(data)


def test_crc_rejects_a_start_outside_the_buffer() -> None:
    walk = _walk()
    with pytest.raises(ValueError, match="start outside"):
        walk.crc32(b"abc", 4)
    with pytest.raises(ValueError, match="start outside"):
        walk.crc32(b"abc", -1)


def test_native_frame_crc_is_what_the_reader_checks() -> None:
    data = state.dumps([1, "x" * 5000], engine="native")
    assert data == state.dumps([1, "x" * 5000], engine="typed")
    header = state.wire._HEADER.unpack_from(data)
    assert header[2] == zlib.crc32(data[state.wire.HEADER_SIZE :])


@given(st.binary(max_size=5000), st.integers(0, 40))
def test_the_module_crc_that_loads_check_with_equals_the_walks(data: bytes, start: int) -> None:
    start = min(start, len(data))
    assert native._core.crc32(data, start) == _walk().crc32(data, start) == zlib.crc32(data[start:])
    assert native._core.crc32(memoryview(data)[start:], 0) == zlib.crc32(data[start:])


@pytest.mark.parametrize("at", [0, 1, 4095, -1])
def test_native_load_refuses_a_payload_with_a_flipped_bit(at: int) -> None:
    data = bytearray(state.dumps([7, "y" * 8000], engine="native"))
    data[state.wire.HEADER_SIZE + at if at >= 0 else at] ^= 0x10
    with pytest.raises(state.StateError, match="checksum mismatch"):
        state.loads(bytes(data), engine="native")


def _frame(version: int = 2, payload: bytes = b"\x92\x01\x02") -> bytes:
    crc = zlib.crc32(payload)
    return state.wire._HEADER.pack(state.wire.MAGIC, version, crc, len(payload)) + payload


def test_the_frame_check_in_c_is_used_and_knows_wires_header() -> None:
    assert native._FRAME_IN_C
    magic, size, low, high = native._core.FRAME_FORMAT
    assert (magic, size) == (state.wire.MAGIC, state.wire.HEADER_SIZE)
    assert tuple(range(low, high + 1)) == state.wire.READ_VERSIONS


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
@pytest.mark.parametrize("version", state.wire.READ_VERSIONS)
def test_the_frame_check_in_c_returns_wires_payload(kind: type, version: int) -> None:
    for payload in (b"", b"\x92\x01\x02", bytes(range(256)) * 300):
        data = kind(_frame(version, payload))
        body = native._core.frame_body(data)
        assert isinstance(body, memoryview)
        assert body == state.wire.check_frame(data) == payload


def _bad_frames() -> list[tuple[str, object]]:
    good = _frame()
    n = state.wire.HEADER_SIZE
    flipped = bytearray(good)
    flipped[-1] ^= 1
    bad_crc = bytearray(good)
    bad_crc[5] ^= 1
    return [
        ("short", good[: n - 1]),
        ("magic", b"CKSX" + good[4:]),
        ("version 0", good[:4] + b"\x00" + good[5:]),
        ("version 3", good[:4] + b"\x03" + good[5:]),
        ("truncated", good[:-1]),
        ("padded", good + b"\x00"),
        ("payload bit", bytes(flipped)),
        ("header crc", bytes(bad_crc)),
        ("not bytes", "CKST"),
        ("strided", memoryview(good * 2)[::2]),
    ]


@pytest.mark.parametrize("name,data", _bad_frames(), ids=[n for n, _ in _bad_frames()])
def test_the_frame_check_in_c_leaves_every_bad_frame_to_wire(name: str, data: object) -> None:
    assert native._core.frame_body(data) is None
    if name != "strided":  # wire reads a strided view's bytes: it is not malformed
        with pytest.raises(state.StateError):
            native._frame_body(data)
