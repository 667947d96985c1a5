# ruff: noqa: RUF009  (state.field is a dataclass field specifier ruff does not know)
"""The native engine under hostile, corrupt or shifting input: hostile payloads in
valid frames for the byte reader, the frame CRC, tables too large for the usual
memory, and Python code run during a save that changes the object or resizes the
list being written.  Every case is typed's outcome (bytes, graph or error), never a
crash; .ci/asan.sh runs this file under AddressSanitizer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import random
import struct
import sys
import tracemalloc
import zlib
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.errors import StateError
from ckpt.state import native, registry, wire

from .graph_equal import graph_diff
from .models import Containers, Everything, Leaf, Node, Pair
from .requires import requires_native
from .test_corruption import ORIGINAL

pytestmark = requires_native


# --------------------------------------------------------------------------------------
# The native byte reader (``_native_read.c``) on hostile payloads inside valid frames.
#
# The frame's checksum stops almost every random damage before any engine sees it, so
# these tests damage the *payload* and frame it again with a correct checksum: what is
# left for the reader is malformed MessagePack, hostile counts and lengths, and deep
# nesting.  The native engine must raise ``StateError`` wherever the typed engine (whose
# input is the msgspec-decoded payload) refuses, and load the same graph wherever it
# loads; never crash, hang or allocate what the input only claims.


requires_reader = pytest.mark.skipif(
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


@requires_reader
def test_the_streams_here_load_equal() -> None:
    """The damage below means something only if the undamaged stream loads equal."""
    assert graph_diff(GRAPH, state.loads(STREAM, engine="native")) is None
    assert graph_diff(ORIGINAL, state.loads(state.dumps(ORIGINAL, "typed"), "native")) is None


@requires_reader
@pytest.mark.parametrize("source", ["graph", "corruption-graph"])
def test_payload_truncated_at_every_length(source: str, watchdog: None) -> None:
    data = STREAM if source == "graph" else state.dumps(ORIGINAL, engine="typed")
    body = body_of(data)
    for n in range(len(body)):
        with pytest.raises(state.StateError):
            state.loads(framed(body[:n]), engine="native")


@requires_reader
def test_trailing_bytes_are_refused() -> None:
    for extra in (b"\x00", b"\xc0", b"\x91\x01"):
        with pytest.raises(state.StateError, match=r"trailing|malformed"):
            state.loads(framed(body_of(STREAM) + extra), engine="native")
        with pytest.raises(state.StateError):
            state.loads(framed(body_of(STREAM) + extra), engine="typed")


@requires_reader
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


@requires_reader
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


@requires_reader
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


@requires_reader
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


@requires_reader
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


@requires_reader
def test_an_extension_value_is_refused_by_both() -> None:
    """MessagePack extensions are msgspec's business (the reader hands them over), and
    ckpt never writes one: typed and native both refuse it (a fuzz finding)."""
    data = _row_payload(_encode(msgspec.msgpack.Ext(5, b"xyz")))
    for engine in ("typed", "native"):
        with pytest.raises(state.StateError, match="extension value"):
            state.loads(data, engine=engine)


@requires_reader
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


@requires_reader
@pytest.mark.parametrize("depth", [10, 63, 64, 65, 200, 5000, 200_000])
def test_deep_nesting_in_a_row(depth: int, watchdog: None) -> None:
    """Arrays nested in an ``Any`` field: the reader's recursion stops at its bound and
    hands deeper values to msgspec, so the outcome is typed's, never a crash."""
    same_outcome(_row_payload(b"\x91" * depth + b"\x01"), f"depth {depth}")


@requires_reader
@pytest.mark.parametrize("depth", [64, 65, 200_000])
def test_deep_nesting_of_maps_in_a_row(depth: int, watchdog: None) -> None:
    same_outcome(_row_payload(b"\x81\x01" * depth + b"\x01"), f"map depth {depth}")


@requires_reader
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


