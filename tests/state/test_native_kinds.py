# ruff: noqa: UP045 (Optional[...] is one of the kinds under test)
"""Field kinds the native core writes (and reads) in C: the stream stays typed's byte for
byte with no call into typed's per-field code, and every value comes back exactly.

One section per family of kinds: containers, enums and bytearray; tuples; nested
containers; tuples holding references; ints beyond 64 bits; the root value; datetime,
date, timedelta and UUID fields.  The load side's kinds are in test_native_load_kinds.
"""

from __future__ import annotations

import collections
import datetime as dt
import enum
import itertools
import math
import random
import sys
import uuid
import zlib
import zoneinfo
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.state import native, schema, wire

from .graph_equal import assert_graph_equal, graph_diff
from .models import Color as RootColor
from .models import Leaf, Level, Node
from .requires import requires_native
from .test_native_damage import body_of, framed

pytestmark = requires_native


# --------------------------------------------------------------------------------------
# Field kinds the native core saves in C with no call into typed's per-field code:
# ``Optional`` containers and tuples, enums inside containers and tuples, frozensets of
# references, ``bytearray``, sets and dicts of tuples, and enums typed never writes
# compactly (member values that are tuples or floats, Flags).
#
# typed is the byte-for-byte reference: for every value, fitting or not (a subclass, an
# int beyond 64 bits, a wrong type, None where it is not allowed), the native stream must
# equal typed's, and both engines must load it back to the same graph.  A value that does
# not fit its op exactly goes to the slot function for that value alone.


class Color(enum.Enum):
    RED = 1
    GREEN = 2
    BLUE = "blue"


class Point(enum.Enum):  # not compact: tuple values
    ORIGIN = (0, 0)
    ONE = (1, 1)


class Ratio(enum.Enum):  # not compact: float values
    HALF = 0.5
    INF = math.inf


class Odd(enum.Enum):  # a member whose value is NaN (test_enum_nan.py has more)
    NAN = math.nan


class Perm(enum.Flag):  # not compact: combinations are members too
    R = 1
    W = 2
    X = 4


class SubList(list):
    pass


class SubBytes(bytearray):
    pass


@state.savable(name="tests.native_save_kinds.Kinds")
@dataclass(eq=False, repr=False)  # a failing test prints no cyclic graph
class Kinds:
    # Optional containers, tuples and enums
    ol: Optional[list[int]] = None
    od: Optional[dict[str, int]] = None
    ot: Optional[tuple[int, int]] = None
    ovt: Optional[tuple[int, ...]] = None
    osr: Optional[set[Kinds]] = None
    olr: Optional[list[Kinds]] = None
    ofs: Optional[frozenset[str]] = None
    oba: Optional[bytearray] = None
    opt_point: Optional[Point] = None
    odc: Optional[dict[Color, float]] = None
    # enums in containers and tuples
    lc: list[Color] = field(default_factory=list)
    sc: set[Color] = field(default_factory=set)
    dsc: dict[str, Color] = field(default_factory=dict)
    dci: dict[Color, int] = field(default_factory=dict)
    tci: tuple[Color, int] = (Color.RED, 0)
    tic: tuple[int, Optional[Color]] = (0, None)
    tce: tuple[Color, ...] = ()
    loc: list[Optional[Color]] = field(default_factory=list)
    lp: list[Point] = field(default_factory=list)
    # references
    fr: frozenset[Kinds] = frozenset()
    for_: frozenset[Optional[Kinds]] = frozenset()
    trc: tuple[Kinds, Color] | None = None
    # bytes-like
    ba: bytearray = field(default_factory=bytearray)
    # tuples inside sets and dicts; tuples of Optional scalars
    st2: set[tuple[int, int]] = field(default_factory=set)
    dtk: dict[tuple[int, int], str] = field(default_factory=dict)
    dtv: dict[str, tuple[int, ...]] = field(default_factory=dict)
    fst: frozenset[tuple[str, int]] = frozenset()
    tos: tuple[int, Optional[str]] = (0, None)
    tvo: tuple[Optional[float], ...] = ()
    # enums typed always escapes
    point: Point = Point.ORIGIN
    ratio: Ratio = Ratio.HALF
    perm: Perm = Perm.R
    label: int = 0


ANNOTATIONS = {f.name: f.type for f in fields(Kinds)}


def test_every_kind_here_has_a_c_op() -> None:
    """The plan: no field of Kinds leaves the C path for typed's slot function."""
    sch = schema.schema_of(Kinds)
    py = [s.kind.descriptor for s in sch.fields if native._field_op(s.kind)[0] == native.OP_PY]
    assert py == []
    assert len(sch.fields) == len(ANNOTATIONS) > 30


def _check(root: Any) -> bytes | None:
    """Native's bytes are typed's and load back as the graph; or both refuse it alike."""
    try:
        expected = state.dumps(root, engine="typed")
    except state.StateError as exc:
        with pytest.raises(state.StateError) as got:
            state.dumps(root, engine="native")
        assert str(got.value).replace("native", "typed", 1) == str(exc)
        return None
    data = state.dumps(root, engine="native")
    if data != expected:  # where, not a diff of two long byte strings
        at = next(
            (i for i, (a, b) in enumerate(zip(data, expected, strict=False)) if a != b),
            min(len(data), len(expected)),
        )
        pytest.fail(f"native differs from typed at byte {at}: {data[at : at + 16]!r}")
    for engine in ("native", "typed"):
        assert_graph_equal(root, state.loads(data, engine=engine))
    return data


def _full(n: int) -> list[Kinds]:
    objs = [Kinds(label=i) for i in range(n)]
    for i, o in enumerate(objs):
        other = objs[(i + 1) % n]
        o.ol = [i, -i, 2**63] if i % 3 else ([] if i % 2 else None)
        o.od = {"a": i, "b": 2**64 - 1} if i % 2 else ({} if i % 3 else None)
        o.ot = (i, i + 1) if i % 2 else None
        o.ovt = tuple(range(i % 4)) if i % 3 != 1 else None
        o.osr = {other, o} if i % 2 else (set() if i % 3 else None)
        o.olr = [other, other, None] if i % 3 else None
        o.ofs = frozenset({"x", str(i)}) if i % 2 else (frozenset() if i % 3 else None)
        o.oba = bytearray(b"o" * i) if i % 2 else (bytearray() if i % 3 else None)
        o.opt_point = [None, Point.ONE, Point.ORIGIN][i % 3]
        o.odc = {Color.RED: 0.5, Color.BLUE: -math.inf} if i % 2 else None
        o.lc = [Color.RED, Color.BLUE, Color.RED][: i % 4]
        o.sc = {Color.GREEN, Color.BLUE} if i % 2 else set()
        o.dsc = {"k": Color.GREEN, str(i): Color.BLUE} if i % 3 else {}
        o.dci = {Color.RED: i, Color.BLUE: -(2**63)}
        o.tci = (Color.BLUE, i)
        o.tic = (i, None if i % 2 else Color.RED)
        o.tce = (Color.RED,) * (i % 3)
        o.loc = [None, Color.GREEN]
        o.lp = []  # an empty list of a non-compact enum fits (Nil)
        o.fr = frozenset({other, objs[0]})
        o.for_ = frozenset({None, other}) if i % 2 else frozenset()
        o.trc = (other, Color.GREEN) if i % 2 else None
        o.ba = bytearray(b"ab" * i)
        o.st2 = {(i, 1), (2, i)}
        o.dtk = {(i, 0): "x", (1, 2): "y"}
        o.dtv = {"a": (), "b": (1, 2, 2**63)}
        o.fst = frozenset({("a", i)})
        o.tos = (i, None if i % 2 else "s")
        o.tvo = (math.nan, None, math.inf, -0.0)[: i % 5]
        o.point = [Point.ORIGIN, Point.ONE][i % 2]
        o.ratio = [Ratio.HALF, Ratio.INF][i % 2]
        o.perm = [Perm.R, Perm.R | Perm.W, Perm(0)][i % 3]
    return objs


def test_every_kind_is_typed_s_bytes_with_no_python_slot() -> None:
    objs = _full(12)
    with python_slots() as calls:
        _check(objs)
    assert not [k for k in calls if k.startswith("save ")], calls


def test_shared_containers_in_optional_fields_stay_shared() -> None:
    """An Optional field's list met again is written Nil and recorded as shared, after
    its items were checked (typed's compact form checks first)."""
    objs = _full(4)
    shared_list, shared_set = [1, 2], {objs[1]}
    objs[0].ol = objs[1].ol = shared_list
    objs[2].osr = objs[3].osr = shared_set
    objs[0].oba = objs[2].oba = bytearray(b"shared")
    objs[1].ba = objs[3].ba = bytearray(b"both")
    objs[0].od = objs[3].od = {}
    _check(objs)
    back = state.loads(state.dumps(objs, engine="native"), engine="native")
    assert back[0].ol is back[1].ol and back[2].osr is back[3].osr
    assert back[0].oba is back[2].oba and back[1].ba is back[3].ba


