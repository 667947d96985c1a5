"""The equality helper must itself be able to fail: check it on graphs known to differ."""

from __future__ import annotations

import copy
import math
import pickle
from typing import Any

import pytest

from .graph_equal import assert_graph_equal, graph_diff
from .models import Color, Leaf, Level, Node, Pair, SLeaf


def _chain(n: int) -> Node:
    head = Node(0)
    cur = head
    for i in range(1, n):
        cur.next = Node(i)
        cur = cur.next
    return head


def test_identical_graph_and_copies_are_equal() -> None:
    a = Node(1, "a", kids=[Node(2), Node(3)], payload={"x": [1, 2.5, None]})
    a.kids[0].next = a  # a cycle
    assert graph_diff(a, a) is None
    assert graph_diff(a, copy.deepcopy(a)) is None
    assert graph_diff(a, pickle.loads(pickle.dumps(a))) is None


def test_deep_chain_compares_without_recursion() -> None:
    a = _chain(20_000)  # far beyond the recursion limit
    b = _chain(20_000)
    assert graph_diff(a, b) is None
    tail = b
    while tail.next is not None:
        tail = tail.next
    tail.ident = -1
    diff = graph_diff(a, b)
    assert diff is not None and "value differs" in diff


def _differs(a: Any, b: Any, needle: str) -> None:
    diff = graph_diff(a, b)
    assert diff is not None, "the helper saw no difference"
    assert needle in diff, diff


@pytest.mark.parametrize(
    ("a", "b", "needle"),
    [
        (1, True, "type differs"),
        (1, 1.0, "type differs"),
        (0.0, -0.0, "float differs"),
        (1.5, 2.5, "float differs"),
        (math.nan, 0.0, "float differs"),
        ("a", "b", "value differs"),
        (b"a", bytearray(b"a"), "type differs"),
        ([1, 2], (1, 2), "type differs"),
        ([1, 2], [1, 2, 3], "length differs"),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, "value differs"),  # dict order matters
        ({1, 2}, {1, 3}, "values differ"),
        (frozenset({1}), {1}, "type differs"),
        (Color.RED, Color.GREEN, "enum member differs"),
        (Level.LOW, 1, "type differs"),
        (Leaf(1), SLeaf(1), "type differs"),
        (Leaf(1), Leaf(2), "value differs"),
        (SLeaf(1, "a"), SLeaf(1, "b"), "value differs"),
        ({Leaf(1)}, {Leaf(2)}, "no counterpart"),
    ],
)
def test_different_values_differ(a: Any, b: Any, needle: str) -> None:
    _differs(a, b, needle)


def test_nan_equals_nan() -> None:
    assert graph_diff([math.nan], [float("nan")]) is None


def test_lost_sharing_differs() -> None:
    shared = Leaf(1)
    a = Pair(shared, shared)
    b = Pair(Leaf(1), Leaf(1))
    _differs(a, b, "sharing lost")


def test_spurious_sharing_differs() -> None:
    a = Pair(Leaf(1), Leaf(1))
    shared = Leaf(1)
    b = Pair(shared, shared)
    _differs(a, b, "spurious sharing")


def test_shared_list_sharing_is_checked() -> None:
    items = [1]
    a = Pair(items, items)
    b = Pair([1], [1])
    _differs(a, b, "sharing")
    _differs(b, a, "sharing")


def test_cycle_versus_unrolled_cycle_differs() -> None:
    a = Node(1)
    a.next = a
    b = Node(1, next=Node(1))
    b.next.next = b.next  # same values, but the cycle closes one node too late
    _differs(a, b, "sharing")


def test_self_containing_list() -> None:
    a: list[Any] = [1]
    a.append(a)
    b: list[Any] = [1]
    b.append(b)
    assert graph_diff(a, b) is None
    c: list[Any] = [1, [1, None]]
    c[1][1] = c[1]
    _differs(a, c, "sharing")


def test_sets_of_objects_are_matched_by_structure() -> None:
    a = {Leaf(1), Leaf(2), Leaf(3)}
    b = {Leaf(3), Leaf(1), Leaf(2)}
    assert graph_diff(a, b) is None
    shared = Leaf(1)
    # The same object reached through the set and through a list must stay one object.
    assert graph_diff([shared, {shared}], [(s := Leaf(1)), {s}]) is None
    _differs([shared, {shared}], [Leaf(1), {Leaf(1)}], "no counterpart")


def test_pickle_copy_with_a_mutation_differs() -> None:
    root = Node(1, kids=[Node(2, payload={"k": [1, 2]}), Node(3)])
    copied = pickle.loads(pickle.dumps(root))
    assert graph_diff(root, copied) is None
    copied.kids[0].payload["k"].append(3)
    _differs(root, copied, "length differs")


def test_assert_graph_equal_raises_with_the_path() -> None:
    with pytest.raises(AssertionError, match=r"\$\.kids\[1\]\.ident"):
        assert_graph_equal(Node(kids=[Node(1), Node(2)]), Node(kids=[Node(1), Node(5)]))
