"""Bad input fails cleanly: StateError, or (for harmless damage) data equal to the original.

Never another exception, never a hang (the watchdog fixture turns a hang into a failure),
never a huge allocation (an address-space limit turns one into a MemoryError failure).
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import decimal
import functools
import io
import random
import resource
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.state import wire

from .conftest import ENGINES
from .graph_equal import graph_diff
from .models import Calendar, Color, Everything, Leaf, Node, Pair, Stamped


def _small_graph() -> Any:
    shared = Leaf(3)
    head = Node(1, "head", kids=[Node(2, payload=shared)], payload={"k": (1, 2.5), 9: [shared]})
    head.next = head.kids[0]
    head.kids[0].next = head
    stamped = Stamped(
        dt.datetime(2026, 3, 4, 5, 6, 7, 8, tzinfo=dt.timezone(dt.timedelta(hours=2), "X")),
        uuid.UUID(int=7),
        decimal.Decimal("-1.50"),
        count=None,  # an escape in a compact int slot
    )
    return [
        head,
        Pair(shared, {1, 2}),
        Everything(small=-4, text="ü", color=Color.BLUE),
        Pair(collections.deque([1, shared], 4), dt.date(2026, 1, 2)),
        stamped,
        Calendar(  # every value on the native core's C paths
            dt.datetime(2026, 3, 4, 5, 6, 7, 8, tzinfo=dt.UTC),
            dt.datetime(1999, 12, 31, 23, 59, 59, fold=1),
            dt.date(2026, 2, 28),
            dt.timedelta(days=-3, seconds=7, microseconds=9),
            uuid.UUID(int=2**127 + 5),
            [(1, 2), (-3, 2**40)],
        ),
    ]


ORIGINAL = _small_graph()


@functools.cache
def stream(engine: str) -> bytes:
    """The small graph saved with an engine (computed on first use, so a save bug shows
    as failing tests rather than as an import error of this module)."""
    return state.dumps(ORIGINAL, engine=engine)


@pytest.fixture
def memory_cap() -> Iterator[None]:
    """Cap the address space ~1 GiB above current use while loading hostile input."""
    with open("/proc/self/status") as status:
        vm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm_kib * 1024 + (1 << 30)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _load_or_state_error(data: Any, engine: str) -> Any:
    """Load, accepting only success or StateError; return the graph or None."""
    try:
        return state.loads(data, engine=engine)
    except state.StateError as exc:
        assert str(exc), "a StateError must say what went wrong"
        return None


def _equal_or_state_error(data: Any, engine: str, what: str) -> None:
    loaded = _load_or_state_error(data, engine)
    if loaded is not None:
        diff = graph_diff(ORIGINAL, loaded)
        assert diff is None, f"{what}: loaded different data without an error: {diff}"


@pytest.mark.parametrize("saved_with", ENGINES)
def test_truncated_at_every_length(
    saved_with: str, engine: str, watchdog: None, memory_cap: None
) -> None:
    data = stream(saved_with)
    for n in range(len(data)):
        with pytest.raises(state.StateError):
            state.loads(data[:n], engine=engine)


@pytest.mark.parametrize("saved_with", ENGINES)
def test_every_single_byte_flip(
    saved_with: str, engine: str, watchdog: None, memory_cap: None
) -> None:
    data = stream(saved_with)
    rng = random.Random(f"flip-{saved_with}-{engine}")
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 1 << rng.randrange(8)
        _equal_or_state_error(bytes(damaged), engine, f"bit flip at byte {i}")


@given(
    saved_with=st.sampled_from(ENGINES),
    load_with=st.sampled_from(ENGINES),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=8),
)
def test_random_byte_flips(
    saved_with: str, load_with: str, flips: list[tuple[int, int]], watchdog: None
) -> None:
    damaged = bytearray(stream(saved_with))
    for where, mask in flips:
        damaged[where % len(damaged)] ^= mask
    _equal_or_state_error(bytes(damaged), load_with, f"flips {flips}")


def _leaf_paths(node: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every position in the decoded top-level array (containers and leaves)."""
    yield path
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from _leaf_paths(item, (*path, i))
    elif isinstance(node, dict):
        for key in list(node):
            yield from _leaf_paths(node[key], (*path, key))


