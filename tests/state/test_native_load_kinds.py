"""Field kinds the native reader takes in C: nested kinds through element programs,
``list[tuple[...]]`` of scalars, and dicts read straight from the bytes.  For every
wire shape a slot can hold, the native load gives what typed's gives: the same graph
or an error of the same type.
"""

from __future__ import annotations

import enum
import math
import random
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.state import native, wire
from ckpt.state.schema import schema_of

from .graph_equal import graph_diff
from .requires import requires_native

pytestmark = requires_native


# --------------------------------------------------------------------------------------
# The native reader takes every common nested field kind in C (``L_ELEM``: an element
# program built from the annotation): fixed tuples holding references, ``Any`` inside
# containers, dicts with reference keys or non-scalar values, ``Optional`` containers and
# enums, enums inside containers, ``bytearray``, sets of tuples.
#
# What it loads must be what the typed engine loads, for streams either engine saved and
# for every wire shape a slot can hold in a checksum-valid frame (the fast path hands any
# shape it does not expect to typed's own decoder for that field), and damaged streams
# fail with StateError, never a crash.


class Hue(enum.Enum):
    """Written as bare values (compact): what the element program reads."""

    RED = 1
    BLUE = "blue"
    FAR = -(2**63)


class Odd(enum.Enum):
    """A value beyond 64 bits: members written self-describing (the slot decoder's)."""

    SMALL = 1
    BIG = 2**70


@state.savable(name="tests.native_load_kinds.Kinds")
@dataclass(eq=False)
class Kinds:
    """One field of each kind the C reader takes through an element program."""

    ref_int: tuple[Kinds, int] = ()
    ref_ref: tuple[Kinds, Kinds] = ()
    refs: tuple[Kinds, ...] = ()
    anys: list[Any] = field(default_factory=list)
    any_set: set[Any] = field(default_factory=set)
    any_tuple: tuple[Any, ...] = ()
    opt_ints: list[int | None] = field(default_factory=list)
    by_ref: dict[Kinds, int] = field(default_factory=dict)
    str_any: dict[str, Any] = field(default_factory=dict)
    str_opt_ref: dict[str, Kinds | None] = field(default_factory=dict)
    ref_ref_map: dict[Kinds, Kinds] = field(default_factory=dict)
    str_pair: dict[str, tuple[int, int]] = field(default_factory=dict)
    pair_str: dict[tuple[int, int], str] = field(default_factory=dict)
    opt_hue: Hue | None = None
    odds: list[Odd | None] = field(default_factory=list)
    hues: list[Hue] = field(default_factory=list)
    str_hue: dict[str, Hue] = field(default_factory=dict)
    opt_list: list[int] | None = None
    opt_dict: dict[str, int] | None = None
    opt_pair: tuple[int, int] | None = None
    raw: bytearray = field(default_factory=bytearray)
    ref_pairs: list[tuple[Kinds, int]] = field(default_factory=list)
    pair_set: set[tuple[int, int]] = field(default_factory=set)
    pair_frozen: frozenset[tuple[int, float]] = frozenset()
    nested: list[list[Kinds | None]] = field(default_factory=list)
    tail: int = 7  # a scalar after the others: a reader that runs past a value takes it


# the annotations the C reader must take (a field of Kinds each), by descriptor
COVERED = {
    "tuple[ref,int]",
    "tuple[ref,ref]",
    "tuple[ref,...]",
    "list[any]",
    "set[any]",
    "tuple[any,...]",
    "list[opt[int]]",
    "dict[ref,int]",
    "dict[str,any]",
    "dict[str,opt[ref]]",
    "dict[ref,ref]",
    "dict[str,tuple[int,int]]",
    "dict[tuple[int,int],str]",
    "opt[enum]",
    "list[opt[odd]]",
    "list[enum]",
    "dict[str,enum]",
    "opt[list[int]]",
    "opt[dict[str,int]]",
    "opt[tuple[int,int]]",
    "bytearray",
    "list[tuple[ref,int]]",
    "set[tuple[int,int]]",
    "frozenset[tuple[int,float]]",
    "list[list[opt[ref]]]",
}


def _descriptor(spec: Any) -> str:
    text = spec.kind.descriptor
    text = text.replace(f"enum:{Odd.__module__}.{Odd.__qualname__}", "odd")
    return text.replace(f"enum:{Hue.__module__}.{Hue.__qualname__}", "enum")


