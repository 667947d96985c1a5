"""The native engine's one-call entries for a small save's and load's fixed sequence
(``Walk.save``; parsed fill plans kept on the head): whichever path a call takes (a
type table met before or not, something shared or escaped, the steps of a core built
before them), the stream is typed's byte for byte and loads back the same."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ckpt import state
from ckpt.errors import StateError
from ckpt.state import native

from .requires import requires_native

pytestmark = requires_native


@state.savable(name="tests.fixed.Leaf")
@dataclasses.dataclass(eq=False)
class Leaf:
    value: int = 0


@state.savable(name="tests.fixed.Holder")
@dataclasses.dataclass(eq=False)
class Holder:
    entries: dict[int, Leaf] = dataclasses.field(default_factory=dict)
    items: list[Leaf] = dataclasses.field(default_factory=list)
    small: int = 0


def _roots() -> list[Any]:
    leaf = Leaf(7)
    shared_list = [1, 2]
    return [
        Leaf(3),  # one object
        Holder({i: leaf for i in range(64)}, [leaf] * 64, 5),  # the map and slice shapes
        Holder({}, [], 1 << 70),  # an int beyond 64 bits: escaped in its slot
        [shared_list, shared_list, Leaf(1)],  # a list met twice: a shared location
        {"a": Leaf(2), "b": None},  # a root dict
        None,
    ]


def _fresh_table() -> None:
    native._prefixes.clear()


@pytest.mark.parametrize("index", range(len(_roots())))
def test_first_and_repeat_saves_are_typed_bytes(index: int) -> None:
    """The first save of a type table (no prefix known: Python assembles) and the next
    (C assembles and frames) both write typed's stream."""
    _fresh_table()
    typed = state.dumps(_roots()[index], engine="typed")
    first = state.dumps(_roots()[index], engine="native")
    again = state.dumps(_roots()[index], engine="native")
    assert first == typed
    assert again == typed


@pytest.mark.parametrize("index", range(len(_roots())))
def test_steps_path_writes_the_same(monkeypatch: pytest.MonkeyPatch, index: int) -> None:
    """A core without ``Walk.save`` (its older steps: dyn_bytes, run, assemble) writes
    what the one call writes."""
    one_call = state.dumps(_roots()[index], engine="native")
    monkeypatch.setattr(native, "_SAVE_IN_C", False)
    assert state.dumps(_roots()[index], engine="native") == one_call


def test_repeat_save_loads_back() -> None:
    root = _roots()[1]
    state.dumps(root, engine="native")
    back = state.loads(state.dumps(root, engine="native"), engine="native")
    assert [e.value for e in back.entries.values()] == [7] * 64
    assert back.entries[0] is back.items[0] is back.items[63]


def test_a_failed_save_names_the_object_and_the_next_save_works() -> None:
    class Unsavable:
        pass

    with pytest.raises(StateError, match="tests.fixed.Holder"):
        state.dumps(Holder({}, [Unsavable()]), engine="native")  # type: ignore[list-item]
    root = _roots()[1]
    assert state.dumps(root, engine="native") == state.dumps(root, engine="typed")


def test_walk_save_checks_its_arguments() -> None:
    walk = native._core.Walk(native._plan_for, native._enum_plan, set(), {})
    try:
        with pytest.raises(TypeError):
            walk.save(None, None, None, None, None, [], 2)  # prefixes not a dict
        with pytest.raises(TypeError):
            walk.save(None, None, None, None, None, {})  # too few
        with pytest.raises(ValueError):
            walk.save(None, None, None, None, None, {}, 256)
    finally:
        walk.release()