MISFITS: list[tuple[str, Any]] = [
    ("ol", SubList([1])),
    ("ol", [1, 2**70]),
    ("ol", [1, "x"]),
    ("ol", (1, 2)),
    ("od", {"a": 2**64}),
    ("od", {1: 1}),
    ("ot", (1, 2, 3)),
    ("ot", (1, 2.0)),
    ("ot", [1, 2]),
    ("ovt", (1, None)),
    ("osr", {1}),
    ("osr", frozenset()),
    ("olr", [object.__new__(Kinds), 5]),
    ("ofs", frozenset({1})),
    ("oba", SubBytes(b"x")),
    ("oba", b"bytes"),
    ("opt_point", Color.RED),
    ("opt_point", 3),
    ("odc", {Color.RED: "x"}),
    ("lc", [Color.RED, 1]),
    ("lc", [Point.ONE]),
    ("sc", {Color.RED, None}),
    ("dsc", {"a": Point.ONE}),
    ("dci", {Color.RED: 2**64}),
    ("dci", {1: 1}),
    ("tci", (1, Color.RED)),
    ("tci", (Color.RED,)),
    ("tic", (1, Point.ONE)),
    ("tce", (Color.RED, None)),
    ("tce", [Color.RED]),
    ("loc", [Color.RED, 0]),
    ("lp", [Point.ONE]),
    ("fr", frozenset({1})),
    ("fr", {object.__new__(Kinds)}),
    ("for_", frozenset({"x"})),
    ("trc", (None, Color.RED)),
    ("trc", (1, Color.RED)),
    ("ba", SubBytes(b"s")),
    ("ba", None),
    ("ba", b"x"),
    ("st2", {(1, 2, 3)}),
    ("st2", {(1, 2**64)}),
    ("dtk", {(1,): "a"}),
    ("dtk", {(1, 2): 3}),
    ("dtv", {"a": [1]}),
    ("dtv", {"a": (1, "x")}),
    ("fst", frozenset({("a", 2**70)})),
    ("tos", (1, 2)),
    ("tvo", (1.5, "x")),
    ("point", None),
    ("point", (0, 0)),
    ("ratio", 0.5),
    ("perm", 1),
    ("label", 2**80),
]


@pytest.mark.parametrize(
    ("name", "value"), MISFITS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(MISFITS)]
)
def test_a_misfit_is_typed_s_escape(name: str, value: Any) -> None:
    objs = _full(3)
    setattr(objs[1], name, value)
    _check(objs)


def test_a_shared_misfit_in_an_optional_field_escapes_after_the_memo() -> None:
    """A list met before that does not fit an Optional[list[int]]: typed tests the items
    first, so the second place is an escape of a container seen again, not Nil."""
    objs = _full(3)
    shared = [1, "x"]
    objs[0].ol = objs[2].ol = shared
    _check(objs)


def test_enum_members_and_the_empty_and_the_odd() -> None:
    objs = [Kinds(label=i) for i in range(3)]
    objs[0].perm = Perm.R | Perm.W | Perm.X
    objs[1].ratio = Ratio.INF
    objs[2].tvo = (math.nan, -math.inf)
    objs[2].od = {}
    objs[2].ovt = ()
    _check(objs)


def test_the_empty_forms_match() -> None:
    """Empty plain containers are Nil; empty Optional ones their compact form."""
    o = Kinds(
        ol=[],
        od={},
        ovt=(),
        osr=set(),
        olr=[],
        ofs=frozenset(),
        oba=bytearray(),
        odc={},
    )
    data = _check(o)
    back = state.loads(data, engine="native")
    assert back.ol == [] and back.od == {} and back.ovt == () and back.oba == bytearray()


def test_a_nan_valued_member_is_typed_s_bytes() -> None:
    """Enum(nan) finds no member (nan != nan); the bytes are still typed's, and both
    engines load the member back as itself."""
    o = Kinds(ratio=Odd.NAN)  # type: ignore[arg-type]
    data = state.dumps(o, engine="native")
    assert data == state.dumps(o, engine="typed")
    for engine in ("native", "typed"):
        assert state.loads(data, engine=engine).ratio is Odd.NAN


# ---- hypothesis: random values of every kind, fitting or not ----------------------

_ints = st.one_of(st.integers(-5, 5), st.sampled_from([2**63, -(2**63), 2**64, -(2**63) - 1]))
_floats = st.floats(allow_nan=True, allow_infinity=True) | _ints
_scalar = st.one_of(st.none(), st.booleans(), _ints, _floats, st.text(max_size=3))
_colors = st.sampled_from(list(Color))
_odd = st.one_of(_scalar, _colors, st.sampled_from([*Point, *Ratio, Perm.R | Perm.X]))


def _values(name: str, nodes: st.SearchStrategy) -> st.SearchStrategy:
    """Values that fit the field most of the time, and sometimes do not."""
    node_or_none = st.none() | nodes
    fitting: dict[str, st.SearchStrategy] = {
        "ol": st.none() | st.lists(_ints, max_size=4),
        "od": st.none() | st.dictionaries(st.text(max_size=2), _ints, max_size=3),
        "ot": st.none() | st.tuples(_ints, _ints),
        "ovt": st.none() | st.lists(_ints, max_size=3).map(tuple),
        "osr": st.none() | st.sets(nodes, max_size=3),
        "olr": st.none() | st.lists(node_or_none, max_size=3),
        "ofs": st.none() | st.frozensets(st.text(max_size=2), max_size=3),
        "oba": st.none() | st.binary(max_size=4).map(bytearray),
        "opt_point": st.none() | st.sampled_from(list(Point)),
        "odc": st.none() | st.dictionaries(_colors, _floats, max_size=3),
        "lc": st.lists(_colors, max_size=4),
        "sc": st.sets(_colors),
        "dsc": st.dictionaries(st.text(max_size=2), _colors, max_size=3),
        "dci": st.dictionaries(_colors, _ints, max_size=3),
        "tci": st.tuples(_colors, _ints),
        "tic": st.tuples(_ints, st.none() | _colors),
        "tce": st.lists(_colors, max_size=3).map(tuple),
        "loc": st.lists(st.none() | _colors, max_size=3),
        "lp": st.lists(st.sampled_from(list(Point)), max_size=2),
        "fr": st.frozensets(nodes, max_size=3),
        "for_": st.frozensets(node_or_none, max_size=3),
        "trc": st.none() | st.tuples(nodes, _colors),
        "ba": st.binary(max_size=4).map(bytearray),
        "st2": st.sets(st.tuples(_ints, _ints), max_size=3),
        "dtk": st.dictionaries(st.tuples(_ints, _ints), st.text(max_size=2), max_size=3),
        "dtv": st.dictionaries(st.text(max_size=2), st.lists(_ints, max_size=3).map(tuple)),
        "fst": st.frozensets(st.tuples(st.text(max_size=2), _ints), max_size=3),
        "tos": st.tuples(_ints, st.none() | st.text(max_size=2)),
        "tvo": st.lists(st.none() | _floats, max_size=3).map(tuple),
        "point": st.sampled_from(list(Point)),
        "ratio": st.sampled_from(list(Ratio)),
        "perm": st.sampled_from([Perm.R, Perm.W | Perm.X, Perm(0)]),
        "label": _ints,
    }
    misfit = st.one_of(
        _odd,
        st.lists(_odd, max_size=2),
        st.lists(_odd, max_size=2).map(tuple),
        st.frozensets(_odd, max_size=2),
        nodes,
    )
    return st.one_of(fitting[name], fitting[name], fitting[name], misfit)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_values_of_every_kind(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 5))
    objs = [Kinds(label=i) for i in range(n)]
    nodes = st.sampled_from(objs)
    names = list(ANNOTATIONS)
    for o in objs:
        for name in data.draw(st.lists(st.sampled_from(names), max_size=8, unique=True)):
            setattr(o, name, data.draw(_values(name, nodes), label=name))
    if n > 1 and data.draw(st.booleans()):  # a container in two places
        shared = data.draw(st.sampled_from(["ol", "osr", "oba", "ba", "lc", "od"]))
        setattr(objs[-1], shared, getattr(objs[0], shared))
    _check(objs)


def _field(op: int, kop: int = 0, vop: int = 0, arg: Any = None, mask: int = 0) -> tuple:
    return ("x", op, mask, kop, 0, vop, 0, 0, None, arg, 0)


@pytest.mark.parametrize(
    "entry",
    [
        _field(native.OP_ENUM_DYN, arg=5),  # not a class
        _field(native.OP_LIST, kop=native.E_ENUM, arg=(5, None)),
        _field(native.OP_LIST, kop=native.E_SCALAR, arg=(Color, None)),  # arg without an op
        _field(native.OP_DICT, kop=native.E_TUPLE, vop=native.E_TUPLE, arg=((4, 4), (4,))),
        _field(native.OP_SET, kop=native.E_ENUM, arg=(Color,)),  # not a pair
        _field(native.OP_TUPLE, vop=native.E_REF, arg=((native._M_ENUM | 4, Color),)),
        _field(native.OP_TUPLE, vop=native.E_REF, arg=((native._M_ENUM, 5),)),
        _field(native.OP_TUPLE, vop=native.E_REF, arg=("x",)),
    ],
)
def test_a_malformed_plan_for_these_kinds_is_an_error(entry: tuple) -> None:
    with pytest.raises(SystemError):
        native._core.Plan(None, "n", False, False, (entry,))