def _replaced(payload: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    copy = list(payload) if isinstance(payload, list) else dict(payload)
    copy[path[0]] = _replaced(payload[path[0]], path[1:], value)
    return copy


HOSTILE = [None, -1, 0, 2**31, 2**63 - 1, -(2**63), 1.5, "", "x", b"", [], [0] * 3, {}, {0: 0}]
# Self-describing values are maps {tag: payload} (ckpt/state/wire.py): malformed ones of each
# tag, plus unknown tags and maps with more than one key.
HOSTILE_TAGGED = [
    *({0: v} for v in (10**6, -1, "1", [1])),
    *({1: v} for v in (None, 5, {0: 1})),
    *({2: v} for v in ([[]], [{0: 1}])),
    {3: [[1]]},
    *({4: v} for v in ([[1], []], [[[]], [1]], [[1, 2]], None)),
    *({5: v} for v in ("text", 2**31, -1)),
    *({6: v} for v in ([0, 1], [999, 1], [0])),
    *({7: v} for v in ("x", "9" * 5000, 5)),
    {99: 1},
    {0: 1, 1: [2]},
    {"k": 1},
    # Slot escapes (tag 8) and value codecs (tag 9), version 2.
    *({8: v} for v in (None, {8: {8: 1}}, [1], {99: 1}, {0: -5})),
    *(
        {9: v}
        for v in (
            None,
            [],
            ["datetime"],
            ["datetime", None],
            ["datetime", [2026, 13, 1, 0, 0, 0, 0, 0, None]],
            ["datetime", [1, 1, 1, 0, 0, 0, 0, 0, ["zone", "../../etc/passwd"]]],
            ["datetime", [1, 1, 1, 0, 0, 0, 0, 0, ["zone", "No/Such_Zone"]]],
            ["datetime", [1, 1, 1, 0, 0, 0, 0, 0, ["fixed", 10**12, None]]],
            ["datetime", [1, 1, 1, 0, 0, 0, 0, 0, ["utc", 1]]],
            ["datetime", [1, 1, 1, 0, 0, 0, 0, 7, None]],
            ["time", [25, 0, 0, 0, 0, None]],
            ["date", [2026, 2, 30]],
            ["timedelta", [10**10, 0, 0]],
            ["nope.Type", []],
            ["ddict", ["os.system", [], []]],
            ["ddict", [["type", "no.such.Type"], [], []]],
            ["ddict", [["type", "tests.state.Leaf"], [[]], [1]]],
            ["fraction", [1, 0]],
            ["fraction", [1.5, 2]],
            ["deque", [[1, 2], 1]],
            ["deque", [[1], -1]],
            ["range", [0, 1, 0]],
            ["uuid", [b"short"]],
            ["decimal", ["1" * 20000]],
            ["decimal", ["not a number"]],
            ["ip4", ["999.1.1.1"]],
            ["ip6net", ["::1/200"]],
            ["path.posix", [5]],
            ["path.windows", ["C:\\x"]],
            ["complex", ["a", 1]],
            ["counter", [[1], []]],
            ["odict", [[[1]], [1]]],
        )
    ),
]


@pytest.mark.parametrize("saved_with", ENGINES)
@pytest.mark.watchdog_s(240)  # thousands of loads in one test, on a shared core
def test_hostile_value_at_every_position(
    saved_with: str, engine: str, watchdog: None, memory_cap: None
) -> None:
    """Checksum-valid frames with one value replaced: StateError or a successful load.

    (A changed int may legitimately load as a different graph, so only the outcome's
    kind is checked: no IndexError, KeyError, TypeError, RecursionError, MemoryError.)
    """
    payload = wire.unframe(stream(saved_with))
    paths = list(_leaf_paths(payload))
    assert len(paths) > 20
    failures: list[tuple[str, str]] = []
    for path in paths:
        for value in HOSTILE + HOSTILE_TAGGED:
            try:
                state.loads(wire.frame(_replaced(payload, path, value)), engine=engine)
            except state.StateError:
                pass
            except Exception as exc:
                failures.append((type(exc).__name__, f"{path} := {value!r:.40}: {exc}"[:160]))
    assert failures == [], _summary(failures)


def _summary(failures: list[tuple[str, str]]) -> str:
    """A few examples of each exception type raised instead of StateError."""
    by_type: dict[str, list[str]] = {}
    for kind, line in failures:
        by_type.setdefault(kind, []).append(line)
    examples = [f"{kind}: {line}" for kind, lines in by_type.items() for line in lines[:3]]
    counts = ", ".join(f"{kind} x{len(lines)}" for kind, lines in by_type.items())
    return f"non-StateError failures ({counts}), e.g.\n" + "\n".join(examples)


@pytest.mark.parametrize("saved_with", ENGINES)
@pytest.mark.watchdog_s(240)  # thousands of loads in one test, on a shared core
def test_inspect_hostile_value_at_every_position(
    saved_with: str, watchdog: None, memory_cap: None
) -> None:
    """inspect_stream(...).verify() on the same damaged frames: StateError or success."""
    payload = wire.unframe(stream(saved_with))
    failures: list[tuple[str, str]] = []
    for path in _leaf_paths(payload):
        for value in HOSTILE + HOSTILE_TAGGED:
            try:
                view = state.inspect_stream(wire.frame(_replaced(payload, path, value)))
                view.verify()
                list(view.objects())
            except state.StateError:
                pass
            except Exception as exc:
                failures.append((type(exc).__name__, f"{path} := {value!r:.40}: {exc}"[:160]))
    assert failures == [], _summary(failures)


def test_inspect_truncated_at_every_length(watchdog: None) -> None:
    data = stream("typed")
    for n in range(len(data)):
        with pytest.raises(state.StateError):
            state.inspect_stream(data[:n]).verify()


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00", id="one-byte"),
        pytest.param(b"CKST", id="magic-only"),
        pytest.param(bytes(random.Random(1).randbytes(200)), id="random-bytes"),
        pytest.param(b"\x80\x04\x95" + b"\x00" * 40, id="a-pickle-header"),
        pytest.param(b"\x93\x01\x02\x03", id="bare-msgpack"),
    ],
)
def test_garbage_is_a_state_error(data: bytes, engine: str) -> None:
    with pytest.raises(state.StateError):
        state.loads(data, engine=engine)


