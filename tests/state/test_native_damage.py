"""The native byte reader (``_native_read.c``) on hostile payloads inside valid frames.

The frame's checksum stops almost every random damage before any engine sees it, so
these tests damage the *payload* and frame it again with a correct checksum: what is
left for the reader is malformed MessagePack, hostile counts and lengths, and deep
nesting.  The native engine must raise ``StateError`` wherever the typed engine (whose
input is the msgspec-decoded payload) refuses, and load the same graph wherever it
loads; never crash, hang or allocate what the input only claims.
"""

from __future__ import annotations

import contextlib
import random
import struct
import tracemalloc
import zlib
from typing import Any

import msgspec
import pytest

from ckpt import state
from ckpt.state import native, wire

from .graph_equal import graph_diff
from .models import Containers, Everything, Leaf, Node, Pair
from .test_corruption import ORIGINAL

pytestmark = pytest.mark.skipif(
    not (state.native_status()[0] and native.reads_bytes()),
    reason=f"native byte reader: {state.native_status()[1]}",
)

_encode = msgspec.msgpack.encode


def framed(body: bytes) -> bytes:
    """A frame with a correct checksum around any payload bytes."""
    return (
        struct.pack("<4sBIQ", wire.MAGIC, wire.FORMAT_VERSION, zlib.crc32(body), len(body)) + body
    )


def body_of(data: bytes) -> bytes:
    return data[wire.HEADER_SIZE :]


def outcome(data: bytes, engine: str) -> tuple[str, Any]:
    """("ok", graph) or ("error", message); any other exception fails the test."""
    try:
        return "ok", state.loads(data, engine=engine)
    except state.StateError as exc:
        assert str(exc)
        return "error", str(exc)


def same_outcome(data: bytes, what: str) -> None:
    """Native refuses exactly where typed refuses, and loads the same graph elsewhere."""
    want, got = outcome(data, "typed"), outcome(data, "native")
    assert got[0] == want[0], f"{what}: typed {want[0]} ({want[1]!s:.80}), native {got}"
    if want[0] == "ok":
        diff = graph_diff(want[1], got[1])
        assert diff is None, f"{what}: native and typed loaded different graphs: {diff}"


def _graph() -> Any:
    shared = Leaf(7)
    head = Node(1, "héad", kids=[Node(2, payload=[shared, 1.5, None])], payload={"k": (1, 2)})
    head.next = head.kids[0]
    c = Containers(items=[1, 2, 3], table={"a": 1}, members={4}, nested=[[1], [2, 3]])
    return [head, Pair(shared, c), c, Node(3, "x" * 40, payload=b"\x00\xff")]


GRAPH = _graph()
STREAM = state.dumps(GRAPH, engine="typed")


def test_the_streams_here_load_equal() -> None:
    """The damage below means something only if the undamaged stream loads equal."""
    assert graph_diff(GRAPH, state.loads(STREAM, engine="native")) is None
    assert graph_diff(ORIGINAL, state.loads(state.dumps(ORIGINAL, "typed"), "native")) is None


@pytest.mark.parametrize("source", ["graph", "corruption-graph"])
def test_payload_truncated_at_every_length(source: str, watchdog: None) -> None:
    data = STREAM if source == "graph" else state.dumps(ORIGINAL, engine="typed")
    body = body_of(data)
    for n in range(len(body)):
        with pytest.raises(state.StateError):
            state.loads(framed(body[:n]), engine="native")


def test_trailing_bytes_are_refused() -> None:
    for extra in (b"\x00", b"\xc0", b"\x91\x01"):
        with pytest.raises(state.StateError, match=r"trailing|malformed"):
            state.loads(framed(body_of(STREAM) + extra), engine="native")
        with pytest.raises(state.StateError):
            state.loads(framed(body_of(STREAM) + extra), engine="typed")


@pytest.mark.parametrize("seed", range(3))
def test_every_payload_byte_flipped_behind_a_valid_checksum(seed: int, watchdog: None) -> None:
    body = body_of(STREAM)
    rng = random.Random(f"native-read-{seed}")
    for i in range(len(body)):
        damaged = bytearray(body)
        damaged[i] ^= 1 << rng.randrange(8)
        same_outcome(framed(bytes(damaged)), f"bit flip at payload byte {i}")


# Every header byte that claims a size or a count, with the largest value it can hold.
_HUGE_HEADERS = [
    b"\xdd\xff\xff\xff\xff",  # array32
    b"\xdc\xff\xff",  # array16
    b"\xdf\xff\xff\xff\xff",  # map32
    b"\xdb\xff\xff\xff\xff",  # str32
    b"\xc6\xff\xff\xff\xff",  # bin32
    b"\xc9\xff\xff\xff\xff\x01",  # ext32
    b"\x9f",  # fixarray of 15
    b"\xbf",  # fixstr of 31
    b"\xc1",  # never used
    b"\xd9",  # str8 with its length missing
]