# --------------------------------------------------------------------------------------
# Tuples the native core saves in C with no call into typed's per-field code:
# ``tuple[Any, ...]`` and the bare ``tuple`` (the same kind), ``Optional`` ones, fixed
# tuples with ``Any`` positions, fixed tuples holding references inside lists, sets,
# frozensets and dicts, and one level of nested lists (``list[list[int]]``,
# ``list[list[Node | None]]``, ``dict[str, list[int]]``; the depth is the annotation's).
#
# typed is the byte-for-byte reference (the first section's ``_check``): a tuple is
# not identity-tracked (immutable), the containers inside an ``Any`` item are, as dyn
# tracks them; a value that does not fit (a tuple subclass, a wrong length, an int beyond
# 64 bits where a position says int) goes to the slot function for that value alone.


class SubTuple(tuple):
    pass


class TuplesSubList(list):
    pass


@state.savable(name="tests.native_save_tuples.Tup")
@dataclass(eq=False, repr=False)  # a failing test prints no cyclic graph
class Tup:
    at: tuple[Any, ...] = ()
    bare: tuple = ()
    oat: Optional[tuple[Any, ...]] = None
    ia: tuple[int, Any] = (0, None)
    shared: list[int] = field(default_factory=list)
    label: int = 0


TUP_FIELDS = [f.name for f in fields(Tup)]


@state.savable(name="tests.native_save_tuples.Pairs")
@dataclass(eq=False, repr=False)
class Pairs:
    """Fixed tuples holding references (and enums, Optional scalars) inside containers."""

    lp: list[tuple[Pairs, int]] = field(default_factory=list)
    sp: set[tuple[Pairs, str]] = field(default_factory=set)
    dp: dict[str, tuple[Pairs, int]] = field(default_factory=dict)
    fp: frozenset[tuple[Pairs, int]] = frozenset()
    lo: list[tuple[Optional[Pairs], Color, Optional[float]]] = field(default_factory=list)
    dk: dict[tuple[Pairs, int], str] = field(default_factory=dict)
    olp: Optional[list[tuple[Pairs, int]]] = None
    label: int = 0


PAIR_FIELDS = [f.name for f in fields(Pairs)]


@state.savable(name="tests.native_save_tuples.Nest")
@dataclass(eq=False, repr=False)
class Nest:
    """One level of nested lists: each inner list identity-tracked, as typed tracks it."""

    ll: list[list[int]] = field(default_factory=list)
    llr: list[list[Optional[Nest]]] = field(default_factory=list)
    dl: dict[str, list[int]] = field(default_factory=dict)
    dlr: dict[int, list[Nest]] = field(default_factory=dict)
    oll: Optional[list[list[Optional[float]]]] = None
    inner: list[int] = field(default_factory=list)
    label: int = 0


NEST_FIELDS = [f.name for f in fields(Nest)]


@pytest.mark.parametrize("cls", [Tup, Pairs, Nest])
def test_every_tuple_kind_here_has_a_c_op(cls: type) -> None:
    """The plan: no field leaves the C path for typed's slot function."""
    sch = schema.schema_of(cls)
    py = [s.kind.descriptor for s in sch.fields if native._field_op(s.kind)[0] == native.OP_PY]
    assert py == []


def _tups(n: int) -> list[Tup]:
    objs = [Tup(label=i) for i in range(n)]
    for i, o in enumerate(objs):
        other = objs[(i + 1) % n]
        o.shared = [i, i]
        o.at = (other, None, i, 2**70, math.nan, "s", b"b", (other, (1,)), [1, other])
        o.at += ({"k": other}, {1, 2}, frozenset({"x"}), Color.BLUE, bytearray(b"x"), o.shared)
        o.bare = (i, other) if i % 2 else ()
        o.oat = None if i % 3 == 0 else () if i % 3 == 1 else (other.shared, -math.inf)
        o.ia = (i, other if i % 2 else [o.shared])
    return objs


def test_tuples_of_anything_are_typed_s_bytes_with_no_python_slot() -> None:
    objs = _tups(6)
    with python_slots() as calls:
        _check(objs)
    assert not [k for k in calls if k.startswith("save ")], calls


def test_a_container_in_a_tuple_of_anything_stays_shared() -> None:
    objs = _tups(3)
    back = state.loads(_check(objs), engine="native")
    assert back[0].at[-1] is back[0].shared and back[2].oat[0] is back[0].shared
    assert back[0].at[1] is None and back[0].at[0] is back[1]


TUPLE_MISFITS: list[tuple[str, Any]] = [
    ("at", SubTuple((1, 2))),
    ("at", [1, 2]),
    ("at", None),
    ("bare", SubTuple(())),
    ("bare", "ab"),
    ("oat", [None]),
    ("oat", SubTuple((None,))),
    ("ia", (2**64, None)),
    ("ia", (1,)),
    ("ia", (1, 2, 3)),
    ("ia", ("x", 1)),
]


@pytest.mark.parametrize(
    ("name", "value"), TUPLE_MISFITS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(TUPLE_MISFITS)]
)
def test_a_tuple_misfit_is_typed_s_escape(name: str, value: Any) -> None:
    objs = _tups(3)
    setattr(objs[1], name, value)
    _check(objs)


# ---- hypothesis: random values, fitting or not ---------------------------------------

_ints_tuples = st.one_of(
    st.integers(-5, 5), st.sampled_from([2**63, -(2**63), 2**64, -(2**63) - 1])
)
_scalar_tuples = st.one_of(
    st.none(), st.booleans(), _ints_tuples, st.floats(), st.text(max_size=3), st.binary(max_size=2)
)


def _anys(nodes: st.SearchStrategy, shared: list) -> st.SearchStrategy:
    leaf = st.one_of(_scalar_tuples, nodes, st.sampled_from(list(Color)), st.just(shared))
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(st.text(max_size=2), inner, max_size=2),
            st.frozensets(_scalar_tuples, max_size=2),
        ),
        max_leaves=6,
    )


def _tup_values(name: str, nodes: st.SearchStrategy, shared: list) -> st.SearchStrategy:
    anys = _anys(nodes, shared)
    fitting: dict[str, st.SearchStrategy] = {
        "at": st.lists(anys, max_size=4).map(tuple),
        "bare": st.lists(anys, max_size=4).map(tuple),
        "oat": st.none() | st.lists(anys, max_size=3).map(tuple),
        "ia": st.tuples(_ints_tuples, anys),
        "shared": st.just(shared),
        "label": _ints_tuples,
    }
    misfit = st.one_of(anys, st.lists(anys, max_size=2).map(SubTuple))
    return st.one_of(fitting[name], fitting[name], fitting[name], misfit)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_tuples_of_anything(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 4))
    objs = [Tup(label=i) for i in range(n)]
    nodes, shared = st.sampled_from(objs), [1, 2]
    for o in objs:
        for name in data.draw(st.lists(st.sampled_from(TUP_FIELDS), max_size=5, unique=True)):
            setattr(o, name, data.draw(_tup_values(name, nodes, shared), label=name))
    _check(objs)


@pytest.mark.parametrize(
    "entry",
    [
        ("x", native.OP_TUPLE, 0, 0, 0, native.E_REF, 0, 0, None, (native._M_ANY | 4,), 0),
        ("x", native.OP_SET, 0, native.E_LIST, 4, 0, 0, 0, None, None, 0),  # a list in a set
        ("x", native.OP_DICT, 0, native.E_LIST_REF, 0, native.E_SCALAR, 4, 0, None, None, 0),
    ],
)
def test_a_malformed_plan_for_these_kinds_is_an_error_tuples(entry: tuple) -> None:
    with pytest.raises(SystemError):
        native._core.Plan(None, "n", False, False, (entry,))


# ---- fixed tuples of references inside containers -----------------------------------


def _pairs(n: int) -> list[Pairs]:
    objs = [Pairs(label=i) for i in range(n)]
    for i, o in enumerate(objs):
        other = objs[(i + 1) % n]
        o.lp = [(other, i), (o, 2**63 - 1), (other, -1)][: 1 + i % 3]
        o.sp = {(other, "a"), (o, str(i))} if i % 2 else set()
        o.dp = {"x": (other, i), "y": (objs[0], 0)}
        o.fp = frozenset({(other, 1)}) if i % 3 else frozenset()
        o.lo = [(None, Color.RED, None), (other, Color.BLUE, math.inf), (o, Color.RED, 1.0)]
        o.dk = {(other, 1): "a", (o, i): "b"} if i % 2 else {}
        o.olp = None if i % 3 == 0 else [] if i % 3 == 1 else [(other, 7)]
    return objs


def test_tuples_of_references_in_containers_are_typed_s_bytes_with_no_python_slot() -> None:
    objs = _pairs(7)
    with python_slots() as calls:
        back = state.loads(_check(objs), engine="native")
    assert not [k for k in calls if k.startswith("save ")], calls
    assert back[0].lp[0][0] is back[1] and back[3].dp["x"][0] is back[4]


def test_a_shared_list_of_pairs_stays_shared() -> None:
    objs = _pairs(3)
    objs[0].lp = objs[2].lp = objs[1].olp = [(objs[1], 5)]
    back = state.loads(_check(objs), engine="native")
    assert back[0].lp is back[2].lp and back[0].lp[0][0] is back[1]


