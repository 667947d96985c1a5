"""A live list whose items are being written may be resized by Python code the writing
runs: a registered value's ``to_plain``, or discovering a class (its plan).  The native
writer puts the array's length first, so it must correct that length afterwards; typed's
code iterates the list in Python, and native must write exactly its bytes (a length
that disagrees with the items is a stream no engine loads)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from ckpt import state

from .graph_equal import graph_diff
from .requires import requires_native

pytestmark = requires_native

# What the codec below does to the list it finds here, once per save.
TARGET: list[list[Any]] = []
ACT: list[Callable[[list[Any]], None]] = []


class Token:
    """A value whose to_plain runs ACT on TARGET[0] the first time it is called."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Token)

    __hash__ = object.__hash__

    def __repr__(self) -> str:  # graph_diff compares other values by == and repr
        return "Token()"


def _to_plain(_t: Token) -> list[int]:
    if ACT:
        ACT.pop()(TARGET[0])
    return [7]


state.register_value(Token, to_plain=_to_plain, from_plain=lambda _v: Token(), name="t.Tok")


@state.savable(name="tests.resized.AnyList")
@dataclasses.dataclass(eq=False)
class AnyList:
    items: list[Any] = dataclasses.field(default_factory=list)
    loose: Any = None  # a list here is written self-describing (w_dyn_items)


@state.savable(name="tests.resized.Node")
@dataclasses.dataclass(eq=False)
class Node:
    n: int = 0


@state.savable(name="tests.resized.Late")
@dataclasses.dataclass(eq=False)
class Late:
    n: int = 0


@state.savable(name="tests.resized.RefList")
@dataclasses.dataclass(eq=False)
class RefList:
    refs: list[Node | Late] = dataclasses.field(default_factory=list)
    nested: list[list[Node | Late]] = dataclasses.field(default_factory=list)


# (items before, the change made while the token is written): sizes chosen so the
# header changes length (15 -> 16 is one byte -> three), or does not.
CHANGES: dict[str, tuple[int, Callable[[list[Any]], None]]] = {
    "clear": (20, list.clear),
    "pop-same-header": (10, lambda xs: xs.pop()),
    "shrink-16-to-3": (16, lambda xs: xs.__delitem__(slice(3, None))),
    "grow-14-to-20": (14, lambda xs: xs.extend(range(100, 106))),
    "grow-same-header": (3, lambda xs: xs.append(99)),
    "replace-later": (6, lambda xs: xs.__setitem__(-1, "changed")),
}


def _any_list(size: int, where: str) -> AnyList:
    items: list[Any] = [1, Token(), *range(2, size)]
    return AnyList(items=items) if where == "field" else AnyList(loose=items)


def _save_both(make: Callable[[], Any], act: Callable[[list[Any]], None], pick) -> bytes:
    out = []
    for engine in ("typed", "native"):
        root = make()
        TARGET[:] = [pick(root)]
        ACT[:] = [act]
        out.append((root, state.dumps(root, engine=engine)))
    (_, typed), (_, native) = out
    assert not ACT, "the change was never made"
    assert native == typed
    back = state.loads(native, engine="native")  # what was written, not the list now
    assert graph_diff(state.loads(typed, engine="typed"), back) is None
    return native


@pytest.mark.parametrize("where", ["field", "any"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_list_resized_by_a_value_codec_writes_typeds_bytes(where: str, change: str) -> None:
    size, act = CHANGES[change]
    pick = (lambda r: r.items) if where == "field" else (lambda r: r.loose)
    _save_both(lambda: _any_list(size, where), act, pick)


@pytest.mark.parametrize("change", ["clear", "shrink-16-to-3", "grow-14-to-20"])
@pytest.mark.parametrize("field", ["refs", "nested"])
def test_a_list_of_references_resized_by_discovery_is_written_as_iterated(
    monkeypatch: pytest.MonkeyPatch, change: str, field: str
) -> None:
    """Discovering Late (met first at index 1) asks for its plan, which resizes the list
    being written.  typed discovers classes elsewhere, so no byte comparison here: the
    stream must hold what iterating the list in Python gives, the items before the change
    and the list's items after it from index 2 on."""
    from ckpt.state import native

    size, act = CHANGES[change]
    plan_for = native._plan_for

    def meddling_plan_for(cls: type) -> object:
        if cls is Late and ACT:
            ACT.pop()(TARGET[0])
        return plan_for(cls)

    for cls in (RefList, Node, Late):  # no plans cached: discovery asks for them
        state.schema.schema_of(cls).info.__dict__.pop("_native_plan", None)
    monkeypatch.setattr(native, "_plan_for", meddling_plan_for)
    items: list[Node | Late] = [Node(0), Late(1), *(Node(i) for i in range(2, size))]
    grown = [Node(i) for i in range(100, 106)]
    root = RefList(refs=items) if field == "refs" else RefList(nested=[items])
    before = list(items)
    TARGET[:] = [items]
    ACT[:] = [(lambda xs: xs.extend(grown)) if change.startswith("grow") else act]
    data = state.dumps(root, engine="native")
    assert not ACT, "discovery never asked for Late's plan"
    expect = before[:2] + items[2:]
    back = state.loads(data, engine="native")
    got = back.refs if field == "refs" else back.nested[0]
    assert [(type(x).__name__, x.n) for x in got] == [(type(x).__name__, x.n) for x in expect]
    assert state.loads(data, engine="typed") is not None  # typed reads it too