def test_hostile_size_at_every_position_allocates_nothing_claimed(watchdog: None) -> None:
    """Replace each payload byte by a header claiming a huge size: StateError (or, where
    the byte was not a header, the same outcome as typed), and no large allocation."""
    body = body_of(STREAM)
    worst = (0, "")
    tracemalloc.start()
    try:
        for i in range(len(body)):
            for head in _HUGE_HEADERS:
                damaged = framed(body[:i] + head + body[i + 1 :])
                tracemalloc.reset_peak()
                with contextlib.suppress(state.StateError):
                    state.loads(damaged, engine="native")
                peak = tracemalloc.get_traced_memory()[1]
                worst = max(worst, (peak, f"byte {i} := {head.hex()}"))
    finally:
        tracemalloc.stop()
    assert worst[0] < 8 << 20, f"loading allocated {worst[0] >> 20} MiB for {worst[1]}"


def _payload_with(item: int, raw: bytes) -> bytes:
    payload = wire.unframe(STREAM)
    payload[item] = msgspec.Raw(raw)
    return framed(_encode(payload))


def _row_payload(field_raw: bytes) -> bytes:
    """A one-Node stream whose ``payload`` (an ``Any`` field) is the given bytes."""
    payload = wire.unframe(state.dumps(Node(1, "n"), engine="typed"))
    types = payload[wire.TYPES]
    t = next(i for i, e in enumerate(types) if e[0] == "tests.state.Node")
    names = types[t][1]
    row = payload[wire.ROWS][t][0]
    row[names.index("payload")] = msgspec.Raw(field_raw)
    return framed(_encode(payload))


def _everything_payload(name: str, field_raw: bytes) -> bytes:
    """A one-Everything stream whose field ``name`` is the given bytes."""
    payload = wire.unframe(state.dumps(Everything(), engine="typed"))
    types = payload[wire.TYPES]
    t = next(i for i, e in enumerate(types) if e[0] == "tests.state.Everything")
    payload[wire.ROWS][t][0][types[t][1].index(name)] = msgspec.Raw(field_raw)
    return framed(_encode(payload))


@pytest.mark.parametrize("name", ["fixed", "var"])  # tuple[int, str, bytes], tuple[int, ...]
@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"\x90", id="empty"),
        pytest.param(_encode([1, "a", b"b"]), id="plain"),
        pytest.param(_encode([1, 2, 3, 4]), id="longer"),
        pytest.param(_encode([1, [2]]), id="a-list-inside"),
        pytest.param(_encode([1, {"k": 2}]), id="a-map-inside"),
        pytest.param(_encode([1, {1: [2, 3]}]), id="a-tagged-tuple-inside"),
        pytest.param(b"\x92\x01\xd4\x05\x00", id="an-extension-inside"),
        pytest.param(b"\xdc\x00\x02\xca\x3f\xc0\x00\x00\xa1x", id="array16-float32"),
        pytest.param(b"\x93\x01\x02", id="truncated"),
        pytest.param(b"\xc0", id="nil"),
        pytest.param(_encode({"k": 1}), id="a-map"),
        pytest.param(_encode("text"), id="a-str"),
        pytest.param(b"\xd4\x05\x00", id="an-extension"),
        pytest.param(b"\xc1", id="reserved-byte"),
    ],
)
def test_tuple_fields_read_straight_into_tuples_load_as_typed_loads_them(
    name: str, raw: bytes
) -> None:
    """The reader builds a tuple field's tuple from the array itself; any array it must
    not take that way (a container or an extension among the items) goes the general
    way, so the outcome is typed's for every shape."""
    same_outcome(_everything_payload(name, raw), f"{name} = {raw.hex()}")


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"\xdd\x00\x01\x00\x00" + b"\x00" * 10, id="array-longer-than-input"),
        pytest.param(b"\xdf\x00\x01\x00\x00" + b"\x00" * 10, id="map-longer-than-input"),
        pytest.param(b"\xdb\x00\x10\x00\x00abc", id="str-longer-than-input"),
        pytest.param(b"\xa3\xff\xfe\xfd", id="invalid-utf8"),
        pytest.param(b"\xc1", id="reserved-byte"),
    ],
)
def test_hostile_value_in_a_row_is_a_state_error(raw: bytes) -> None:
    data = _row_payload(raw)
    for engine in ("typed", "native"):
        with pytest.raises(state.StateError):
            state.loads(data, engine=engine)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({(1, 2): 3}, id="array-key"),
        pytest.param({0: 1, 1: [2]}, id="two-tags"),
        pytest.param({1: [[1], 2]}, id="tuple-of-list"),
        pytest.param([{0: 1}, {4: [["a"], [1]]}, [[[]]]], id="nested-tags"),
        pytest.param(2**64 - 1, id="uint64"),
        pytest.param(-(2**63), id="int64-min"),
        pytest.param(float("nan"), id="nan"),
    ],
)
def test_unusual_values_in_an_any_field_load_as_typed_loads_them(value: Any) -> None:
    same_outcome(_row_payload(_encode(value)), repr(value))