PAIR_MISFITS: list[tuple[str, Any]] = [
    ("lp", [(object.__new__(Pairs), 1, 2)]),
    ("lp", [(1, 1)]),
    ("lp", [(None, 1)]),  # None is no Pairs: typed escapes the list
    ("lp", [SubTuple((Pairs(), 1))]),
    ("lp", [(Pairs(), 2**64)]),
    ("lp", [[Pairs(), 1]]),
    ("lp", [(Color.RED, 1)]),
    ("sp", {(Pairs(), 1)}),
    ("dp", {"a": (Pairs(),)}),
    ("dp", {"a": (Pairs(), 1.5)}),
    ("fp", frozenset({(Pairs(), "x")})),
    ("lo", [(None, 1, None)]),
    ("lo", [(None, Point.ONE, None)]),  # a member of another enum
    ("lo", [(None, Color.RED, "x")]),
    ("lo", [(None, Color.RED, 1)]),  # an int where a float goes: the slot's, compact
    ("dk", {(1, 1): "a"}),
    ("dk", {(Pairs(), 1): 1}),
    ("olp", [(Pairs(), None)]),
]


@pytest.mark.parametrize(
    ("name", "value"), PAIR_MISFITS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(PAIR_MISFITS)]
)
def test_a_pair_misfit_is_typed_s_escape(name: str, value: Any) -> None:
    objs = _pairs(3)
    setattr(objs[1], name, value)
    _check(objs)


def _pair_values(name: str, nodes: st.SearchStrategy) -> st.SearchStrategy:
    ref_int = st.tuples(nodes, _ints_tuples)
    fitting: dict[str, st.SearchStrategy] = {
        "lp": st.lists(ref_int, max_size=3),
        "sp": st.sets(st.tuples(nodes, st.text(max_size=2)), max_size=3),
        "dp": st.dictionaries(st.text(max_size=2), ref_int, max_size=3),
        "fp": st.frozensets(ref_int, max_size=3),
        "lo": st.lists(
            st.tuples(st.none() | nodes, st.sampled_from(list(Color)), st.none() | st.floats()),
            max_size=3,
        ),
        "dk": st.dictionaries(ref_int, st.text(max_size=2), max_size=3),
        "olp": st.none() | st.lists(ref_int, max_size=3),
        "label": _ints_tuples,
    }
    odd = st.one_of(_scalar_tuples, nodes, st.sampled_from([*Color, *Point]))
    misfit = st.one_of(
        st.lists(st.tuples(odd, odd), max_size=2),
        st.lists(st.tuples(odd, odd).map(SubTuple), max_size=2),
        st.dictionaries(st.text(max_size=1), st.tuples(odd, odd), max_size=2),
        odd,
    )
    return st.one_of(fitting[name], fitting[name], fitting[name], misfit)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_pairs_in_containers(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 4))
    objs = [Pairs(label=i) for i in range(n)]
    nodes = st.sampled_from(objs)
    for o in objs:
        for name in data.draw(st.lists(st.sampled_from(PAIR_FIELDS), max_size=5, unique=True)):
            setattr(o, name, data.draw(_pair_values(name, nodes), label=name))
    if n > 1 and data.draw(st.booleans()):  # a container in two places
        objs[-1].lp = objs[0].lp
    _check(objs)


# ---- one level of nested lists -------------------------------------------------------


def _nests(n: int) -> list[Nest]:
    objs = [Nest(label=i) for i in range(n)]
    for i, o in enumerate(objs):
        other = objs[(i + 1) % n]
        o.inner = [i, -i]
        o.ll = [[1, 2**63 - 1], [], o.inner, [i]][: 1 + i % 4]
        o.llr = [[o, None, other], [], [other]]
        o.dl = {"a": [i, 2], "b": []} if i % 2 else {}
        o.dlr = {1: [other, other], 2: [o]}
        o.oll = None if i % 3 == 0 else [] if i % 3 == 1 else [[None, 0.5, -math.inf]]
    return objs


def test_nested_lists_are_typed_s_bytes_with_no_python_slot() -> None:
    objs = _nests(7)
    with python_slots() as calls:
        back = state.loads(_check(objs), engine="native")
    assert not [k for k in calls if k.startswith("save ")], calls
    assert back[3].ll[2] is back[3].inner and back[0].llr[0][2] is back[1]


def test_an_inner_list_met_twice_stays_shared() -> None:
    objs = _nests(3)
    twice = [5, 6]
    objs[0].ll = [twice, twice]
    objs[1].dl = {"x": twice, "y": objs[2].inner}
    objs[2].ll = [objs[2].inner]
    objs[1].oll = [[1.5], [1.5]]
    back = state.loads(_check(objs), engine="native")
    assert back[0].ll[0] is back[0].ll[1] is back[1].dl["x"]
    assert back[1].dl["y"] is back[2].inner is back[2].ll[0]


NEST_MISFITS: list[tuple[str, Any]] = [
    ("ll", [[1], (2,)]),
    ("ll", [[1, 2**64]]),
    ("ll", [TuplesSubList([1])]),
    ("ll", [[1, "x"]]),
    ("ll", [[1], None]),
    ("llr", [[Nest(), 1]]),
    ("llr", [(Nest(),)]),
    ("dl", {"a": [1.5]}),
    ("dl", {"a": None}),
    ("dlr", {1: [None]}),  # None is no Nest: typed escapes the dict
    ("dlr", {1: [object.__new__(Nest)], 2: [3]}),
    ("oll", [[1.5, "x"]]),
    ("oll", [[1]]),  # an int where a float goes: the slot's, compact
]


@pytest.mark.parametrize(
    ("name", "value"), NEST_MISFITS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(NEST_MISFITS)]
)
def test_a_nested_misfit_is_typed_s_escape(name: str, value: Any) -> None:
    objs = _nests(3)
    setattr(objs[1], name, value)
    _check(objs)


def test_a_shared_inner_list_that_does_not_fit_is_escaped_in_both_places() -> None:
    objs = _nests(2)
    bad = [1, "x"]
    objs[0].ll = [bad]
    objs[1].ll = [[1], bad]
    objs[1].dl = {"k": bad}
    _check(objs)


def _nest_values(name: str, nodes: st.SearchStrategy, pool: list) -> st.SearchStrategy:
    ints = st.lists(_ints_tuples, max_size=3) | st.sampled_from(pool)
    refs = st.lists(nodes, max_size=3)
    fitting: dict[str, st.SearchStrategy] = {
        "ll": st.lists(ints, max_size=3),
        "llr": st.lists(st.lists(st.none() | nodes, max_size=3), max_size=3),
        "dl": st.dictionaries(st.text(max_size=2), ints, max_size=3),
        "dlr": st.dictionaries(_ints_tuples, refs, max_size=3),
        "oll": st.none() | st.lists(st.lists(st.none() | st.floats(), max_size=3), max_size=2),
        "inner": st.sampled_from(pool),
        "label": _ints_tuples,
    }
    odd = st.one_of(_scalar_tuples, nodes, st.sampled_from(pool))
    misfit = st.one_of(
        st.lists(st.lists(odd, max_size=2), max_size=2),
        st.lists(st.lists(odd, max_size=2).map(tuple), max_size=2),
        st.dictionaries(st.text(max_size=1), st.lists(odd, max_size=2), max_size=2),
        odd,
    )
    return st.one_of(fitting[name], fitting[name], fitting[name], misfit)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_nested_lists(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 4))
    objs = [Nest(label=i) for i in range(n)]
    nodes = st.sampled_from(objs)
    pool = [[1, 2], [], [3, "x"]]  # inner lists met in several places, one a misfit
    for o in objs:
        for name in data.draw(st.lists(st.sampled_from(NEST_FIELDS), max_size=5, unique=True)):
            setattr(o, name, data.draw(_nest_values(name, nodes, pool), label=name))
    _check(objs)


# --------------------------------------------------------------------------------------
# Containers nested deeper than one level, saved in C: ``list[list[list[int]]]``,
# ``dict[str, list[list[int]]]``, ``list[dict[str, int]]``, ``list[set[Node]]`` and their
# ``Optional`` forms, through the field's nest program (E_NEST: SK_* nodes from the
# annotation, bounded by the plan, never by the input).
#
# typed is the byte-for-byte reference: for every value, fitting or not (an int beyond 64
# bits three levels down, a tuple where a list is declared, a subclass, None where it is
# not allowed, a list that holds itself), the native stream must equal typed's and both
# engines must load it back to the same graph.  A value that does not fit its field goes
# to the slot function for that value alone.


class Tone(enum.Enum):
    LOW = 1
    HIGH = "high"


class NestingSubList(list):
    pass


@state.savable(name="tests.native_save_nesting.Nest")
@dataclass(eq=False, repr=False)  # a failing test prints no cyclic graph
class NestingNest:
    lll: list[list[list[int]]] = field(default_factory=list)
    dsll: dict[str, list[list[int]]] = field(default_factory=dict)
    lds: list[dict[str, int]] = field(default_factory=list)
    lol: list[Optional[list[float]]] = field(default_factory=list)
    lsr: list[set[NestingNest]] = field(default_factory=list)
    ldr: list[dict[str, list[NestingNest]]] = field(default_factory=list)
    llr: list[list[list[Optional[NestingNest]]]] = field(default_factory=list)
    dde: dict[int, dict[Tone, list[str]]] = field(default_factory=dict)
    lfs: list[frozenset[int]] = field(default_factory=list)
    olll: Optional[list[list[list[bytes]]]] = None
    llo: list[list[Optional[Tone]]] = field(default_factory=list)
    label: int = 0


ANNOTATIONS_NESTING = {f.name: f.type for f in fields(NestingNest)}
NESTED = [name for name in ANNOTATIONS_NESTING if name != "label"]


