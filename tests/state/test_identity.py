"""Identity survives a round trip: sharing, cycles, self-reference, distinct equal objects."""

from __future__ import annotations

from typing import Any

import pytest

from ckpt import state

from .conftest import roundtrip
from .graph_equal import assert_graph_equal
from .models import (
    Color,
    Containers,
    Leaf,
    Node,
    Pair,
    PlainOverSlots,
    RefPair,
    SLeaf,
    SlotsSquare,
    SNode,
)


def test_shared_object_through_typed_refs(engines: tuple[str, str]) -> None:
    leaf = Leaf(3)
    loaded = roundtrip(RefPair(leaf, leaf), engines)
    assert loaded.x is loaded.y
    assert loaded.x.value == 3


def test_equal_but_distinct_objects_stay_distinct(engines: tuple[str, str]) -> None:
    loaded = roundtrip(RefPair(Leaf(3), Leaf(3)), engines)
    assert loaded.x is not loaded.y
    assert loaded.x.value == loaded.y.value == 3


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: Leaf(1), id="object"),
        pytest.param(lambda: [1, 2], id="list"),
        pytest.param(lambda: {"a": 1}, id="dict"),
        pytest.param(lambda: {1, 2}, id="set"),
        pytest.param(lambda: bytearray(b"xy"), id="bytearray"),
        pytest.param(lambda: [], id="empty-list"),
        pytest.param(lambda: {}, id="empty-dict"),
        pytest.param(lambda: set(), id="empty-set"),
        pytest.param(lambda: bytearray(), id="empty-bytearray"),
    ],
)
def test_shared_value_through_polymorphic_fields(make: Any, engines: tuple[str, str]) -> None:
    value = make()
    loaded = roundtrip(Pair(value, value), engines)
    assert loaded.x is loaded.y
    assert_graph_equal(Pair(value, value), loaded)
    distinct = roundtrip(Pair(make(), make()), engines)
    assert distinct.x is not distinct.y


def test_object_shared_across_fields_lists_dicts_and_sets(engines: tuple[str, str]) -> None:
    leaf = Leaf(7)
    holder = Node(1, payload={"by_name": leaf, "in_list": [leaf], "in_set": {leaf}, leaf: "key"})
    root = [holder, leaf, (leaf,)]
    loaded = roundtrip(root, engines)
    the_leaf = loaded[1]
    payload = loaded[0].payload
    assert payload["by_name"] is the_leaf
    assert payload["in_list"][0] is the_leaf
    assert next(iter(payload["in_set"])) is the_leaf
    assert payload[the_leaf] == "key"
    assert loaded[2][0] is the_leaf
    assert_graph_equal(root, loaded)


def test_self_reference(engines: tuple[str, str]) -> None:
    node = Node(1)
    node.next = node
    node.kids.append(node)
    node.payload = node
    loaded = roundtrip(node, engines)
    assert loaded.next is loaded
    assert loaded.kids[0] is loaded
    assert loaded.payload is loaded


def test_two_and_three_cycles(engines: tuple[str, str]) -> None:
    a, b, c = Node(1), Node(2), Node(3)
    a.next, b.next, c.next = b, c, a
    a.kids = [b, c]
    loaded = roundtrip([a, b], engines)
    la, lb = loaded
    assert la.next is lb
    assert lb.next.next is la
    assert la.kids[1] is lb.next
    assert_graph_equal([a, b], loaded)


def test_slots_cycle(engines: tuple[str, str]) -> None:
    a, b = SNode(1), SNode(2)
    a.next, b.next = b, a
    a.link, b.link = [a, b], b
    loaded = roundtrip(a, engines)
    assert loaded.next.next is loaded
    assert loaded.link[1] is loaded.next is loaded.next.link


@pytest.mark.parametrize("field_name", ["items", "table", "members", "buf", "nested"])
def test_shared_typed_container_between_two_objects(
    field_name: str, engines: tuple[str, str]
) -> None:
    """a.items is b.items must survive for typed container fields too."""
    first, second = Containers(), Containers()
    shared = {
        "items": [4, 5],
        "table": {"a": 1},
        "members": {1, 2},
        "buf": bytearray(b"ab"),
        "nested": [[1]],
    }[field_name]
    setattr(first, field_name, shared)
    setattr(second, field_name, shared)
    loaded = roundtrip([first, second], engines)
    assert getattr(loaded[0], field_name) is getattr(loaded[1], field_name)
    assert_graph_equal([first, second], loaded)


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("items", [1]),  # equal to the field's default_factory() result
        ("items", []),
        ("table", {}),
        ("members", set()),
        ("buf", bytearray()),
        ("nested", []),
    ],
)
def test_shared_container_equal_to_default_keeps_sharing(
    field_name: str, value: Any, engines: tuple[str, str]
) -> None:
    """A writer may write default-equal fields as Nil, but not when the value is shared."""
    first, second = Containers(), Containers()
    setattr(first, field_name, value)
    setattr(second, field_name, value)
    loaded = roundtrip([first, second], engines)
    left, right = getattr(loaded[0], field_name), getattr(loaded[1], field_name)
    assert left is right, f"{field_name} = {value!r} was shared before saving, not after"