@pytest.mark.parametrize(
    "data", [None, "a string", 17, [1, 2], {"a": 1}, Leaf()], ids=lambda d: type(d).__name__
)
def test_non_bytes_is_a_state_error(data: Any, engine: str) -> None:
    with pytest.raises(state.StateError):
        state.loads(data, engine=engine)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param([], id="empty-array"),
        pytest.param([1], id="one-element"),
        pytest.param("not an array", id="string"),
        pytest.param({"a": 1}, id="map"),
        pytest.param([None] * 9, id="nine-nils"),
        pytest.param([1, "typed", "compact", None, None, None, None, None, None], id="nil-tables"),
        pytest.param([1, "typed", "compact", [], [0], [], 1, [], {}], id="dangling-object"),
        pytest.param([1, "typed", "compact", [], [], [], {0: 5}, [], {}], id="dangling-root-ref"),
        pytest.param(
            [1, "typed", "compact", [["tests.state.Leaf"]], [0], [[[1]]], {0: 1}, [], {}],
            id="type-without-fields",
        ),
        pytest.param(
            [
                1,
                "typed",
                "compact",
                [["tests.state.Leaf", ["value"], []]],
                [0],
                [[[1]]],
                {0: 1},
                [],
                {},
            ],
            id="fields-without-kinds",
        ),
        pytest.param(
            [
                1,
                "typed",
                "compact",
                [["tests.state.Leaf", ["value"], ["int"]]],
                [0, 0, 0],
                [[[1]]],
                {0: 1},
                [],
                {},
            ],
            id="more-objects-than-rows",
        ),
        pytest.param(
            [
                1,
                "typed",
                "compact",
                [["tests.state.Leaf", ["value"], ["int"]]],
                [5],
                [[[1]]],
                {0: 1},
                [],
                {},
            ],
            id="type-index-out-of-range",
        ),
        pytest.param([1, "nope", "weird", [], [], [], None, [], {}], id="unknown-encoding"),
        pytest.param([99, "typed", "compact", [], [], [], None, [], {}], id="future-version"),
    ],
)
def test_valid_frame_around_garbage(payload: Any, engine: str, watchdog: None) -> None:
    with pytest.raises(state.StateError):
        state.loads(wire.frame(payload), engine=engine)