def test_every_nested_kind_here_has_a_c_op() -> None:
    """The plan: no field of NestingNest leaves the C path; each nests through a program."""
    sch = schema.schema_of(NestingNest)
    ops = {s.name: native._field_op(s.kind) for s in sch.fields}
    assert [n for n, op in ops.items() if op[0] == native.OP_PY] == []
    assert [n for n in NESTED if native.E_NEST not in (ops[n][2], ops[n][4])] == []


def test_a_program_is_bounded_by_the_plan() -> None:
    """Deeper or larger than the load side's limits: typed's slot function, as before."""
    deep: Any = int
    for _ in range(native.MAX_ELEM_DEPTH):
        deep = list[deep]
    assert native._field_op(schema.kind_of(list[deep], "t"))[0] == native.OP_PY
    shallow: Any = int
    for _ in range(native.MAX_ELEM_DEPTH - 1):
        shallow = list[shallow]
    assert native._field_op(schema.kind_of(list[shallow], "t"))[2] == native.E_NEST
    wide = dict[str, tuple[int, int]]  # a tuple node: not in a nest program
    assert native._field_op(schema.kind_of(list[wide], "t"))[0] == native.OP_PY


def _check_nesting(root: Any) -> bytes | None:
    """Native's bytes are typed's and load back as the graph; or both refuse it alike."""
    try:
        expected = state.dumps(root, engine="typed")
    except state.StateError as exc:
        with pytest.raises(state.StateError) as got:
            state.dumps(root, engine="native")
        assert str(got.value).replace("native", "typed", 1) == str(exc)
        return None
    data = state.dumps(root, engine="native")
    if data != expected:  # where, not a diff of two long byte strings
        at = next(
            (i for i, (a, b) in enumerate(zip(data, expected, strict=False)) if a != b),
            min(len(data), len(expected)),
        )
        pytest.fail(f"native differs from typed at byte {at}: {data[at : at + 16]!r}")
    for engine in ("native", "typed"):
        assert_graph_equal(root, state.loads(data, engine=engine))
    return data


def _full_nesting(n: int) -> list[NestingNest]:
    objs = [NestingNest(label=i) for i in range(n)]
    for i, o in enumerate(objs):
        other = objs[(i + 1) % n]
        o.lll = [[[i, -i], []], [], [[2**63, -(2**63)]]][: i % 4]
        o.dsll = {"a": [[i], [1, 2]], "b": [], "c": [[]]} if i % 2 else {}
        o.lds = [{"x": i}, {}, {"y": 2**64 - 1, "z": -1}]
        o.lol = [None, [1.5, float(i)], [], [float("inf")]]
        o.lsr = [{other, o}, set()] if i % 2 else [{other}]
        o.ldr = [{"k": [other, o, other]}, {}]
        o.llr = [[[None, other], []], [[o]]]
        o.dde = {i: {Tone.LOW: ["a"], Tone.HIGH: []}, -1: {}}
        o.lfs = [frozenset({i, 2}), frozenset()]
        o.olll = [[[b"x" * i]]] if i % 3 else ([] if i % 3 == 1 else None)
        o.llo = [[Tone.LOW, None, Tone.HIGH], []]
    return objs


def test_every_kind_is_typed_s_bytes_with_no_python_slot_nesting() -> None:
    objs = _full_nesting(6)
    with python_slots() as calls:
        _check_nesting(objs)
    assert not [k for k in calls if k.startswith("save ")], calls


def test_shared_inner_containers_stay_shared() -> None:
    """An inner container met again (in the same field, another field or another
    object) is Nil, recorded as shared, and loads back as the same object."""
    objs = _full_nesting(3)
    inner, row, table = [7, 8], {"s": 1}, {objs[0]}
    objs[0].lll = [[inner, inner], [inner]]
    objs[1].dsll = {"k": [inner]}
    objs[2].lds = [row, row]
    objs[1].lds = [row]
    objs[0].lsr = [table]
    objs[2].lsr = [table, table]
    data = _check_nesting(objs)
    assert data is not None
    for engine in ("native", "typed"):
        back = state.loads(data, engine=engine)
        assert back[0].lll[0][0] is back[0].lll[0][1] is back[0].lll[1][0]
        assert back[1].dsll["k"][0] is back[0].lll[0][0]
        assert back[2].lds[0] is back[2].lds[1] is back[1].lds[0]
        assert back[0].lsr[0] is back[2].lsr[0] is back[2].lsr[1]


def _cyclic() -> list:
    loop: list = []
    loop.append(loop)
    return [loop]


MISFITS_NESTING: list[tuple[str, Any]] = [
    ("lll", [[[1, 2**70]]]),  # beyond 64 bits, three levels down
    ("lll", [[(1, 2)]]),  # a tuple where a list is declared
    ("lll", [[NestingSubList([1])]]),
    ("lll", [[None]]),
    ("lll", [[[None]]]),
    ("lll", _cyclic()),  # a list holding itself: the plan's depth, not the input's
    ("lll", [(1,)]),
    ("dsll", {"a": [[1.5]]}),
    ("dsll", {1: [[1]]}),
    ("dsll", {"a": [(1,)]}),
    ("lds", [{"a": "x"}]),
    ("lds", [{1: 1}]),
    ("lds", [[("a", 1)]]),
    ("lol", [[1.5, "x"]]),
    ("lol", [[1.5, 2]]),  # an int fits a float, but not C's fast path: the slot's
    ("lol", [(1.5,)]),
    ("lsr", [{1}]),
    ("lsr", [frozenset()]),
    ("lsr", [{object.__new__(NestingNest), None}]),
    ("ldr", [{"k": [1]}]),
    ("ldr", [{"k": (None,)}]),
    ("llr", [[[5]]]),
    ("dde", {1: {"LOW": ["a"]}}),
    ("dde", {1: {Tone.LOW: [b"a"]}}),
    ("lfs", [{1}]),
    ("lfs", [frozenset({2**64})]),
    ("olll", [[[b"x", "y"]]]),
    ("olll", [[[bytearray(b"x")]]]),
    ("llo", [[Tone.LOW, 1]]),
    ("llo", [["high"]]),
]


@pytest.mark.parametrize(
    ("name", "value"), MISFITS_NESTING, ids=[f"{n}-{i}" for i, (n, _) in enumerate(MISFITS_NESTING)]
)
def test_a_misfit_is_typed_s_escape_nesting(name: str, value: Any) -> None:
    objs = _full_nesting(3)
    setattr(objs[1], name, value)
    _check_nesting(objs)


def test_a_misfit_met_after_its_fitting_twin_is_typed_s() -> None:
    """A list shared between a field it fits and one it does not."""
    objs = _full_nesting(3)
    shared = [[1, 2]]
    objs[0].lll = [shared]
    objs[1].dsll = {"x": shared}
    objs[2].lol = shared  # list[list[int]] is a list[Optional[list[float]]]
    objs[1].llr = [shared]  # ints are not references: escaped
    _check_nesting(objs)


def test_the_empty_forms_match_nesting() -> None:
    """An empty inner container is an empty array, never Nil (Nil means met before)."""
    o = NestingNest(
        lll=[[[]], []],
        dsll={"e": []},
        lds=[{}],
        lol=[[], None],
        lsr=[set()],
        ldr=[{"e": []}],
        dde={0: {}},
        lfs=[frozenset()],
        olll=[],
        llo=[[]],
    )
    data = _check_nesting(o)
    assert data is not None
    back = state.loads(data, engine="native")
    assert back.lll == [[[]], []] and back.lds == [{}] and back.olll == []


# ---- hypothesis: random values of every kind, fitting or not ----------------------

_ints_nesting = st.one_of(
    st.integers(-5, 5), st.sampled_from([2**63, -(2**63), 2**64, -(2**63) - 1])
)
_odd_nesting = st.one_of(st.none(), st.booleans(), _ints_nesting, st.floats(), st.text(max_size=2))


def _values_nesting(name: str, nodes: st.SearchStrategy) -> st.SearchStrategy:
    """Values that fit the field most of the time, and sometimes do not."""
    ints_ll = st.lists(st.lists(_ints_nesting, max_size=3), max_size=3)
    fitting: dict[str, st.SearchStrategy] = {
        "lll": st.lists(ints_ll, max_size=3),
        "dsll": st.dictionaries(st.text(max_size=2), ints_ll, max_size=3),
        "lds": st.lists(
            st.dictionaries(st.text(max_size=2), _ints_nesting, max_size=3), max_size=3
        ),
        "lol": st.lists(st.none() | st.lists(st.floats() | _ints_nesting, max_size=3), max_size=3),
        "lsr": st.lists(st.sets(nodes, max_size=3), max_size=3),
        "ldr": st.lists(
            st.dictionaries(st.text(max_size=2), st.lists(nodes, max_size=3), max_size=2),
            max_size=2,
        ),
        "llr": st.lists(st.lists(st.lists(st.none() | nodes, max_size=3), max_size=2)),
        "dde": st.dictionaries(
            _ints_nesting,
            st.dictionaries(st.sampled_from(list(Tone)), st.lists(st.text(max_size=2))),
            max_size=2,
        ),
        "lfs": st.lists(st.frozensets(_ints_nesting, max_size=3), max_size=3),
        "olll": st.none() | st.lists(st.lists(st.lists(st.binary(max_size=2)))),
        "llo": st.lists(st.lists(st.none() | st.sampled_from(list(Tone)), max_size=3)),
        "label": _ints_nesting,
    }
    leaf = _odd_nesting | nodes | st.sampled_from(list(Tone))
    misfit = st.recursive(
        leaf,
        lambda inner: (
            st.lists(inner, max_size=2)
            | st.lists(inner, max_size=2).map(tuple)
            | st.dictionaries(st.text(max_size=1), inner, max_size=2)
        ),
        max_leaves=6,
    )
    return st.one_of(fitting[name], fitting[name], fitting[name], misfit)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_values_of_every_kind_nesting(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 4))
    objs = [NestingNest(label=i) for i in range(n)]
    nodes = st.sampled_from(objs)
    names = list(ANNOTATIONS_NESTING)
    for o in objs:
        for name in data.draw(st.lists(st.sampled_from(names), max_size=6, unique=True)):
            setattr(o, name, data.draw(_values_nesting(name, nodes), label=name))
    if data.draw(st.booleans()):  # an inner container in two places
        inner = data.draw(st.lists(_ints_nesting, max_size=2))
        objs[0].lll = [[inner], [inner]]
        objs[-1].dsll = {"s": [inner]}
    _check_nesting(objs)