def test_every_common_kind_has_a_c_load_op() -> None:
    specs = {_descriptor(s): s for s in schema_of(Kinds).fields}
    assert specs.keys() >= COVERED
    slow = [d for d in sorted(COVERED) if native._load_op(specs[d])[0] == native.L_PY]
    assert slow == [], f"loaded by typed's generated Python per field: {slow}"


def test_programs_follow_the_annotation_and_stop_at_its_depth() -> None:
    from ckpt.state.schema import parse_descriptor

    deep = "int"
    for _ in range(native.MAX_ELEM_DEPTH):
        deep = f"list[{deep}]"
    assert native._elem_prog(parse_descriptor(deep)) is None  # one level too deep
    ok = deep.removeprefix("list[").removesuffix("]")
    assert native._elem_prog(parse_descriptor(ok)) is not None


# --- values: the same as typed loads, streams of both engines --------------------------


def _rich() -> list[Kinds]:
    a, b, c = Kinds(), Kinds(), Kinds()
    shared_list = [1, None, 2**80]
    a.ref_int = (b, 2**64 + 3)  # beyond 64 bits: an escaped value
    a.ref_ref = (a, c)  # a cycle through a tuple
    a.refs = (b, c, a)
    a.anys = [b, 5, None, 2**70, math.inf, "s", b"b", (1, c), [2, a], {"k": b}, True, -1.5]
    a.any_set = {1, "x", None, (2, 3), b}
    a.any_tuple = (c, None, math.nan, -(2**65), (b,))
    a.opt_ints = [1, None, -(2**63), 2**64 - 1, 2**70, 4]
    a.by_ref = {a: 1, b: 2**66, c: -3}
    a.str_any = {"r": c, "n": None, "i": 2**90, "f": -math.inf, "l": [1, [2]], "t": (b, 1)}
    a.str_opt_ref = {"x": b, "none": None, "self": a}
    a.ref_ref_map = {a: b, b: a, c: c}
    a.str_pair = {"p": (1, 2), "q": (-(2**63), 2**70)}
    a.pair_str = {(1, 2): "a", (3, 2**65): "b"}
    a.opt_hue = Hue.FAR
    a.odds = [Odd.BIG, None, Odd.SMALL]
    a.hues = [Hue.RED, Hue.BLUE, Hue.FAR]
    a.str_hue = {"r": Hue.RED, "b": Hue.BLUE}
    a.opt_list = shared_list
    a.opt_dict = {"a": 1, "big": 2**99}
    a.opt_pair = (0, -1)
    a.raw = bytearray(b"\x00\xffraw")
    a.ref_pairs = [(b, 1), (a, 2**70), (c, 0)]
    a.pair_set = {(1, 2), (3, 4)}
    a.pair_frozen = frozenset({(1, math.inf), (2, -0.0)})
    a.nested = [[a, None, b], [], [c]]
    b.ref_int = (a, 0)
    b.opt_hue = Hue.RED
    b.opt_list = shared_list  # shared: one object after loading
    b.raw = a.raw  # a shared bytearray
    b.anys = shared_list
    b.str_any = a.str_any  # a shared dict
    b.opt_dict = {}
    b.opt_pair = None
    b.nested = [[None]]
    c.opt_list = []
    c.by_ref = {c: 0}
    c.str_opt_ref = {}
    return [a, b, c]


