"""The native writer's in-C paths for lists of scalar tuples, dicts read in place and
enum members: the stream stays typed's byte for byte, for values that fit and for every
kind of misfit (escaped by typed's own slot code), and loads back to the same graph."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state

from .graph_equal import graph_diff
from .requires import requires_native

pytestmark = requires_native


class Tone(enum.Enum):
    LOW = 1
    HIGH = "high"


@state.savable(name="test.native.PathLeaf")
@dataclass(eq=False)
class PathLeaf:
    n: int = 0


@state.savable(name="test.native.Paths")
@dataclass(eq=False)
class Paths:
    pairs: list[tuple[int, int]] = field(default_factory=list)
    named: list[tuple[str, int]] = field(default_factory=list)
    mixed: list[tuple[float, bool, bytes]] = field(default_factory=list)
    var: list[tuple[int, ...]] = field(default_factory=list)
    table: dict[str, int] = field(default_factory=dict)
    refs: dict[int, PathLeaf] = field(default_factory=dict)
    labels: set[str] = field(default_factory=set)
    tones: list[Tone] = field(default_factory=list)
    tone: Tone = Tone.LOW
    pair: tuple[int, str] = (0, "")
    wide: tuple[int, int, int, int, int, int, int, int, str] = (0, 0, 0, 0, 0, 0, 0, 0, "")


def _same(root: Any) -> None:
    typed = state.dumps(root, engine="typed")
    native = state.dumps(root, engine="native")
    assert native == typed
    loaded = state.loads(native, engine="native")
    assert graph_diff(root, loaded) is None


MISFITS: list[tuple[str, Any]] = [
    ("pairs", [(1, 2), (3,)]),  # a tuple too short
    ("pairs", [(1, 2), (3, 4, 5)]),  # too long
    ("pairs", [(1, 2), [3, 4]]),  # a list where a tuple belongs
    ("pairs", [(1, 2**70)]),  # an int beyond 64 bits
    ("pairs", [(1, None)]),
    ("pairs", [(True, 2)]),  # a bool fits an int slot
    ("named", [("a", 1), (1, "a")]),  # items swapped
    ("named", [("ü", -1), ("", 0)]),
    ("mixed", [(1.5, True, b"x"), (2, False, b"")]),  # an int fits a float slot
    ("mixed", [(1.5, 1, b"x")]),  # an int does not fit a bool slot
    ("var", [(), (1,), tuple(range(40))]),
    ("var", [(1, "x")]),
    ("table", {"a": 1, "b": None}),
    ("table", {1: 1}),
    ("refs", {1: 5}),  # an int in a reference slot
    ("tones", [Tone.LOW, Tone.HIGH, Tone.LOW]),
    ("tones", [Tone.LOW, 1]),
    ("tone", 1),
    ("pair", (7, "seven")),
    ("pair", ("seven", 7)),  # items swapped
    ("pair", (7, "seven", 8)),  # too long
    ("pair", (7,)),  # too short
    ("pair", (True, "")),  # a bool fits an int slot
    ("pair", (2**64, "x")),  # an int beyond 64 bits
    ("pair", [7, "seven"]),  # a list where a tuple belongs
    ("wide", (1, 2, 3, 4, 5, 6, 7, 8, "nine")),  # longer than the plan's masks hold
    ("wide", (1, 2, 3, 4, 5, 6, 7, 8, 9)),  # the last item's kind
    ("wide", (1, 2, 3, 4, 5, 6, 7, "eight", "nine")),
]


@pytest.mark.parametrize(
    ("name", "value"), MISFITS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(MISFITS)]
)
def test_fits_and_misfits_write_typed_stream(name: str, value: Any) -> None:
    leaf = PathLeaf(3)
    a = Paths(pairs=[(0, 1)], refs={0: leaf, 1: leaf}, labels={"x", "y"}, tones=[Tone.HIGH])
    setattr(a, name, value)
    b = Paths(pairs=a.pairs, table=a.table if isinstance(a.table, dict) else {})  # shared
    _same([a, b, leaf, Paths()])


def test_a_shared_list_of_tuples_and_a_shared_dict_keep_identity() -> None:
    pairs, table = [(1, 2)], {"k": 1}
    a, b = Paths(pairs=pairs, table=table), Paths(pairs=pairs, table=table)
    _same([a, b])
    loaded = state.loads(state.dumps([a, b], engine="native"), engine="native")
    assert loaded[0].pairs is loaded[1].pairs and loaded[0].table is loaded[1].table


@pytest.mark.parametrize("holders", [2, 3, 9])
def test_a_container_held_by_several_fields_and_objects_stays_shared(holders: int) -> None:
    pairs, labels, table = [(1, 2)], {"a"}, {"k": 1}
    objs = [Paths(pairs=pairs, labels=labels, table=table) for _ in range(holders)]
    objs[0].var = pairs  # a second field of one object holds the same list
    _same(objs)
    loaded = state.loads(state.dumps(objs, engine="native"), engine="native")
    assert all(o.pairs is loaded[0].pairs for o in loaded) and loaded[0].var is loaded[0].pairs
    assert all(o.labels is loaded[0].labels and o.table is loaded[0].table for o in loaded)


def test_dict_of_references_to_classes_not_met_yet() -> None:
    leaves = [PathLeaf(i) for i in range(50)]
    roots = [Paths(refs={i: leaves[(i * 7) % 50] for i in range(j % 9)}) for j in range(60)]
    _same(roots)


scalar = st.one_of(
    st.integers(-(2**65), 2**65),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.floats(),
    st.binary(max_size=2),
)
item = st.one_of(
    st.tuples(scalar, scalar),
    st.tuples(scalar),
    st.lists(scalar, max_size=3).map(tuple),
    st.lists(scalar, max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(item, max_size=5),
    st.lists(item, max_size=5),
    st.lists(item, max_size=5),
    st.dictionaries(st.one_of(st.text(max_size=2), st.integers()), scalar, max_size=4),
)
def test_random_tuples_and_dicts_write_typed_stream(
    pairs: Any, named: Any, var: Any, table: Any
) -> None:
    _same([Paths(pairs=pairs, named=named, var=var, table=table, mixed=list(pairs))])


INT_EDGES = [2**30 - 1, 2**30, -(2**30), 2**60 - 1, -(2**60 - 1), 2**60, -(2**60), 2**63 - 1]
INT_EDGES += [-(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 2**45 + 3, -(2**45 + 3)]


def test_ints_at_every_digit_boundary_write_typed_stream() -> None:
    roots = [Paths(pairs=[(v, 1)], table={"a": v}, var=[(v, -v)]) for v in INT_EDGES]
    _same(roots)