@requires_reader
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


# --------------------------------------------------------------------------------------
# The native writer's frame CRC is zlib.crc32, on the folded (PCLMULQDQ) path and the
# table path, at every length around the fold widths and from any start offset.


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


# --------------------------------------------------------------------------------------
# The native save walk's large tables are mappings of their own that ask for huge pages.
#
# A walk over more than ~130k objects has an id table of 4 MiB or more; it is then an
# anonymous 2 MiB-aligned mapping with MADV_HUGEPAGE (the kernel's "hg" flag), freed with
# munmap.  Which way a table came is recorded with it, so switching the mode between walks
# (``_native.set_huge_tables``) while an array is kept for the next walk frees every array
# the way it was made; under AddressSanitizer (.ci/asan.sh) a mapping handed to free(), or
# a heap block to munmap, aborts the run.  The bytes never depend on the mode.


HUGE_MIN = 4 << 20  # bytes: _native.c's HUGE_MIN
SPARE_MAX = 8 << 20  # bytes: the largest array a walk keeps for the next one
# Past this many objects the id table (16-byte slots, at most half full) is HUGE_MIN or more.
OVER_MIN = HUGE_MIN // 16 // 2 + 1000
# Past this many, it is larger than any array kept from an earlier walk: a new mapping.
OVER_SPARE = SPARE_MAX // 16 // 2 + 1000


@state.savable(name="tests.huge.Node")
@dataclasses.dataclass(eq=False)
class HugeNode:
    value: int = 0
    next: HugeNode | None = None


@state.savable(name="tests.huge.Probe")
@dataclasses.dataclass(eq=False)
class Probe:
    """Reads this process's mappings while the walk that saves it is under way."""

    seen: list = dataclasses.field(default_factory=list)

    def __before_save__(self) -> None:
        self.seen.append(_huge_advised_mappings())


@state.savable(name="tests.huge.Root")
@dataclasses.dataclass(eq=False)
class Root:
    nodes: list[HugeNode] = dataclasses.field(default_factory=list)
    probe: Probe | None = None


def _native():
    from ckpt.state import native

    return native._core


def _huge_advised_mappings() -> list[int]:
    """Sizes in bytes of the mappings of HUGE_MIN or more that carry the 'hg' flag."""
    sizes, size = [], 0
    with open("/proc/self/smaps") as f:
        for line in f:
            if line.startswith("Size:"):
                size = int(line.split()[1]) * 1024
            elif line.startswith("VmFlags:") and "hg" in line.split()[1:] and size >= HUGE_MIN:
                sizes.append(size)
    return sizes


def _root(n: int, seed: int = 0) -> Root:
    nodes = [HugeNode(seed + i) for i in range(n)]
    for a, b in itertools.pairwise(nodes):
        a.next = b
    return Root(nodes)


@pytest.fixture
def restore_mode():
    core = _native()
    was = core.set_huge_tables(True)
    yield core
    core.set_huge_tables(was)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="huge pages are asked of Linux")
def test_a_large_walk_table_is_advised_huge_pages(restore_mode):
    root = _root(OVER_SPARE)
    root.probe = Probe()
    before = _huge_advised_mappings()
    state.dumps(root, "native")
    (during,) = root.probe.seen
    if not during:
        try:
            with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
                f.read()
        except OSError:
            pytest.skip("this kernel has no transparent huge pages")
    table = 2 * SPARE_MAX  # the id table of OVER_SPARE objects, never one kept before
    assert not [size for size in before if size >= table], before
    assert [size for size in during if size >= table], (before, during)
    assert all(size % (2 << 20) == 0 for size in during)


def test_bytes_do_not_depend_on_the_mode(restore_mode):
    core = restore_mode
    root = _root(OVER_MIN)
    core.set_huge_tables(True)
    huge = state.dumps(root, "native")
    core.set_huge_tables(False)
    small = state.dumps(root, "native")
    assert huge == small == state.dumps(root, "typed")
    assert state.loads(huge, "native").nodes[-1].value == OVER_MIN - 1