def test_an_extension_value_is_refused_by_both() -> None:
    """MessagePack extensions are msgspec's business (the reader hands them over), and
    ckpt never writes one: typed and native both refuse it (a fuzz finding)."""
    data = _row_payload(_encode(msgspec.msgpack.Ext(5, b"xyz")))
    for engine in ("typed", "native"):
        with pytest.raises(state.StateError, match="extension value"):
            state.loads(data, engine=engine)


def test_float32_and_wide_headers_read_as_msgspec_reads_them() -> None:
    """Encodings typed never writes (float32, str16 for a short string, uint64 for a
    small id) still mean what MessagePack says."""
    for raw in (
        b"\xca\x3f\xc0\x00\x00",  # float32 1.5
        b"\xda\x00\x02hi",  # str16
        b"\xc5\x00\x01\x07",  # bin16
        b"\xcf\x00\x00\x00\x00\x00\x00\x00\x05",  # uint64 5
        b"\xd3\xff\xff\xff\xff\xff\xff\xff\xfe",  # int64 -2
        b"\xdc\x00\x01\x01",  # array16 [1]
        b"\xde\x00\x01\xa1k\x01",  # map16 {"k": 1}
    ):
        same_outcome(_row_payload(raw), raw.hex())


@pytest.mark.parametrize("depth", [10, 63, 64, 65, 200, 5000, 200_000])
def test_deep_nesting_in_a_row(depth: int, watchdog: None) -> None:
    """Arrays nested in an ``Any`` field: the reader's recursion stops at its bound and
    hands deeper values to msgspec, so the outcome is typed's, never a crash."""
    same_outcome(_row_payload(b"\x91" * depth + b"\x01"), f"depth {depth}")


@pytest.mark.parametrize("depth", [64, 65, 200_000])
def test_deep_nesting_of_maps_in_a_row(depth: int, watchdog: None) -> None:
    same_outcome(_row_payload(b"\x81\x01" * depth + b"\x01"), f"map depth {depth}")


@pytest.mark.parametrize(
    ("item", "raw"),
    [
        pytest.param(
            wire.TYPE_SEQ, b"\x91\xcf\xff\xff\xff\xff\xff\xff\xff\xff", id="type-index-2**64"
        ),
        pytest.param(wire.TYPE_SEQ, b"\x91\xff", id="type-index-negative"),
        pytest.param(wire.TYPE_SEQ, b"\x91\xa1x", id="type-index-string"),
        pytest.param(wire.TYPE_SEQ, b"\x80", id="type-seq-map"),
        pytest.param(wire.ROWS, b"\x90", id="rows-empty"),
        pytest.param(wire.ROWS, b"\xc0", id="rows-nil"),
        pytest.param(wire.TYPE_SEQ, b"\xdd\xff\xff\xff\xff", id="type-seq-huge"),
    ],
)
def test_hostile_top_level_items(item: int, raw: bytes) -> None:
    data = _payload_with(item, raw)
    for engine in ("typed", "native"):
        with pytest.raises(state.StateError):
            state.loads(data, engine=engine)


def test_hostile_ids_in_reference_slots() -> None:
    """Ids at and past the object count, negative and huge, in a ref and a list[ref]."""
    payload = wire.unframe(STREAM)
    types = payload[wire.TYPES]
    t = next(i for i, e in enumerate(types) if e[0] == "tests.state.Node")
    names = types[t][1]
    count = len(payload[wire.TYPE_SEQ])
    for field in ("next", "kids"):
        for bad in (count, count + 1, -1, 2**63, 2**64 - 1, "1", 1.0):
            edited = wire.unframe(STREAM)
            row = edited[wire.ROWS][t][0]
            row[names.index(field)] = bad if field == "next" else [1, bad]
            same_outcome(framed(_encode(edited)), f"{field} := {bad!r}")