# ---- Python code run mid-write changes a nested container -----------------------------

_meddle: list = []  # what reading a Sly member's value runs next (once)


class Sly(enum.Enum):
    """A compact enum whose ``_value_`` read runs code: the one way into Python while C
    writes a nested container of scalars and members."""

    A = 1
    B = 2

    def __getattribute__(self, name: str) -> Any:
        if name == "_value_" and _meddle:
            _meddle.pop()()
        return object.__getattribute__(self, name)


@state.savable(name="tests.native_save_nesting.Meddled")
@dataclass(eq=False)
class Meddled:
    rows: list[list[Sly]] = field(default_factory=list)


@pytest.mark.parametrize("change", ["shrink", "retype"])
def test_a_nested_list_changed_mid_write_is_a_state_error(change: str) -> None:
    """The array's length is written first: a list that shrinks, or an item that turns
    into another type, while C writes it is the save's StateError, never a short array
    or a value its node does not take (typed builds the list first, then encodes)."""
    state.dumps(Meddled([[Sly.B]]), engine="native")  # the plan reads every _value_
    first, later = [Sly.A, Sly.B, Sly.A], [Sly.B]
    act = first.clear if change == "shrink" else lambda: later.__setitem__(0, 5)
    _meddle[:] = [act]
    with pytest.raises(state.StateError, match="ValueError: a container changed while"):
        state.dumps(Meddled([first, later]), engine="native")
    assert _meddle == []


# ---- damage: malformed plans are errors; damaged streams StateError, never a crash -----


def _field_nesting(kop: int, arg: Any, op: int | None = None, vop: int = 0) -> tuple:
    return ("x", native.OP_LIST if op is None else op, 0, kop, 0, vop, 0, 0, None, arg, 0)


_LIST = native.SK_LIST
_INT = (native.SK_SCALAR, native._M_INT, None, -1, -1)


@pytest.mark.parametrize(
    "entry",
    [
        _field_nesting(native.E_NEST, None),  # no program
        _field_nesting(native.E_NEST, ((), None)),  # an empty one
        _field_nesting(native.E_NEST, (((_LIST, 0, None, 0, -1),), None)),  # its own item
        _field_nesting(native.E_NEST, (((_LIST, 0, None, 1, -1), (_LIST, 0, None, 0, -1)), None)),
        _field_nesting(native.E_NEST, (((_LIST, 0, None, 5, -1), _INT), None)),  # out of range
        _field_nesting(
            native.E_NEST, (((native.SK_DICT, 0, None, 1, -1), _INT), None)
        ),  # no values
        _field_nesting(native.E_NEST, (((99, 0, None, -1, -1),), None)),  # no such node
        _field_nesting(native.E_NEST, (((native.SK_ENUM, 0, 5, -1, -1),), None)),  # not a class
        _field_nesting(native.E_NEST, (((native.SK_SCALAR, 0, Tone, -1, -1),), None)),
        _field_nesting(native.E_NEST, (((native.SK_REF, native._M_NONE, None, -1, -1),), None)),
        _field_nesting(
            native.E_NEST, (((native.SK_LIST, 4, None, 1, -1), _INT), None)
        ),  # a bad mask
        _field_nesting(native.E_NEST, ((_INT,) * (native.MAX_ELEM_NODES + 1), None)),  # too many
        _field_nesting(native.E_NEST, ((("x",),), None)),
        _field_nesting(native.E_NEST, ((_INT,), None), op=native.OP_SET),  # no list in a set
        _field_nesting(native.E_NEST, ((_INT,), None), op=native.OP_DICT),  # ... nor as a key
        _field_nesting(0, (None, (_INT,)), op=native.OP_TUPLE, vop=native.E_NEST),
        _field_nesting(native.E_NEST, ((_INT,), (_INT,)), op=native.OP_DICT, vop=native.E_NEST),
    ],
)
def test_a_malformed_nest_plan_is_an_error(entry: tuple) -> None:
    with pytest.raises(SystemError):
        native._core.Plan(None, "n", False, False, (entry,))


def test_a_well_formed_nest_plan_is_taken() -> None:
    """The other side of the test above: the shapes it breaks, whole."""
    prog = ((_LIST, 0, None, 1, -1), (native.SK_DICT, 0, None, 2, 3), _INT, _INT)
    native._core.Plan(None, "n", False, False, (_field_nesting(native.E_NEST, (prog, None)),))


@pytest.fixture(scope="module")
def nested_stream() -> bytes:
    return state.dumps(_full_nesting(3), engine="native")


def test_truncated_at_every_length(nested_stream: bytes, watchdog: None) -> None:
    for n in range(len(nested_stream)):
        with pytest.raises(state.StateError):
            state.loads(nested_stream[:n], engine="native")


def _outcome(data: bytes, engine: str) -> tuple[str, Any]:
    try:
        return "value", state.loads(data, engine=engine)
    except state.StateError as exc:
        return "error", str(exc).removeprefix(f"{engine} load failed: ")


def test_byte_flips_inside_valid_frames(nested_stream: bytes, watchdog: None) -> None:
    """Each payload byte flipped, the frame made valid again: the native load gives a
    StateError or typed's graph, never another exception."""
    body = bytes(wire.check_frame(nested_stream))
    rng = random.Random("nesting")
    failures = []
    for i in range(len(body)):
        damaged = bytearray(body)
        damaged[i] ^= 1 << rng.randrange(8)
        header = wire._HEADER.pack(
            wire.MAGIC, wire.FORMAT_VERSION, zlib.crc32(damaged), len(damaged)
        )
        data = header + bytes(damaged)
        (nk, nv), (tk, tv) = _outcome(data, "native"), _outcome(data, "typed")
        if nk == tk == "value" and graph_diff(tv, nv) is not None:
            failures.append((i, graph_diff(tv, nv)))
    assert failures == []


# --------------------------------------------------------------------------------------
# Tuples holding references (``tuple[Node, int]``, ``tuple[Node, ...]``,
# ``tuple[Optional[Node], str]``), written by the native core in C.
#
# typed writes them through the slot's fit test and compact encoder: an array of the
# scalars and the references' ids (the empty tuple an empty array, not Nil), and its
# escape for anything else.  The native core writes the same bytes without calling
# typed's generated code for a tuple that fits.


@state.savable(name="tests.native_ref_tuples.TNode")
@dataclass(eq=False)
class TNode:
    pair: tuple[TNode, int] | None = None
    many: tuple[TNode, ...] = ()
    opt: tuple[Optional[TNode], str] = (None, "")
    label: int = 0


def _check_ref_tuples(objs: list[TNode]) -> bytes:
    data = state.dumps(objs, engine="native")
    assert data == state.dumps(objs, engine="typed")
    for engine in ("native", "typed"):
        back = state.loads(data, engine=engine)
        index = {id(o): i for i, o in enumerate(objs)}
        got = {id(o): i for i, o in enumerate(back)}

        def shape(v: Any, ids: dict) -> Any:
            if isinstance(v, TNode):
                return ("node", ids.get(id(v)))
            if isinstance(v, (tuple, list)):
                return type(v).__name__, tuple(shape(x, ids) for x in v)
            return v

        for a, b in zip(back, objs, strict=True):
            for name in ("pair", "many", "opt"):
                assert shape(getattr(a, name), got) == shape(getattr(b, name), index), name
    return data


