"""Tuples the native core saves in C with no call into typed's per-field code:
``tuple[Any, ...]`` and the bare ``tuple`` (the same kind), ``Optional`` ones, fixed
tuples with ``Any`` positions, fixed tuples holding references inside lists, sets,
frozensets and dicts, and one level of nested lists (``list[list[int]]``,
``list[list[Node | None]]``, ``dict[str, list[int]]``; the depth is the annotation's).

typed is the byte-for-byte reference (test_native_kinds' ``_check``): a tuple is
not identity-tracked (immutable), the containers inside an ``Any`` item are, as dyn
tracks them; a value that does not fit (a tuple subclass, a wrong length, an int beyond
64 bits where a position says int) goes to the slot function for that value alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.state import native, schema

from .requires import requires_native
from .test_native_bigint import python_slots
from .test_native_kinds import Color, Point, _check

pytestmark = requires_native

# ruff: noqa: UP045 (Optional[...] is what these tests are about)


class SubTuple(tuple):
    pass


class SubList(list):
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

_ints = st.one_of(st.integers(-5, 5), st.sampled_from([2**63, -(2**63), 2**64, -(2**63) - 1]))
_scalar = st.one_of(
    st.none(), st.booleans(), _ints, st.floats(), st.text(max_size=3), st.binary(max_size=2)
)


def _anys(nodes: st.SearchStrategy, shared: list) -> st.SearchStrategy:
    leaf = st.one_of(_scalar, nodes, st.sampled_from(list(Color)), st.just(shared))
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(st.text(max_size=2), inner, max_size=2),
            st.frozensets(_scalar, max_size=2),
        ),
        max_leaves=6,
    )


def _tup_values(name: str, nodes: st.SearchStrategy, shared: list) -> st.SearchStrategy:
    anys = _anys(nodes, shared)
    fitting: dict[str, st.SearchStrategy] = {
        "at": st.lists(anys, max_size=4).map(tuple),
        "bare": st.lists(anys, max_size=4).map(tuple),
        "oat": st.none() | st.lists(anys, max_size=3).map(tuple),
        "ia": st.tuples(_ints, anys),
        "shared": st.just(shared),
        "label": _ints,
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
def test_a_malformed_plan_for_these_kinds_is_an_error(entry: tuple) -> None:
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
    ref_int = st.tuples(nodes, _ints)
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
        "label": _ints,
    }
    odd = st.one_of(_scalar, nodes, st.sampled_from([*Color, *Point]))
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
    ("ll", [SubList([1])]),
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
    ints = st.lists(_ints, max_size=3) | st.sampled_from(pool)
    refs = st.lists(nodes, max_size=3)
    fitting: dict[str, st.SearchStrategy] = {
        "ll": st.lists(ints, max_size=3),
        "llr": st.lists(st.lists(st.none() | nodes, max_size=3), max_size=3),
        "dl": st.dictionaries(st.text(max_size=2), ints, max_size=3),
        "dlr": st.dictionaries(_ints, refs, max_size=3),
        "oll": st.none() | st.lists(st.lists(st.none() | st.floats(), max_size=3), max_size=2),
        "inner": st.sampled_from(pool),
        "label": _ints,
    }
    odd = st.one_of(_scalar, nodes, st.sampled_from(pool))
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
