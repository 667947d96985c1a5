"""Tuples holding references (``tuple[Node, int]``, ``tuple[Node, ...]``,
``tuple[Optional[Node], str]``), written by the native core in C.

typed writes them through the slot's fit test and compact encoder: an array of the
scalars and the references' ids (the empty tuple an empty array, not Nil), and its
escape for anything else.  The native core writes the same bytes without calling
typed's generated code for a tuple that fits.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state

from .requires import requires_native
from .test_native_bigint import python_slots

pytestmark = requires_native


@state.savable(name="tests.native_ref_tuples.TNode")
@dataclass(eq=False)
class TNode:
    pair: tuple[TNode, int] | None = None
    many: tuple[TNode, ...] = ()
    opt: tuple[Optional[TNode], str] = (None, "")  # noqa: UP045
    label: int = 0


def _check(objs: list[TNode]) -> bytes:
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
        _check(objs)
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
    _check(objs)
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
    _check(list(order))