def _linked(n: int) -> list[TNode]:
    objs = [TNode(label=i) for i in range(n)]
    for i, o in enumerate(objs):
        o.pair = (objs[(i + 1) % n], i)
        o.many = tuple(objs[j % n] for j in range(i, i + i % 4))
        o.opt = (objs[i // 2] if i % 3 else None, f"n{i}")
    return objs


def test_tuples_of_references_take_no_python_slot_on_save() -> None:
    objs = _linked(40)
    with python_slots() as calls:
        _check_ref_tuples(objs)
    assert not [k for k in calls if k.startswith("save ")], calls


def test_misfits_are_typed_s_escapes() -> None:
    """A scalar where a reference goes, a wrong length, a list, a big int, an object of an
    unregistered class: typed's slot function, the same bytes."""

    class Stranger:
        pass

    objs = _linked(6)
    objs[0].pair = (1, 2)  # type: ignore[assignment]
    objs[1].pair = (objs[2],)  # type: ignore[assignment]
    objs[2].many = [objs[3]]  # type: ignore[assignment]
    objs[3].pair = (objs[4], 2**70)
    objs[4].opt = ("x", "y")  # type: ignore[assignment]
    objs[5].many = (objs[0], 3)  # type: ignore[assignment]
    _check_ref_tuples(objs)
    objs[5].many = (Stranger(),)  # type: ignore[assignment]
    for engine in ("typed", "native"):
        try:
            state.dumps(objs, engine=engine)
        except state.StateError as exc:
            assert "Stranger" in str(exc)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_random_graphs_of_reference_tuples(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 12))
    objs = [TNode(label=i) for i in range(n)]
    node = st.sampled_from(objs)
    for o in objs:
        o.pair = data.draw(st.none() | st.tuples(node, st.integers(-(2**70), 2**70)))
        o.many = data.draw(st.lists(node, max_size=5).map(tuple))
        o.opt = data.draw(st.tuples(st.none() | node, st.text(max_size=3)))
    # every node reachable from the root list, in any order
    order = data.draw(st.permutations(objs))
    for a, b in itertools.pairwise(order):
        assert a is not b
    _check_ref_tuples(list(order))


# --------------------------------------------------------------------------------------
# Ints beyond 64 bits in scalar slots, written and read by the native core in C.
#
# A compact int slot holding an int MessagePack cannot (below -2**63 or from 2**64) is
# escaped as ``{T_SLOT: {T_BIGINT: "decimal"}}`` and its type listed as holding escapes;
# an ``Any`` slot writes ``{T_BIGINT: "decimal"}``.  The native core writes both and reads
# the slot escape back itself, with no call into typed's generated code: the bytes stay
# typed's, every value comes back exactly, and a damaged escape gets typed's own value or
# typed's own StateError.


@state.savable(name="tests.native_bigint.Big")
@dataclass(eq=False)
class Big:
    n: int = 0
    maybe: Optional[int] = None
    any: Any = None
    peer: Optional["Big"] = None  # noqa: UP037


EDGES = [0, 1, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**40, -(10**60)]
big_ints = st.one_of(
    st.sampled_from(EDGES),
    st.integers(-(2**200), 2**200),
    st.integers(-(2**64), 2**64),
)


@contextmanager
def python_slots() -> Iterator[collections.Counter]:
    """Count the calls into typed's generated per-field code (save and load slots)."""
    calls: collections.Counter = collections.Counter()
    save, load = native._LazySlot.__call__, native._LazyLoadSlot.__call__

    def counted_save(self: Any, obj: Any, ctx: Any) -> Any:
        calls["save " + self.spec.name] += 1
        return save(self, obj, ctx)

    def counted_load(self: Any, raw: Any, ctx: Any) -> Any:
        calls["load " + self.spec.name] += 1
        return load(self, raw, ctx)

    native._LazySlot.__call__ = counted_save  # type: ignore[method-assign]
    native._LazyLoadSlot.__call__ = counted_load  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        native._LazySlot.__call__ = save  # type: ignore[method-assign]
        native._LazyLoadSlot.__call__ = load  # type: ignore[method-assign]


def _check_bigint(objs: list[Big]) -> bytes:
    data = state.dumps(objs, engine="native")
    assert data == state.dumps(objs, engine="typed")
    for engine in ("native", "typed"):
        back = state.loads(data, engine=engine)
        for a, b in zip(back, objs, strict=True):
            for name in ("n", "maybe", "any"):
                x, y = getattr(a, name), getattr(b, name)
                assert type(x) is type(y) and x == y, (engine, name, x, y)
    return data


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(big_ints, st.none() | big_ints, st.none() | big_ints), max_size=8))
def test_native_writes_typed_bytes_and_reads_every_int_back(rows: list) -> None:
    objs = [Big(n, m, a) for n, m, a in rows]
    for a, b in itertools.pairwise(objs):
        a.peer = b
    _check_bigint(objs)


def test_big_ints_take_no_python_slot() -> None:
    objs = [Big(n=v, maybe=-v, any=v) for v in EDGES]
    with python_slots() as calls:
        data = _check_bigint(objs)
    assert not calls, calls
    assert b"\x81\x08\x81\x07" in data  # the slot escape is there to be read


def test_a_big_int_in_another_slot_kind_is_typed_s_escape() -> None:
    """A big int in a list[int] or a str slot: typed's slot function, the same bytes."""

    @state.savable(name="tests.native_bigint.Other")
    @dataclass(eq=False)
    class Other:
        items: list[int]
        name: str = ""

    objs = [Other([1, 2**70]), Other([], 2**80)]  # type: ignore[arg-type]
    data = state.dumps(objs, engine="native")
    assert data == state.dumps(objs, engine="typed")
    back = state.loads(data, engine="native")
    assert [(o.items, o.name) for o in back] == [([1, 2**70], ""), ([], 2**80)]


def test_an_int_str_refuses_fails_as_typed_fails() -> None:
    limit = sys.get_int_max_str_digits()
    if limit == 0:
        pytest.skip("this interpreter has no int string limit")
    huge = 10 ** (limit + 5)
    said = []
    for engine in ("typed", "native"):
        with pytest.raises(state.StateError, match=r"ValueError.*digits") as caught:
            state.dumps([Big(n=huge)], engine=engine)
        said.append(str(caught.value).removeprefix(f"{engine} save failed: "))
    assert said[0] == said[1]


# -- damaged escapes ------------------------------------------------------------------


def _with_slot(value: Any, escaped: bool = True) -> bytes:
    """A checksum-valid stream of one Big whose ``n`` slot holds ``value``; ``escaped``:
    the type listed as holding escapes, as a stream with a real escape lists it."""
    data = state.dumps([Big(n=2**70 if escaped else 5)], engine="typed")
    payload = wire.unframe(data)
    rows = payload[wire.ROWS]
    (row_set,) = [r for r in rows if isinstance(r, list) and r and len(r[0]) == 4]
    row_set[0][0] = value
    return wire.frame(payload)


def _outcome_bigint(data: bytes, engine: str) -> tuple[str, Any]:
    try:
        (obj,) = state.loads(data, engine=engine)
    except state.StateError as exc:
        return "error", str(exc).removeprefix(f"{engine} load failed: ")
    except ValueError as exc:
        return "value error", str(exc)
    return "value", (type(obj.n), obj.n)


@pytest.mark.parametrize(
    "value",
    [
        {8: {7: "12345678901234567890123"}},
        {8: {7: "-1"}},
        {8: {7: " 42 "}},  # int() takes surrounding spaces
        {8: {7: "1_000"}},  # and underscores
        {8: {7: "٣"}},  # and other decimal digits
        {8: {7: "x12"}},
        {8: {7: ""}},
        {8: {7: 12}},
        {8: {7: b"12"}},
        {8: {7: None}},
        {8: {7: ["1"]}},
        {8: {7: "1" * 5000}},  # beyond int()'s digit limit
        {8: 5},
        {8: {6: "1"}},
        {7: "99"},
    ],
)
def test_a_damaged_escape_gets_typed_s_outcome(value: Any) -> None:
    data = _with_slot(value)
    assert _outcome_bigint(data, "native") == _outcome_bigint(data, "typed")


def test_an_escape_in_a_type_not_listed_as_escaped_is_typed_s_business() -> None:
    """Only a type the stream lists as holding escapes has its maps read as escapes."""
    data = _with_slot({8: {7: "123"}}, escaped=False)
    want = _outcome_bigint(data, "typed")
    assert want != ("value", (int, 123))
    assert _outcome_bigint(data, "native") == want


def test_a_truncated_escape_fails_as_typed_fails() -> None:
    data = state.dumps([Big(n=-(10**30), maybe=2**65)], engine="typed")
    body = body_of(data)
    for cut in range(len(body)):
        want, got = (
            _outcome_bigint(framed(body[:cut]), "typed"),
            _outcome_bigint(framed(body[:cut]), "native"),
        )
        assert got[0] == want[0] == "error", (cut, want, got)


# --------------------------------------------------------------------------------------
# The root value is encoded in C (``Walk.dyn_bytes``) the way typed's Python ``dyn``
# encodes it: the same bytes, the same discovery order, the same shared-container
# locations, and the same error for a value that cannot be saved.


LEAVES = [Leaf(i) for i in range(4)]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)  # beyond 64 bits: self-describing big ints
    | st.floats(allow_nan=False)
    | st.text(max_size=4)
    | st.binary(max_size=4)
    | st.sampled_from([*LEAVES, RootColor.RED, Level.HIGH])
)
keys = st.integers(-5, 5) | st.text(max_size=3) | st.tuples(st.integers(0, 3), st.text(max_size=2))
plain = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(keys, inner, max_size=3)
        | st.frozensets(st.integers(0, 9), max_size=3)
        | st.sets(st.text(max_size=2), max_size=3)
        | st.builds(bytearray, st.binary(max_size=3))
    ),
    max_leaves=20,
)


def _check_root(root: Any) -> None:
    native = state.dumps(root, engine="native")
    assert native == state.dumps(root, engine="typed")
    assert graph_diff(root, state.loads(native, engine="native")) is None