def _fitting() -> list[Kinds]:
    """Values every writer puts in the shapes the element programs take."""
    a, b = Kinds(), Kinds()
    for n, m in ((a, b), (b, a)):
        n.ref_int, n.ref_ref, n.refs = (m, -5), (m, n), (n, m, n)
        n.anys = [m, 1, None, "s", 1.5, [m, 2], (n, None)]
        n.any_set, n.any_tuple = {1, "x", m}, (m, 2.5, (n,))
        n.opt_ints = [1, None, 2**64 - 1, -(2**63)]
        n.by_ref, n.str_any = {m: 1, n: 2}, {"r": m, "i": 3, "l": [n], "t": (1, m)}
        n.str_opt_ref, n.ref_ref_map = {"m": m, "none": None}, {m: n, n: n}
        n.str_pair, n.pair_str = {"p": (1, 2)}, {(1, 2): "a", (3, 4): "b"}
        n.opt_hue, n.hues, n.str_hue = Hue.BLUE, [Hue.RED, Hue.FAR], {"r": Hue.RED}
        n.odds = [None]
        n.opt_list, n.opt_dict, n.opt_pair = [1, 2], {"k": 1}, (3, 4)
        n.raw = bytearray(b"xyz")
        n.ref_pairs, n.pair_set = [(m, 1), (n, 2)], {(1, 2), (2, 1)}
        n.pair_frozen, n.nested = frozenset({(1, 0.5)}), [[m, None], [n]]
    b.opt_list, b.opt_dict, b.opt_pair, b.opt_hue = None, None, None, None
    b.anys, b.raw = [], bytearray()
    # every default: the () of a tuple[Ref, int] field does not fit it, so the writers
    # escape it ({8: {1: []}}) and list the type as escaped
    return [a, b, Kinds()]