def test_truncated_file_is_a_state_error(engine: str, tmp_path: Any) -> None:
    path = tmp_path / "graph.state"
    with path.open("wb") as out:
        state.save(ORIGINAL, out, engine=engine)
    data = path.read_bytes()
    for n in (0, 1, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:n])
        with path.open("rb") as src, pytest.raises(state.StateError):
            state.load(src, engine=engine)


def test_file_like_with_garbage_is_a_state_error(engine: str) -> None:
    with pytest.raises(state.StateError):
        state.load(io.BytesIO(b"garbage" * 10), engine=engine)


def test_original_streams_load() -> None:
    """The fixtures above are meaningful only if the undamaged streams load equal."""
    for saved_with in ENGINES:
        data = stream(saved_with)
        for engine in ENGINES:
            assert graph_diff(ORIGINAL, state.loads(data, engine=engine)) is None, (
                saved_with,
                engine,
            )


_SCALAR_VALUES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
_WIRE_VALUES = st.recursive(
    _SCALAR_VALUES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.integers(0, 9), inner, max_size=2)
    ),
    max_leaves=8,
)


@settings(max_examples=150)
@given(
    saved_with=st.sampled_from(ENGINES),
    load_with=st.sampled_from(ENGINES),
    edits=st.lists(st.tuples(st.integers(0, 10**6), _WIRE_VALUES), min_size=1, max_size=3),
)
def test_random_structural_edits(
    saved_with: str,
    load_with: str,
    edits: list[tuple[int, Any]],
    watchdog: None,
    memory_cap: None,
) -> None:
    """Checksum-valid frames with random values spliced in: StateError or a load.

    (inspect_stream gets the deterministic version above only: a failing hypothesis test
    spends minutes shrinking.)"""
    payload = wire.unframe(stream(saved_with))
    for where, value in edits:
        paths = list(_leaf_paths(payload))
        payload = _replaced(payload, paths[where % len(paths)], value)
    data = wire.frame(payload)
    _load_or_state_error(data, load_with)


BIG_CLAIMS = [2**24, 2**28, {5: 2**28}, {1: 2**24}, {2: 2**24}, {7: "9" * 4000}]


@pytest.mark.parametrize("saved_with", ENGINES)
def test_sizes_claimed_by_the_input_are_not_allocated(
    saved_with: str, engine: str, watchdog: None, memory_cap: None
) -> None:
    """A ~1 KB stream claiming huge sizes anywhere never makes loading allocate megabytes:
    sizes are checked against the input before anything is allocated."""
    payload = wire.unframe(stream(saved_with))
    worst = (0, "")
    tracemalloc.start()
    try:
        for path in _leaf_paths(payload):
            for value in BIG_CLAIMS:
                data = wire.frame(_replaced(payload, path, value))
                tracemalloc.reset_peak()
                with contextlib.suppress(state.StateError):
                    state.loads(data, engine=engine)
                peak = tracemalloc.get_traced_memory()[1]
                worst = max(worst, (peak, f"{path} := {value!r:.30}"))
    finally:
        tracemalloc.stop()
    assert worst[0] < 16 << 20, f"loading allocated {worst[0] >> 20} MiB for {worst[1]}"
