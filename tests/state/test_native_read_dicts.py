"""The native reader's dict fields read straight from the bytes (``dict[K, Ref]`` and
``dict[K, V]`` of scalars): for every wire shape a dict slot can hold in a checksum-valid
frame (fitting, empty, None, keys and values of different counts, ids out of range,
nested keys or values, a map), the native load gives what the typed engine's gives: the
same graph or a StateError/TypeError of the same type."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ckpt import state
from ckpt.state import wire

from .graph_equal import graph_diff
from .requires import requires_native

pytestmark = requires_native


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


SHAPES: list[tuple[str, Any, Any]] = [
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


def _outcome(data: bytes, engine: str) -> Any:
    try:
        return state.loads(data, engine=engine)
    except (state.StateError, TypeError) as exc:
        return type(exc)


@pytest.mark.parametrize(("name", "refs", "table"), SHAPES, ids=[s[0] for s in SHAPES])
def test_every_dict_slot_shape_loads_as_typed_loads_it(name: str, refs: Any, table: Any) -> None:
    payload = wire.unframe(state.dumps(_graph(2), engine="typed"))
    row = payload[wire.ROWS][_type_index(payload)][0]
    row[0], row[2] = refs, table
    data = wire.frame(payload)
    typed, native = _outcome(data, "typed"), _outcome(data, "native")
    if isinstance(typed, type):
        assert native is typed, (name, typed, native)
    else:
        assert not isinstance(native, type), (name, native)
        assert graph_diff(typed, native) is None, name