@settings(max_examples=200, deadline=None)
@given(plain)
def test_plain_roots_are_typed_bytes(root: Any) -> None:
    _check_root(root)


def test_containers_shared_at_and_below_the_root() -> None:
    items = [1, Leaf(9)]
    table = {"items": items}
    node = Node(1, kids=[Node(2)], payload=table)
    _check_root([items, table, items, node, (items, table), {"again": [items]}])


def test_a_root_nested_deeper_than_the_c_limit() -> None:
    root: Any = [Leaf(1)]
    for i in range(150):  # C hands what lies past 64 levels to Python's dyn
        root = [root, {"i": i}]
    _check_root(root)


@pytest.mark.parametrize(
    "root",
    [object(), [1, {"x": object()}], {object(): 1}, ["ok", "\udcff"]],
    ids=["object", "nested-object", "object-key", "lone-surrogate"],
)
def test_an_unsavable_root_fails_as_typed_fails(root: Any) -> None:
    messages = []
    for engine in ("typed", "native"):
        with pytest.raises(state.StateError) as info:
            state.dumps(root, engine=engine)
        messages.append(str(info.value).removeprefix(f"{engine} save failed: "))
    assert messages[0] == messages[1]


def test_a_fresh_walk_discovers_a_registered_root_in_c() -> None:
    """A class the walk has not met yet is discovered by C, not handed to ctx.dyn:
    the root (and one in a list) gets object 1 without a call back into Python."""
    from ckpt.state import graph, native, registry

    def enc(value: Any, owner: Any) -> Any:
        raise AssertionError(f"C handed {value!r} to Python")

    for root in (Leaf(3), [Leaf(4), Leaf(5)]):
        walk = native._core.Walk(native._plan_for, native._enum_plan, set(), registry._by_class)
        ctx = native._save_ctx(walk, set())
        try:
            walk.dyn_bytes(ctx, enc, root, graph.ROOT_OWNER)
            assert walk.objects[1] is (root if isinstance(root, Leaf) else root[0])
        finally:
            native._pending_walks.pop(id(ctx), None)
            walk.release()
    _check_root(Leaf(3))
    _check_root([Leaf(4), Leaf(5)])


# --------------------------------------------------------------------------------------
# The native engine writes and reads datetime, date, timedelta and UUID fields in C
# (``OP_VALUE``/``L_VALUE``): the bytes stay typed's, every value comes back exactly, and
# a payload C does not take (another time zone, a value out of range, a hostile item)
# gets typed's own value or typed's own StateError.


@state.savable(name="tests.native_values.Stamp")
@dataclass(eq=False)
class Stamp:
    when: dt.datetime = dt.datetime(2000, 1, 1)
    maybe: Optional[dt.datetime] = None
    day: dt.date = dt.date(2000, 1, 1)
    span: dt.timedelta = dt.timedelta()
    key: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))
    maybe_key: uuid.UUID | None = None


FIELDS = ("when", "maybe", "day", "span", "key", "maybe_key")
ZONES = [
    None,
    dt.UTC,
    dt.timezone(dt.timedelta(hours=2)),
    dt.timezone(dt.timedelta(0), "Z"),  # a named zero offset: not the UTC singleton
    zoneinfo.ZoneInfo("Europe/Paris"),
]

datetimes = st.builds(
    lambda d, tz, fold: d.replace(tzinfo=tz, fold=fold),
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59)),
    st.sampled_from(ZONES),
    st.integers(0, 1),
)
uuids = st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
stamps = st.builds(
    Stamp,
    when=datetimes,
    maybe=st.none() | datetimes,
    day=st.dates(),
    span=st.timedeltas(),
    key=uuids,
    maybe_key=st.none() | uuids,
)


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    assert a == b
    if isinstance(a, dt.datetime):
        assert a.fold == b.fold
        assert a.tzinfo is b.tzinfo or a.tzinfo == b.tzinfo
        assert a.tzinfo is not dt.UTC or b.tzinfo is dt.UTC
    if isinstance(a, uuid.UUID):
        assert a.is_safe is b.is_safe and hash(a) == hash(b) and str(a) == str(b)
        assert not hasattr(a, "__dict__")


@settings(max_examples=150, deadline=None)
@given(st.lists(stamps, min_size=1, max_size=6))
def test_native_writes_typed_bytes_and_reads_every_value_back(objs: list[Stamp]) -> None:
    data = state.dumps(objs, engine="native")
    assert data == state.dumps(objs, engine="typed")
    for engine in ("native", "typed"):
        back = state.loads(data, engine=engine)
        for a, b in zip(back, objs, strict=True):
            for name in FIELDS:
                _same(getattr(a, name), getattr(b, name))


def test_values_of_other_types_are_escaped_exactly() -> None:
    """A subclass, a date in a datetime field, a str in a UUID field: typed's escape."""

    class Later(dt.datetime):
        pass

    state.register_value(
        Later,
        name="tests.native_values.Later",
        to_plain=lambda v: [v.isoformat()],
        from_plain=lambda p: Later.fromisoformat(p[0]),
    )
    odd = Stamp(when=Later(2020, 5, 6), maybe=dt.date(2020, 1, 1), day=dt.datetime(2020, 1, 1, 5))
    odd.key = "not a uuid"  # type: ignore[assignment]
    odd.span = 3  # type: ignore[assignment]
    data = state.dumps([odd], engine="native")
    assert data == state.dumps([odd], engine="typed")
    (back,) = state.loads(data, engine="native")
    for name in FIELDS:
        _same(getattr(back, name), getattr(odd, name))


# -- hostile payloads in the compact slots -------------------------------------------


def _payload_with(field: str, value: Any) -> bytes:
    """A checksum-valid stream of one Stamp whose ``field`` slot holds ``value``."""
    data = state.dumps(Stamp(), engine="typed")
    payload = wire.unframe(data)
    index = FIELDS.index(field)
    rows = payload[wire.ROWS]
    (row_set,) = [r for r in rows if isinstance(r, list) and r and len(r[0]) == len(FIELDS)]
    row_set[0][index] = value
    return wire.frame(payload)


def _outcome_values(data: bytes, engine: str) -> tuple[str, Any]:
    try:
        (obj,) = [state.loads(data, engine=engine)]
    except state.StateError as exc:  # the message without its "<engine> load failed: "
        return "error", str(exc).removeprefix(f"{engine} load failed: ")
    return "value", obj


HOSTILE = {
    "when": [
        [2026, 13, 1, 0, 0, 0, 0, 0, None],  # month out of range
        [0, 1, 1, 0, 0, 0, 0, 0, None],  # year 0
        [2026, 1, 1, 0, 0, 0, 0, 2, None],  # fold 2
        [2026, 1, 1, 0, 0, 0, -1, 0, None],
        [2**31, 1, 1, 0, 0, 0, 0, 0, None],  # beyond a C int
        [2**63 - 1, 1, 1, 0, 0, 0, 0, 0, None],
        [2026, 1, 1, 0, 0, 0, 0, True, None],  # a bool is not an int here
        [2026, 1.5, 1, 0, 0, 0, 0, 0, None],
        [2026, 1, 1, 0, 0, 0, 0, 0],  # 8 items
        [2026, 1, 1, 0, 0, 0, 0, 0, None, None],  # 10 items
        [2026, 1, 1, 0, 0, 0, 0, 0, ["utc", 1]],
        [2026, 1, 1, 0, 0, 0, 0, 0, ["UTC"]],
        [2026, 1, 1, 0, 0, 0, 0, 0, ["fixed", 7200000000, None]],
        [2026, 1, 1, 0, 0, 0, 0, 0, ["zone", "No/Such_Zone"]],
        None,
        [],
        "2026-01-01",
        {9: ["datetime", [2026, 1, 1, 0, 0, 0, 0, 0, None]]},  # an escape, version 2
    ],
    "maybe": [None, [2026, 2, 30, 0, 0, 0, 0, 0, None], [1, 1, 1, 0, 0, 0, 0, 0, ["utc"]]],
    "day": [[2026, 2, 30], [2026, 1], [10**10, 1, 1], [-1, 1, 1], None, [2026, 1, 1, 1]],
    "span": [
        [10**10, 0, 0],
        [999999999, 86399, 999999],
        [-999999999, 0, 0],
        [1000000000, 0, 0],  # past timedelta.max: typed's OverflowError as StateError
        [0, 86400, 0],  # not normalised: typed normalises it
        [0, -1, 0],
        [0, 0, 10**6],
        [2**31 - 1, 2**31 - 1, 2**31 - 1],
        [0, 0],
    ],
    "key": [[b"short"], [b"x" * 17], [b"\xff" * 16], ["0" * 32], [b"\x00" * 16, 1], None, []],
    "maybe_key": [None, [b"\x01" * 16], [bytearray(16)], [b""]],
}


@pytest.mark.parametrize(
    ("field", "value"), [(f, v) for f, values in HOSTILE.items() for v in values]
)
def test_a_payload_c_does_not_take_gets_typed_outcome(field: str, value: Any) -> None:
    data = _payload_with(field, value)
    native, typed = _outcome_values(data, "native"), _outcome_values(data, "typed")
    assert native[0] == typed[0], (native, typed)
    if native[0] == "error":
        assert native[1] == typed[1]
    else:
        for name in FIELDS:
            _same(getattr(native[1], name), getattr(typed[1], name))