def test_switching_modes_between_walks_frees_each_array_as_it_was_made(restore_mode):
    """Sizes chosen so the id table is kept for the next walk (4-8 MiB), taken up by a
    walk in the other mode, then replaced by a larger one and freed."""
    core = restore_mode
    sizes = [OVER_MIN, OVER_MIN + 10, 60_000, OVER_MIN * 2 + 10, OVER_MIN, 500]
    expected = {}
    for n in sizes:
        core.set_huge_tables(False)
        expected[n] = state.dumps(_root(n, n), "native")
    for k, n in enumerate(sizes * 2):
        core.set_huge_tables(k % 2 == 0)
        assert state.dumps(_root(n, n), "native") == expected[n], (k, n)


# --------------------------------------------------------------------------------------
# Python code run for one field (a ``save=`` function here) may change the very object
# being saved: set a later field, make its ``__dict__`` (CPython 3.11 then moves the
# inline values into it), add a key that turns that dict into a combined table (the
# values array is freed), delete a field, or change ``__class__``.
#
# The native save reads fields straight from inline values and skips re-checking them
# while only scalars have been written; after any Python code it must look again.  Each
# case must write exactly typed's bytes or fail the way typed does.  Under ASan (asan.sh
# runs this file) a stale values pointer is a use-after-free report.


class Meddler:
    """A field value whose save function runs `act` on the object that holds it."""

    def __init__(self, act: Callable[[Any], None]) -> None:
        self.act = act
        self.owner: Any = None


def _save_meddler(m: Meddler) -> int:
    m.act(m.owner)
    return 1


@state.savable(name="tests.midsave.Target")
@dataclasses.dataclass(eq=False)
class Target:
    a: int = 1
    meddler: Any = state.field(save=_save_meddler, load=lambda _v: None, default=None)
    b: int = 2
    c: str = "c"
    d: float = 4.0
    e: list[int] = dataclasses.field(default_factory=list)
    f: int = 6


@state.savable(name="tests.midsave.Other")
@dataclasses.dataclass(eq=False)
class Other:
    b: int = 20
    c: str = "other"


def _set_later(o: Target) -> None:
    o.b, o.c, o.f = 200, "changed", 600


def _make_dict(o: Target) -> None:
    o.__dict__  # noqa: B018 - materialises the dict, which takes the inline values
    o.b = 201


def _combine(o: Target) -> None:
    o.__dict__["extra"] = "x" * 100  # a key the shared keys lack: values freed
    o.b, o.d = 202, 40.5


def _replace_dict(o: Target) -> None:
    o.__dict__ = {"a": 9, "meddler": None, "b": 203, "c": "new", "d": 1.5, "e": [7], "f": 8}


def _delete(o: Target) -> None:
    del o.c


def _change_class(o: Target) -> None:
    o.__class__ = Other


ACTS = {
    "set-later-fields": _set_later,
    "make-dict": _make_dict,
    "combine-dict": _combine,
    "replace-dict": _replace_dict,
    "delete-field": _delete,
    "change-class": _change_class,
}


def _fresh(act: Callable[[Any], None], n: int = 50) -> list[Target]:
    objs = []
    for i in range(n):
        t = Target(a=i, b=i * 2, c=f"c{i}", d=i / 4, e=[i], f=i * 3)
        t.meddler = Meddler(act)
        t.meddler.owner = t
        objs.append(t)
    return objs


def _outcome(engine: str, act: Callable[[Any], None]) -> tuple[str, Any]:
    try:
        return "bytes", state.dumps(_fresh(act), engine=engine)
    except (StateError, AttributeError, TypeError) as exc:
        return "error", type(exc).__name__


