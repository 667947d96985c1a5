"""``list[tuple[A, B, ...]]`` of scalars is read in C (``L_SEQ_TUPLE``, e.g. a memory
manager's auxv): every value comes back as typed loads it, and a row C does not take
(another arity, a nested array or map, an escape) gets typed's value or StateError."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.state import wire

from .requires import requires_native

pytestmark = requires_native


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


def _outcome(data: bytes, engine: str) -> tuple[str, Any]:
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
    native, typed = _outcome(data, "native"), _outcome(data, "typed")
    assert native == typed