@pytest.mark.parametrize("saved_with", ["native", "typed"])
def test_fitting_values_take_no_slot_decoder(
    saved_with: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _fitting()
    data = _saved(root, saved_with)

    def refused(slot: Any, raw: Any, ctx: Any) -> Any:
        raise AssertionError(f"{slot.spec.name}: {raw!r} went to the slot decoder")

    monkeypatch.setattr(native._LazyLoadSlot, "__call__", refused)
    loaded = state.loads(data, engine="native")
    monkeypatch.undo()
    assert graph_diff(root, loaded) is None
    assert graph_diff(state.loads(data, engine="typed"), loaded) is None


def _misfits() -> list[Kinds]:
    """Values the writers put in other wire shapes (escapes, self-describing values)."""
    a, b = Kinds(), Kinds()
    a.ref_int = (b, True)  # a bool where an int is declared (an int subclass)
    a.ref_ref = [b, a]  # a list where a tuple is declared: escaped
    a.anys = (1, b)  # a tuple where a list is declared
    a.opt_ints = [True, 1.5, "str", b"bytes"]  # not ints: escaped
    a.by_ref = {b: "not an int"}
    a.str_pair = {"wrong": (1, 2, 3)}
    a.opt_list = {1: 2}  # a dict where a list is declared
    a.opt_hue = 1  # a plain value where an enum is declared
    a.hues = [Hue.RED, "not a member"]
    a.raw = bytearray()
    a.ref_pairs = [(b, 1.5)]
    b.pair_set = {(1, "x")}
    b.str_opt_ref = {"k": a}
    b.opt_pair = (1,)
    return [a, b]


def _saved(root: Any, engine: str) -> bytes:
    return state.dumps(root, engine=engine)


@pytest.mark.parametrize("make", [_rich, _misfits, lambda: [Kinds()]])
@pytest.mark.parametrize("saved_with", ["native", "typed"])
def test_native_loads_what_typed_loads(make: Any, saved_with: str) -> None:
    root = make()
    data = _saved(root, saved_with)
    typed, loaded = state.loads(data, engine="typed"), state.loads(data, engine="native")
    assert graph_diff(typed, loaded) is None
    assert graph_diff(root, loaded) is None


def test_shared_containers_and_cycles_resolve_as_in_typed() -> None:
    a, b, c = state.loads(_saved(_rich(), "native"), engine="native")
    assert a.opt_list is b.opt_list is b.anys and a.raw is b.raw and a.str_any is b.str_any
    assert a.ref_ref[0] is a and a.refs[2] is a and a.nested[0][0] is a
    assert a.by_ref[a] == 1 and a.ref_ref_map[b] is a and a.str_opt_ref["self"] is a
    assert type(a.raw) is bytearray and type(c.opt_list) is list


# --- every wire shape a slot can hold -----------------------------------------------


def _row(payload: list) -> list:
    t = next(
        i for i, e in enumerate(payload[wire.TYPES]) if e[0] == "tests.native_load_kinds.Kinds"
    )
    return payload[wire.ROWS][t]


def _outcome(data: bytes, engine: str) -> tuple[str, Any]:
    try:
        return "value", state.loads(data, engine=engine)
    except state.StateError as exc:
        return "error", str(exc).removeprefix(f"{engine} load failed: ")


SHAPES = [
    None,
    0,
    1,
    -1,
    2**64 - 1,
    1.5,
    "x",
    b"b",
    True,
    [],
    [None],
    [0],
    [1, 2],
    [0, 1, 2],
    [[1, 2]],
    [[0, 1], [1, 0]],
    [[0], []],
    [[0, 1], [1]],
    [["a", "b"], [1, 2]],
    [[[1, 2]], ["x"]],
    [[1, 1], [2, 3]],  # a repeated key
    [[{0: 1}], [1]],
    [[1], [{0: 1}]],
    [[1], [{7: "99999999999999999999999"}]],
    [{0: 1}, {1: [1, {0: 1}]}, {7: "123"}, {7: 5}, {2: [1]}, {99: 1}],
    [{0: 99}, {0: -1}],
    [[1, [2, [3]]]],
    [1, 2, 99],  # an id beyond the objects
    [4],  # the first id beyond: objects 0 (None) to 3
    [4, 1],
    [[4], [1]],
    [[1], [4]],
    [[4, 1]],
    [None, 1],
    [[None], [None]],
    {0: 1},
    {8: None},
    {8: [1, 2]},
    {1: [1]},
    "blue",
    {7: "1180591620717411303424"},
]


@pytest.mark.parametrize("column", range(len(schema_of(Kinds).fields)))
def test_every_wire_shape_gets_typed_outcome(column: int, watchdog: None) -> None:
    payload = wire.unframe(_saved(_rich(), "typed"))
    failures = []
    for shape in SHAPES:
        for row in range(3):
            changed = wire.unframe(_saved(_rich(), "typed"))
            _row(changed)[row][column] = shape
            data = wire.frame(changed)
            (nk, nv), (tk, tv) = _outcome(data, "native"), _outcome(data, "typed")
            if nk != tk or (nk == "error" and nv != tv):
                failures.append((row, shape, nk, nv, tk, tv))
            elif nk == "value" and (diff := graph_diff(tv, nv)) is not None:
                failures.append((row, shape, diff))
    assert payload and failures == []


# --- damage: StateError, never a crash ----------------------------------------------


@pytest.fixture(scope="module")
def rich_streams() -> dict[str, bytes]:
    return {e: _saved(_rich(), e) for e in ("native", "typed")}


@pytest.mark.parametrize("saved_with", ["native", "typed"])
def test_truncated_at_every_length(saved_with: str, rich_streams: dict, watchdog: None) -> None:
    data = rich_streams[saved_with]
    for n in range(len(data)):
        with pytest.raises(state.StateError):
            state.loads(data[:n], engine="native")


def _framed(body: bytes) -> bytes:
    """A payload's bytes in a frame whose header and checksum are right, so that the
    reader, not the frame check, meets whatever they hold."""
    return wire._HEADER.pack(wire.MAGIC, wire.FORMAT_VERSION, zlib.crc32(body), len(body)) + body


@pytest.mark.parametrize("saved_with", ["native", "typed"])
def test_byte_flips_inside_valid_frames(
    saved_with: str, rich_streams: dict, watchdog: None
) -> None:
    """Each payload byte flipped, the frame made valid again: the native load gives a
    StateError or typed's graph, never another exception."""
    body = bytes(wire.check_frame(rich_streams[saved_with]))
    rng = random.Random(f"kinds-{saved_with}")
    failures = []
    for i in range(len(body)):
        damaged = bytearray(body)
        damaged[i] ^= 1 << rng.randrange(8)
        data = _framed(bytes(damaged))
        (nk, nv), (tk, tv) = _outcome(data, "native"), _outcome(data, "typed")
        if nk == tk == "value" and graph_diff(tv, nv) is not None:
            failures.append((i, graph_diff(tv, nv)))
    assert failures == []


def _captured_fill(data: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """The arguments of the read_fill call that fills the Kinds objects of ``data``
    (objects list copied: a load empties it), and the enums its context decodes with."""
    calls, enums = [], []
    real_fill, real_ctx = native._core.read_fill, native._load_ctx

    def fill(shells: list, body: Any, start: int, plan: tuple, objs: list, ctx: Any) -> Any:
        if shells and type(shells[0]) is Kinds:
            calls.append((list(shells), bytes(body), start, plan, list(objs)))
        return real_fill(shells, body, start, plan, objs, ctx)

    def ctx(objs: list, enum_list: list) -> Any:
        enums.append(enum_list)
        return real_ctx(objs, enum_list)

    monkeypatch.setattr(native._core, "read_fill", fill)
    monkeypatch.setattr(native, "_load_ctx", ctx)
    state.loads(data, engine="native")
    monkeypatch.undo()
    ((shells, body, start, plan, objs),) = calls
    return shells, body, start, plan, objs, enums[0]


@pytest.mark.parametrize("saved_with", ["native", "typed"])
def test_rows_cut_at_every_length_are_state_errors(
    saved_with: str, rich_streams: dict, monkeypatch: pytest.MonkeyPatch, watchdog: None
) -> None:
    """The reader itself given rows cut short at every byte (the frame and the split
    would refuse such a stream first): StateError, never a read past the end."""
    shells, body, start, plan, objs = _captured_fill(rich_streams[saved_with], monkeypatch)[:5]
    enums = _captured_fill(rich_streams[saved_with], monkeypatch)[5]
    end = native._core.read_fill(shells, body, start, plan, objs, native._load_ctx(objs, enums))
    assert end > start
    for n in range(start, end):
        cut = bytearray(body[:n])  # nothing after the cut to read by mistake
        with pytest.raises(state.StateError) as err:
            native._core.read_fill(shells, cut, start, plan, objs, native._load_ctx(objs, enums))
        # where the reader says it stopped: never past the bytes it was given
        at = re.search(r"at payload offset (-?\d+)", str(err.value))
        assert at is None or start <= int(at[1]) <= n, (n, str(err.value))


# --- hypothesis: random graphs over every kind --------------------------------------

_scalars = (
    st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=4)
    | st.binary(max_size=4)
    | st.none()
    | st.booleans()
)
_ints = st.integers(-(2**66), 2**66)
_pairs = st.tuples(st.integers(-(2**64), 2**64), st.integers(-3, 3))


@st.composite
def _graphs(draw: Any) -> list[Kinds]:
    nodes = [Kinds() for _ in range(draw(st.integers(1, 4)))]
    ref = st.sampled_from(nodes)
    opt_ref = st.none() | ref
    anys = _scalars | ref | st.tuples(_scalars, ref)
    small = {"max_size": 3}
    for n in nodes:
        n.ref_int = draw(st.just(()) | st.tuples(ref, _ints))
        n.ref_ref = draw(st.just(()) | st.tuples(ref, ref))
        n.refs = draw(st.lists(ref, **small).map(tuple))
        n.anys = draw(st.lists(anys, **small))
        n.any_set = draw(st.sets(st.integers() | st.text(max_size=2) | ref, **small))
        n.any_tuple = draw(st.lists(anys, **small).map(tuple))
        n.opt_ints = draw(st.lists(st.none() | _ints, **small))
        n.by_ref = draw(st.dictionaries(ref, _ints, **small))
        n.str_any = draw(st.dictionaries(st.text(max_size=2), anys, **small))
        n.str_opt_ref = draw(st.dictionaries(st.text(max_size=2), opt_ref, **small))
        n.ref_ref_map = draw(st.dictionaries(ref, ref, **small))
        n.str_pair = draw(st.dictionaries(st.text(max_size=2), _pairs, **small))
        n.pair_str = draw(st.dictionaries(_pairs, st.text(max_size=2), **small))
        n.opt_hue = draw(st.none() | st.sampled_from(Hue))
        n.hues = draw(st.lists(st.sampled_from(Hue), **small))
        n.str_hue = draw(st.dictionaries(st.text(max_size=2), st.sampled_from(Hue), **small))
        n.opt_list = draw(st.none() | st.lists(_ints, **small))
        n.opt_dict = draw(st.none() | st.dictionaries(st.text(max_size=2), _ints, **small))
        n.opt_pair = draw(st.none() | _pairs)
        n.raw = bytearray(draw(st.binary(max_size=5)))
        n.ref_pairs = draw(st.lists(st.tuples(ref, _ints), **small))
        n.pair_set = draw(st.sets(_pairs, **small))
        n.pair_frozen = draw(st.frozensets(st.tuples(st.integers(), st.floats()), **small))
        n.nested = draw(st.lists(st.lists(opt_ref, **small), **small))
    if draw(st.booleans()) and nodes[0].opt_list is not None:  # shared by two fields
        nodes[-1].opt_list = nodes[0].opt_list
    return nodes


@settings(
    max_examples=80,
    deadline=None,
    # the watchdog bounds the whole run, not each example
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(nodes=_graphs(), saved_with=st.sampled_from(["native", "typed"]))
def test_random_graphs_load_as_typed_loads_them(
    nodes: list[Kinds], saved_with: str, watchdog: None
) -> None:
    data = _saved(nodes, saved_with)
    typed, loaded = state.loads(data, engine="typed"), state.loads(data, engine="native")
    assert graph_diff(typed, loaded) is None
    assert graph_diff(nodes, loaded) is None


# --------------------------------------------------------------------------------------
# ``list[tuple[A, B, ...]]`` of scalars is read in C (``L_SEQ_TUPLE``, e.g. a memory
# manager's auxv): every value comes back as typed loads it, and a row C does not take
# (another arity, a nested array or map, an escape) gets typed's value or StateError.


@state.savable(name="tests.native_tuple_lists.Aux")
@dataclass(eq=False)
class Aux:
    pairs: list[tuple[int, int]] = field(default_factory=list)
    named: list[tuple[str, int, float]] = field(default_factory=list)
    after: int = 0


scalars = (
    st.integers(-(2**70), 2**70)  # beyond 64 bits: escaped by the writer
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.binary(max_size=4)
    | st.none()
    | st.booleans()
)
auxes = st.builds(
    Aux,
    pairs=st.lists(st.tuples(st.integers(-(2**63), 2**64 - 1), st.integers(0, 2**31)), max_size=6),
    named=st.lists(st.tuples(scalars, scalars, scalars), max_size=4),
    after=st.integers(0, 9),
)


def _same(a: Aux, b: Aux) -> None:
    for name in ("pairs", "named", "after"):
        x, y = getattr(a, name), getattr(b, name)
        assert type(x) is type(y) and x == y, name
        if isinstance(x, list):
            assert all(type(p) is tuple for p in x)
            assert [[type(i) for i in p] for p in x] == [[type(i) for i in p] for p in y]


@settings(max_examples=150, deadline=None)
@given(st.lists(auxes, min_size=1, max_size=4))
def test_lists_of_tuples_load_as_typed_loads_them(objs: list[Aux]) -> None:
    data = state.dumps(objs, engine="native")
    assert data == state.dumps(objs, engine="typed")
    native, typed = state.loads(data, engine="native"), state.loads(data, engine="typed")
    for a, b, o in zip(native, typed, objs, strict=True):
        _same(a, b)
        _same(a, o)


def test_empty_and_shared_lists_keep_their_identity_rules() -> None:
    shared = [(1, 2)]
    objs = [Aux(pairs=shared), Aux(pairs=shared), Aux()]
    data = state.dumps(objs, engine="native")
    a, b, c = state.loads(data, engine="native")
    assert a.pairs is b.pairs and a.pairs == [(1, 2)]
    assert c.pairs == [] and c.pairs is not c.named


def _with(value: Any) -> bytes:
    """A checksum-valid stream of one Aux whose ``pairs`` slot holds ``value``."""
    payload = wire.unframe(state.dumps(Aux(pairs=[(1, 2)]), engine="typed"))
    (rows,) = [r for r in payload[wire.ROWS] if isinstance(r, list) and r and len(r[0]) == 3]
    rows[0][0] = value
    return wire.frame(payload)


def _outcome_tuple_lists(data: bytes, engine: str) -> tuple[str, Any]:
    try:
        obj = state.loads(data, engine=engine)
    except state.StateError as exc:
        return "error", str(exc).removeprefix(f"{engine} load failed: ")
    # {0: 1} in a tuple is a reference to object 1, the root itself: named, not compared
    return "value", [tuple("<root>" if x is obj else x for x in p) for p in obj.pairs]


@pytest.mark.parametrize(
    "value",
    [
        None,
        [],
        [[1, 2], [3]],  # arity
        [[1, 2, 3]],
        [[1, [2]]],  # a nested array: kept as typed keeps it
        [[1, {0: 1}]],  # a map where a scalar is expected
        [[1, {8: 5}]],
        [5],
        [None],
        "x",
        {8: [[1, 2]]},  # a slot escape
        [[2**64 - 1, -(2**63)]],
        [[b"raw", "text"]],
    ],
)
def test_a_row_c_does_not_take_gets_typed_outcome(value: Any) -> None:
    data = _with(value)
    native, typed = _outcome_tuple_lists(data, "native"), _outcome_tuple_lists(data, "typed")
    assert native == typed


# --------------------------------------------------------------------------------------
# The native reader's dict fields read straight from the bytes (``dict[K, Ref]`` and
# ``dict[K, V]`` of scalars): for every wire shape a dict slot can hold in a checksum-valid
# frame (fitting, empty, None, keys and values of different counts, ids out of range,
# nested keys or values, a map), the native load gives what the typed engine's gives: the
# same graph or a StateError/TypeError of the same type.


@state.savable(name="test.native.DictReadLeaf")
@dataclass(eq=False)
class DictReadLeaf:
    n: int = 0


@state.savable(name="test.native.DictRead")
@dataclass(eq=False)
class DictRead:
    refs: dict[int, DictReadLeaf] = field(default_factory=dict)
    mid: int = 1  # a scalar after each dict: a reader that runs past one would take it
    table: dict[str, int] = field(default_factory=dict)
    after: int = 1


def _graph(n: int) -> DictRead:
    leaves = [DictReadLeaf(i) for i in range(3)]
    return DictRead(
        refs={i * 131: leaves[i % 3] for i in range(n)},
        table={f"k{i}": i * 70000 for i in range(n)},
    )


@pytest.mark.parametrize("n", [0, 1, 15, 16, 300, 70000])
def test_dict_fields_load_as_typed_loads_them(n: int) -> None:
    root = _graph(n)
    data = state.dumps(root, engine="typed")
    loaded = state.loads(data, engine="native")
    assert graph_diff(root, loaded) is None
    assert list(loaded.refs) == list(root.refs) and list(loaded.table) == list(root.table)


def _type_index(payload: list) -> int:
    """The type index of DictRead in a decoded payload's type table."""
    return next(
        i for i, entry in enumerate(payload[wire.TYPES]) if entry[0] == "test.native.DictRead"
    )


SHAPES_DICTS: list[tuple[str, Any, Any]] = [
    ("fitting", [[1, 2], [1, 2]], [["a", "b"], [1, 2]]),
    ("empty", [[], []], [[], []]),
    ("none", None, None),
    ("more-values", [[1], [1, 2]], [["a"], [1, 2]]),
    ("more-keys", [[1, 2], [1]], [["a", "b"], [1]]),
    ("id-out-of-range", [[1], [99]], [["a"], [2**64 - 1]]),
    ("negative-id", [[1], [-1]], [["a"], [-1]]),
    ("nested-key", [[[1]], [1]], [[["a"]], [1]]),
    ("nested-value", [[1], [[1]]], [["a"], [[1]]]),
    ("duplicate-keys", [[1, 1], [1, 2]], [["a", "a"], [1, 2]]),
    ("three-items", [[1], [1], [1]], [["a"], [1], [1]]),
    ("a-map", {"1": 1}, {"a": 1}),
    ("scalar", 7, "x"),
    ("string-ids", [[1], ["1"]], [["a"], ["1"]]),
]


def _outcome_dicts(data: bytes, engine: str) -> Any:
    try:
        return state.loads(data, engine=engine)
    except (state.StateError, TypeError) as exc:
        return type(exc)


@pytest.mark.parametrize(("name", "refs", "table"), SHAPES_DICTS, ids=[s[0] for s in SHAPES_DICTS])
def test_every_dict_slot_shape_loads_as_typed_loads_it(name: str, refs: Any, table: Any) -> None:
    payload = wire.unframe(state.dumps(_graph(2), engine="typed"))
    row = payload[wire.ROWS][_type_index(payload)][0]
    row[0], row[2] = refs, table
    data = wire.frame(payload)
    typed, native = _outcome_dicts(data, "typed"), _outcome_dicts(data, "native")
    if isinstance(typed, type):
        assert native is typed, (name, typed, native)
    else:
        assert not isinstance(native, type), (name, native)
        assert graph_diff(typed, native) is None, name