@pytest.mark.parametrize("act", list(ACTS.values()), ids=list(ACTS))
def test_python_code_that_changes_the_object_mid_save_gives_typeds_result(act) -> None:
    typed = _outcome("typed", act)
    native = _outcome("native", act)
    assert native == typed


def test_the_changed_values_are_the_ones_saved() -> None:
    kind, data = _outcome("native", _combine)
    assert kind == "bytes"
    back = state.loads(data)
    assert [(t.b, t.d) for t in back] == [(202, 40.5)] * 50


# The walk reads ahead: while one object is written it already fetches the dicts, values
# and field values of the next twenty or so (see "looking ahead" in _native.c), once it
# has met more objects than fit the L2 cache (the core's `look_ahead_min`).  Python code
# run for one object may change those later objects first, or free what was read ahead
# for them; what is read ahead must be read again, never trusted.  Each act keeps the
# later object savable, so the whole list is written.


@state.savable(name="tests.midsave.Twin")
@dataclasses.dataclass(eq=False)
class Twin(Target):  # Target's fields under another class (and other shared keys)
    pass


def _later_combine(o: Any) -> None:
    d = o.__dict__  # takes the inline values; the keys below turn it combined, freeing them
    for k in range(40):
        d.setdefault(f"extra{k}", k)
    o.b += 1


def _later_replace(o: Any) -> None:
    o.__dict__ = {**o.__dict__, "b": -o.b, "e": [o.a, o.a]}  # the old dict and values go


def _later_shrink(o: Any) -> None:
    for k in ("b", "c", "d", "f"):
        o.__dict__.pop(k, None)  # typed then reads the class defaults


def _later_switch(o: Any) -> None:
    o.__class__ = Twin if type(o) is Target else Target


LATER_ACTS = {
    "set-fields": _set_later,
    "make-dict": lambda o: o.__dict__,
    "combine-dict": _later_combine,
    "replace-dict": _later_replace,
    "shrink-dict": _later_shrink,
    "switch-class": _later_switch,
}


def _fresh_meddling_later(act: Callable[[Any], None]) -> list[Target]:
    from ckpt.state import native

    objs = _fresh(lambda _o: None, native._core.look_ahead_min + 64)
    for i, t in enumerate(objs):
        later = objs[i + 1 : i + 25]
        t.meddler.act = lambda _o, later=later: [act(x) for x in later]
    return objs


@pytest.mark.parametrize("act", list(LATER_ACTS.values()), ids=list(LATER_ACTS))
def test_python_code_that_changes_later_objects_gives_typeds_result(act) -> None:
    typed = state.dumps(_fresh_meddling_later(act), engine="typed")
    native = state.dumps(_fresh_meddling_later(act), engine="native")
    assert native == typed


def _dicts_made(graph: Any) -> Any:
    for obj in graph.nodes + graph.leaves + graph.hubs:
        vars(obj)  # as pickle does: the dict made takes the inline values (a split table)
    return graph


def _dicts_combined(graph: Any) -> Any:
    for obj in graph.nodes + graph.leaves + graph.hubs:
        obj.__dict__ = dict(obj.__dict__)  # a combined str-keyed table of its own
    return graph


@pytest.mark.parametrize(
    "layout",
    [lambda g: g, _dicts_made, _dicts_combined],
    ids=["inline-values", "split-dicts", "combined-dicts"],
)
def test_large_graphs_in_every_attribute_layout_write_typeds_bytes(layout) -> None:
    from ckpt.bench import state_models
    from ckpt.state import native

    nodes = native._core.look_ahead_min + 2000  # large enough for the walk to look ahead
    graph = layout(state_models.make_graph(nodes, seed=11))
    assert state.dumps(graph, engine="native") == state.dumps(graph, engine="typed")


# The walk also reads ahead into lists of references (the item array of a later object's
# list, each item's header and id slot) and into dicts (their keys and entries).  Python
# code run for one object may empty, grow (a new item array, a new keys object), replace
# or share those containers first.