def test_typed_container_shared_with_the_root(engines: tuple[str, str]) -> None:
    obj = Containers(items=[1])
    loaded = roundtrip([obj, obj.items], engines)
    assert loaded[0].items is loaded[1]


def test_inner_list_shared_inside_a_typed_nested_list(engines: tuple[str, str]) -> None:
    inner = [1, 2]
    obj = Containers(nested=[inner, inner])
    loaded = roundtrip(obj, engines)
    assert loaded.nested[0] is loaded.nested[1]
    loaded.nested[0].append(3)
    assert loaded.nested[1] == [1, 2, 3]


def test_list_that_contains_itself(engines: tuple[str, str]) -> None:
    selfish: list[Any] = [1]
    selfish.append(selfish)
    loaded = roundtrip(Pair(selfish, None), engines)
    assert loaded.x[1] is loaded.x
    assert loaded.x[0] == 1


def test_dict_that_contains_itself(engines: tuple[str, str]) -> None:
    selfish: dict[str, Any] = {"n": 1}
    selfish["me"] = selfish
    loaded = roundtrip(selfish, engines)
    assert loaded["me"] is loaded


def test_list_shared_between_root_and_nested_positions(engines: tuple[str, str]) -> None:
    shared = [Leaf(1)]
    root = {"a": shared, "b": [shared, [[shared]]], "c": Pair(shared, {"k": shared})}
    loaded = roundtrip(root, engines)
    assert loaded["a"] is loaded["b"][0] is loaded["b"][1][0][0]
    assert loaded["c"].x is loaded["a"] is loaded["c"].y["k"]
    assert_graph_equal(root, loaded)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda s: [s, (s,)], id="root-list"),
        pytest.param(lambda s: Pair(s, (1, s)), id="object-fields"),
        pytest.param(lambda s: Pair((s, s), None), id="twice-in-one-tuple"),
        pytest.param(lambda s: {"t": ((s,),), "l": s}, id="nested-tuples"),
        pytest.param(lambda s: [(s, s), (s, s), s], id="one-tuple-object-twice"),
        pytest.param(lambda s: Pair((bytearray(b"b"), {1}), s), id="bytearray-and-set"),
    ],
)
def test_shared_list_inside_a_tuple(make: Any, engines: tuple[str, str]) -> None:
    """A tuple holding a shared list is restorable (the list can be built before the tuple)."""
    root = make([Leaf(2)])
    assert_graph_equal(root, roundtrip(root, engines))


def test_sharing_is_real_after_load(engines: tuple[str, str]) -> None:
    """Mutating through one reference is seen through the other."""
    items: list[int] = []
    loaded = roundtrip(Pair(items, Containers(items=items)), engines)
    loaded.x.append(9)
    assert loaded.y.items == [9]


def test_every_load_creates_fresh_objects(engine: str) -> None:
    leaf = SLeaf(1, "a")
    data = state.dumps(RefPair(None, None), engine=engine)
    first = state.loads(data, engine=engine)
    second = state.loads(data, engine=engine)
    assert first is not second
    data = state.dumps(Pair(leaf, [leaf]), engine=engine)
    one, two = state.loads(data, engine=engine), state.loads(data, engine=engine)
    assert one.x is not two.x and one.y is not two.y
    assert one.x is not leaf
    one.y.append(0)
    assert len(two.y) == 1


def test_loaded_graph_does_not_alias_the_original(engines: tuple[str, str]) -> None:
    items = [1, 2]
    original = Containers(items=items, buf=bytearray(b"x"))
    loaded = roundtrip(original, engines)
    assert loaded.items is not items
    assert loaded.buf is not original.buf


def test_slots_subclass_of_a_plain_base(engines: tuple[str, str]) -> None:
    """Inherited fields live in __dict__, the subclass's own in slots; both must load."""
    original = SlotsSquare("sq", 3, Color.GREEN)
    loaded = roundtrip([original, Pair(original, None)], engines)
    assert type(loaded[0]) is SlotsSquare
    assert (loaded[0].name, loaded[0].side, loaded[0].color) == ("sq", 3, Color.GREEN)
    assert loaded[1].x is loaded[0]


def test_plain_subclass_of_a_slots_base(engines: tuple[str, str]) -> None:
    """Inherited fields live in slots, the subclass's own in __dict__; both must load."""
    original = PlainOverSlots(4, "label", "note")
    loaded = roundtrip([original, Pair(original, None)], engines)
    assert type(loaded[0]) is PlainOverSlots
    assert (loaded[0].value, loaded[0].label, loaded[0].note) == (4, "label", "note")
    assert loaded[1].x is loaded[0]


def _list_in_tuple_in_itself() -> list[Any]:
    selfish: list[Any] = []
    selfish.append((selfish, [selfish]))
    return selfish


def _dict_in_tuple_in_itself() -> Pair:
    selfish: dict[str, Any] = {}
    selfish["t"] = (1, (selfish, [selfish]))
    return Pair(selfish, (selfish,))


@pytest.mark.parametrize("make", [_list_in_tuple_in_itself, _dict_in_tuple_in_itself])
def test_container_that_contains_itself_through_a_tuple(
    make: Any, engines: tuple[str, str]
) -> None:
    root = make()
    assert_graph_equal(root, roundtrip(root, engines))
