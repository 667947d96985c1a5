"""Hypothesis-generated random graphs round-trip through every engine pair.

Graphs mix typed references, typed containers (shared between objects too), dicts keyed by
ints, strs, tuples and objects, sets of values and of objects, optional and polymorphic
fields holding arbitrary plain data, shared nodes and cycles.  The comparison is
``graph_diff``: an isomorphism check, validated here against pickle round trips.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state

from .conftest import ENGINE_PAIRS
from .graph_equal import graph_diff
from .models import Color, Level


@state.savable(name="tests.state.random.GShape")
@dataclass(eq=False)
class GShape:
    name: str = ""


@state.savable(name="tests.state.random.GCircle")
@dataclass(eq=False)
class GCircle(GShape):
    radius: float = 1.0


@state.savable(name="tests.state.random.GSquare")
@dataclass(eq=False)
class GSquare(GShape):
    side: int = 1
    owner: GNode | None = None


@state.savable(name="tests.state.random.GLeaf")
@dataclass(eq=False, slots=True)
class GLeaf:
    value: int = 0
    data: bytes = b"\x01"
    color: Color = Color.RED
    level: Level | None = None


@state.savable(name="tests.state.random.GNode")
@dataclass(eq=False)
class GNode:
    ident: int = 0
    label: str = "node"
    next: GNode | None = None
    kids: list[GNode] = field(default_factory=list)
    attrs: dict[str, int] = field(default_factory=lambda: {"k": 1})
    tags: set[int] = field(default_factory=set)
    pair: tuple[int, str] = (0, "")
    weights: list[float] = field(default_factory=list)
    maybe: int | None = 5
    shape: GShape | None = None
    either: GCircle | GSquare | GLeaf | None = None
    by_obj: dict[GNode, str] = field(default_factory=dict)
    by_tuple: dict[tuple[int, str], GLeaf | None] = field(default_factory=dict)
    members: set[GLeaf] = field(default_factory=set)
    frozen: frozenset[str] = frozenset()
    payload: object = None
    extra: Any = None


@state.savable(name="tests.state.random.GGraph")
@dataclass(eq=False)
class GGraph:
    nodes: list[object] = field(default_factory=list)
    loose: Any = None


SMALL_INTS = st.integers(-(2**70), 2**70) | st.integers(-3, 3)
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
TEXT = st.text(max_size=6)
BYTES = st.binary(max_size=6)


@st.composite
def graphs(draw: st.DrawFn) -> GGraph:
    n_nodes = draw(st.integers(1, 8))
    nodes = [GNode(ident=i) for i in range(n_nodes)]
    leaves = [
        GLeaf(
            draw(SMALL_INTS),
            draw(BYTES),
            draw(st.sampled_from(Color)),
            draw(st.none() | st.sampled_from(Level)),
        )
        for _ in range(draw(st.integers(0, 4)))
    ]
    shapes: list[GShape] = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from([GShape, GCircle, GSquare]))
        shape = kind(draw(TEXT))
        if isinstance(shape, GCircle):
            shape.radius = draw(FLOATS)
        if isinstance(shape, GSquare):
            shape.side = draw(SMALL_INTS)
            shape.owner = draw(st.none() | st.sampled_from(nodes))
        shapes.append(shape)
    objects: list[Any] = nodes + leaves + shapes
    pool: list[Any] = []  # mutable containers already placed, for sharing

    def value(depth: int) -> Any:
        choices = ["none", "bool", "int", "float", "str", "bytes", "obj", "enum"]
        if depth > 0:
            choices += ["list", "tuple", "dict", "tdict", "odict", "set", "frozenset", "bytearray"]
        if pool:
            choices.append("shared")
        kind = draw(st.sampled_from(choices))
        if kind == "none":
            return None
        if kind == "bool":
            return draw(st.booleans())
        if kind == "int":
            return draw(SMALL_INTS)
        if kind == "float":
            return draw(FLOATS)
        if kind == "str":
            return draw(TEXT)
        if kind == "bytes":
            return draw(BYTES)
        if kind == "obj":
            return draw(st.sampled_from(objects))
        if kind == "enum":
            return draw(st.sampled_from([*Color, *Level]))
        if kind == "shared":
            return draw(st.sampled_from(pool))
        if kind == "bytearray":
            made: Any = bytearray(draw(BYTES))
        elif kind == "list":
            made = [value(depth - 1) for _ in range(draw(st.integers(0, 3)))]
            if made and draw(st.integers(0, 9)) == 0:
                made.append(made)  # a list that contains itself
        elif kind == "tuple":
            return tuple(value(depth - 1) for _ in range(draw(st.integers(0, 3))))
        elif kind == "dict":
            keys = draw(st.lists(st.integers(-5, 5) | TEXT, max_size=3, unique=True))
            made = {k: value(depth - 1) for k in keys}
        elif kind == "tdict":
            keys = draw(st.lists(st.tuples(st.integers(0, 3), TEXT), max_size=3, unique=True))
            made = {k: value(depth - 1) for k in keys}
        elif kind == "odict":
            keys = draw(st.lists(st.sampled_from(objects), max_size=3, unique_by=id))
            made = {k: value(depth - 1) for k in keys}
        elif kind == "set":
            made = set(draw(st.lists(SMALL_INTS | TEXT, max_size=4)))
            made |= set(draw(st.lists(st.sampled_from(objects), max_size=2)))
        else:
            return frozenset(draw(st.lists(st.integers(-9, 9) | TEXT, max_size=4)))
        pool.append(made)
        return made

    for node in nodes:
        node.label = draw(TEXT)
        node.next = draw(st.none() | st.sampled_from(nodes))
        if pool and draw(st.integers(0, 4)) == 0:
            shared_kids = [c for c in pool if type(c) is list and all(type(x) is GNode for x in c)]
            node.kids = draw(st.sampled_from(shared_kids)) if shared_kids else []
        else:
            node.kids = draw(st.lists(st.sampled_from(nodes), max_size=3))
            pool.append(node.kids)
        node.attrs = draw(st.dictionaries(TEXT, SMALL_INTS, max_size=3))
        node.tags = draw(st.sets(SMALL_INTS, max_size=3))
        node.pair = (draw(SMALL_INTS), draw(TEXT))
        node.weights = draw(st.lists(FLOATS, max_size=3))
        node.maybe = draw(st.none() | SMALL_INTS)
        node.shape = draw(st.none() | st.sampled_from(shapes)) if shapes else None
        either = [s for s in shapes if type(s) in (GCircle, GSquare)] + leaves
        node.either = draw(st.none() | st.sampled_from(either)) if either else None
        node.by_obj = {k: draw(TEXT) for k in draw(st.lists(st.sampled_from(nodes), max_size=2))}
        if leaves:
            node.by_tuple = {
                (draw(st.integers(0, 3)), draw(TEXT)): draw(st.none() | st.sampled_from(leaves))
                for _ in range(draw(st.integers(0, 2)))
            }
            node.members = set(draw(st.lists(st.sampled_from(leaves), max_size=3)))
        node.frozen = frozenset(draw(st.lists(TEXT, max_size=3)))
        node.payload = value(3)
        node.extra = value(2)
    order = draw(st.permutations(objects))
    return GGraph(nodes=list(order), loose=value(3))


@settings(max_examples=50)
@given(graph=graphs())
def test_random_graph_round_trips_through_every_engine_pair(graph: GGraph) -> None:
    streams = {engine: state.dumps(graph, engine=engine) for engine in state.ENGINES}
    for save_with, load_with in ENGINE_PAIRS:
        loaded = state.loads(streams[save_with], engine=load_with)
        diff = graph_diff(graph, loaded)
        assert diff is None, f"{save_with} -> {load_with}: {diff}"


@settings(max_examples=25)
@given(graph=graphs())
def test_random_graph_as_plain_data_root(graph: GGraph) -> None:
    root = {"graph": graph, "nodes": graph.nodes, "loose": [graph.loose, graph.loose]}
    for save_with, load_with in ENGINE_PAIRS:
        loaded = state.loads(state.dumps(root, engine=save_with), engine=load_with)
        diff = graph_diff(root, loaded)
        assert diff is None, f"{save_with} -> {load_with}: {diff}"


@settings(max_examples=30)
@given(graph=graphs())
def test_helper_agrees_with_pickle(graph: GGraph) -> None:
    """pickle preserves identity and structure, so the helper must call its copy equal."""
    copied = pickle.loads(pickle.dumps(graph, protocol=5))
    assert graph_diff(graph, copied) is None


@settings(max_examples=30)
@given(graph=graphs(), data=st.data())
def test_helper_sees_a_change_in_a_pickled_copy(graph: GGraph, data: st.DataObject) -> None:
    copied = pickle.loads(pickle.dumps(graph, protocol=5))
    nodes = [x for x in copied.nodes if type(x) is GNode]
    victim = data.draw(st.sampled_from(nodes))
    how = data.draw(st.sampled_from(["ident", "unshare-kids", "retarget-next", "attrs"]))
    if how == "ident":
        victim.ident += 1
    elif how == "unshare-kids":
        victim.kids = list(victim.kids)  # same contents, sharing broken (and new identity)
        victim.kids.append(victim)
    elif how == "retarget-next":
        victim.next = GNode(ident=victim.ident) if victim.next is None else None
    else:
        victim.attrs = {**victim.attrs, "\x00new": 1}
    assert graph_diff(graph, copied) is not None