@state.savable(name="tests.midsave.Linked")
@dataclasses.dataclass(eq=False)
class Linked:
    n: int = 0
    meddler: Any = state.field(save=_save_meddler, load=lambda _v: None, default=None)
    peers: list[Linked] = dataclasses.field(default_factory=list)
    table: dict[str, int] = dataclasses.field(default_factory=dict)


def _new_linked(n: int) -> Linked:
    return Linked(n, meddler=Meddler(lambda _o: None))


def _peers_cleared(o: Linked) -> None:
    o.peers.clear()
    o.table.clear()  # its keys object is freed


def _peers_grown(o: Linked) -> None:
    o.peers.extend(_new_linked(-1) for _ in range(40))  # a larger item array, new objects
    o.table.update((f"k{j}", j) for j in range(40))  # a larger keys object


def _peers_replaced(o: Linked) -> None:
    o.peers = [_new_linked(-2), o]  # the old list (read ahead) is freed
    o.table = {"new": -2}  # and the old dict


SHARED_PEERS: list[Linked] = []
SHARED_TABLE: dict[str, int] = {"shared": 1}


def _peers_shared(o: Linked) -> None:
    o.peers = SHARED_PEERS
    o.table = SHARED_TABLE


PEER_ACTS = {
    "clear": _peers_cleared,
    "grow": _peers_grown,
    "replace": _peers_replaced,
    "share": _peers_shared,
}


def _linked_meddling_later(act: Callable[[Any], None]) -> list[Linked]:
    from ckpt.state import native

    objs = [Linked(i) for i in range(native._core.look_ahead_min + 64)]
    SHARED_PEERS[:] = objs[:3]
    for i, o in enumerate(objs):
        o.peers = [objs[(i * 7 + k) % len(objs)] for k in range(i % 6)]
        o.table = {f"t{k}": k for k in range(i % 5)}
        later = objs[i + 1 : i + 4]
        o.meddler = Meddler(lambda _o, later=later: [act(x) for x in later])
    return objs


@pytest.mark.parametrize("act", list(PEER_ACTS.values()), ids=list(PEER_ACTS))
def test_python_code_that_changes_later_lists_of_references_gives_typeds_result(act) -> None:
    typed = state.dumps(_linked_meddling_later(act), engine="typed")
    native = state.dumps(_linked_meddling_later(act), engine="native")
    assert native == typed


# --------------------------------------------------------------------------------------
# A live list whose items are being written may be resized by Python code the writing
# runs: a registered value's ``to_plain``, or discovering a class (its plan).  The native
# writer puts the array's length first, so it must correct that length afterwards; typed's
# code iterates the list in Python, and native must write exactly its bytes (a length
# that disagrees with the items is a stream no engine loads).


# What the codec below does to the list it finds here, once per save.
TARGET: list[list[Any]] = []
ACT: list[Callable[[list[Any]], None]] = []


