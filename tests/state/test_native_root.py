"""The root value is encoded in C (``Walk.dyn_bytes``) the way typed's Python ``dyn``
encodes it: the same bytes, the same discovery order, the same shared-container
locations, and the same error for a value that cannot be saved."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state

from .graph_equal import graph_diff
from .models import Color, Leaf, Level, Node
from .requires import requires_native

pytestmark = requires_native

LEAVES = [Leaf(i) for i in range(4)]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)  # beyond 64 bits: self-describing big ints
    | st.floats(allow_nan=False)
    | st.text(max_size=4)
    | st.binary(max_size=4)
    | st.sampled_from([*LEAVES, Color.RED, Level.HIGH])
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


def _check(root: Any) -> None:
    native = state.dumps(root, engine="native")
    assert native == state.dumps(root, engine="typed")
    assert graph_diff(root, state.loads(native, engine="native")) is None


@settings(max_examples=200, deadline=None)
@given(plain)
def test_plain_roots_are_typed_bytes(root: Any) -> None:
    _check(root)


def test_containers_shared_at_and_below_the_root() -> None:
    items = [1, Leaf(9)]
    table = {"items": items}
    node = Node(1, kids=[Node(2)], payload=table)
    _check([items, table, items, node, (items, table), {"again": [items]}])


def test_a_root_nested_deeper_than_the_c_limit() -> None:
    root: Any = [Leaf(1)]
    for i in range(150):  # C hands what lies past 64 levels to Python's dyn
        root = [root, {"i": i}]
    _check(root)


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
    _check(Leaf(3))
    _check([Leaf(4), Leaf(5)])