class Token:
    """A value whose to_plain runs ACT on TARGET[0] the first time it is called."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Token)

    __hash__ = object.__hash__

    def __repr__(self) -> str:  # graph_diff compares other values by == and repr
        return "Token()"


def _to_plain(_t: Token) -> list[int]:
    if ACT:
        ACT.pop()(TARGET[0])
    return [7]


state.register_value(Token, to_plain=_to_plain, from_plain=lambda _v: Token(), name="t.Tok")


@state.savable(name="tests.resized.AnyList")
@dataclasses.dataclass(eq=False)
class AnyList:
    items: list[Any] = dataclasses.field(default_factory=list)
    loose: Any = None  # a list here is written self-describing (w_dyn_items)


@state.savable(name="tests.resized.Node")
@dataclasses.dataclass(eq=False)
class ResizedNode:
    n: int = 0


@state.savable(name="tests.resized.Late")
@dataclasses.dataclass(eq=False)
class Late:
    n: int = 0


@state.savable(name="tests.resized.RefList")
@dataclasses.dataclass(eq=False)
class RefList:
    refs: list[ResizedNode | Late] = dataclasses.field(default_factory=list)
    nested: list[list[ResizedNode | Late]] = dataclasses.field(default_factory=list)


# (items before, the change made while the token is written): sizes chosen so the
# header changes length (15 -> 16 is one byte -> three), or does not.
CHANGES: dict[str, tuple[int, Callable[[list[Any]], None]]] = {
    "clear": (20, list.clear),
    "pop-same-header": (10, lambda xs: xs.pop()),
    "shrink-16-to-3": (16, lambda xs: xs.__delitem__(slice(3, None))),
    "grow-14-to-20": (14, lambda xs: xs.extend(range(100, 106))),
    "grow-same-header": (3, lambda xs: xs.append(99)),
    "replace-later": (6, lambda xs: xs.__setitem__(-1, "changed")),
}


def _any_list(size: int, where: str) -> AnyList:
    items: list[Any] = [1, Token(), *range(2, size)]
    return AnyList(items=items) if where == "field" else AnyList(loose=items)


def _save_both(make: Callable[[], Any], act: Callable[[list[Any]], None], pick) -> bytes:
    out = []
    for engine in ("typed", "native"):
        root = make()
        TARGET[:] = [pick(root)]
        ACT[:] = [act]
        out.append((root, state.dumps(root, engine=engine)))
    (_, typed), (_, native) = out
    assert not ACT, "the change was never made"
    assert native == typed
    back = state.loads(native, engine="native")  # what was written, not the list now
    assert graph_diff(state.loads(typed, engine="typed"), back) is None
    return native


@pytest.mark.parametrize("where", ["field", "any"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_list_resized_by_a_value_codec_writes_typeds_bytes(where: str, change: str) -> None:
    size, act = CHANGES[change]
    pick = (lambda r: r.items) if where == "field" else (lambda r: r.loose)
    _save_both(lambda: _any_list(size, where), act, pick)


@pytest.mark.parametrize("change", ["clear", "shrink-16-to-3", "grow-14-to-20"])
@pytest.mark.parametrize("field", ["refs", "nested"])
def test_a_list_of_references_resized_by_discovery_is_written_as_iterated(
    monkeypatch: pytest.MonkeyPatch, change: str, field: str
) -> None:
    """Discovering Late (met first at index 1) asks for its plan, which resizes the list
    being written.  typed discovers classes elsewhere, so no byte comparison here: the
    stream must hold what iterating the list in Python gives, the items before the change
    and the list's items after it from index 2 on."""
    from ckpt.state import native

    size, act = CHANGES[change]
    plan_for = native._plan_for

    def meddling_plan_for(cls: type) -> object:
        if cls is Late and ACT:
            ACT.pop()(TARGET[0])
        return plan_for(cls)

    for cls in (RefList, ResizedNode, Late):  # no plans cached: discovery asks for them
        state.schema.schema_of(cls).info.__dict__.pop("_native_plan", None)
    monkeypatch.setattr(native, "_plan_for", meddling_plan_for)
    items: list[ResizedNode | Late] = [
        ResizedNode(0),
        Late(1),
        *(ResizedNode(i) for i in range(2, size)),
    ]
    grown = [ResizedNode(i) for i in range(100, 106)]
    root = RefList(refs=items) if field == "refs" else RefList(nested=[items])
    before = list(items)
    TARGET[:] = [items]
    ACT[:] = [(lambda xs: xs.extend(grown)) if change.startswith("grow") else act]
    data = state.dumps(root, engine="native")
    assert not ACT, "discovery never asked for Late's plan"
    expect = before[:2] + items[2:]
    back = state.loads(data, engine="native")
    got = back.refs if field == "refs" else back.nested[0]
    assert [(type(x).__name__, x.n) for x in got] == [(type(x).__name__, x.n) for x in expect]
    assert state.loads(data, engine="typed") is not None  # typed reads it too
