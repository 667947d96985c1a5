"""A class's native save plan is parsed once and kept on its TypeInfo: a later walk
uses it without calling back, a class registered again gets a new one, a dropped
class's plan does not keep it alive, and a malformed plan is a clean error.
"""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest

from ckpt import state
from ckpt.state import native, registry

from .requires import requires_native

pytestmark = requires_native


def _both(root: object) -> bytes:
    data = state.dumps(root, engine="native")
    assert data == state.dumps(root, engine="typed")
    return data


def test_a_second_walk_finds_the_plan_without_calling_back(monkeypatch) -> None:
    @state.savable(name="tests.plan.Cached")
    @dataclasses.dataclass(eq=False)
    class Cached:
        n: int = 0

    first = _both(Cached(1))
    calls: list[type] = []
    real = native._plan_for
    monkeypatch.setattr(native, "_plan_for", lambda cls: calls.append(cls) or real(cls))
    assert _both(Cached(1)) == first
    assert calls == []


def test_a_class_registered_again_is_saved_under_its_new_registration() -> None:
    @dataclasses.dataclass(eq=False)
    class Renamed:
        n: int = 0

    state.savable(name="tests.plan.Before")(Renamed)
    before = _both(Renamed(7))
    state.savable(name="tests.plan.After")(Renamed)  # a new TypeInfo for the same class
    after = _both(Renamed(7))
    assert b"tests.plan.Before" in before and b"tests.plan.Before" not in after
    assert b"tests.plan.After" in after
    assert state.loads(after, engine="native").n == 7


def _define_and_save() -> weakref.ref:
    @state.savable(name="tests.plan.Dropped")
    @dataclasses.dataclass(eq=False)
    class Dropped:
        n: int = 0
        other: Dropped | None = None

    _both(Dropped(1, Dropped(2)))
    assert isinstance(registry.type_info(Dropped).__dict__["_native_plan"], native._core.Plan)
    return weakref.ref(Dropped)


def test_a_replaced_class_and_its_plan_are_collected() -> None:
    old = _define_and_save()
    _define_and_save()  # the same name again: the registry drops the first class
    gc.collect()
    assert old() is None


@pytest.mark.parametrize(
    "args",
    [
        (),
        (None, 1, False, False, ()),  # the name is not a str
        (None, "n", False, False, [("x",)]),  # fields not a tuple
        (None, "n", False, False, (("x",),)),  # a field of the wrong arity
        (None, "n", False, False, (("x", 0, 0, 0, 0, 0, 0, 0, None, None, 0), 7)),
        # a list[tuple[...]] field whose per-item masks are not a tuple
        (None, "n", False, False, (("x", 5, 0, native.E_TUPLE, 0, 0, 0, 0, None, [1, 2], 0),)),
        (
            None,
            "n",
            False,
            False,
            (("x", 5, 0, native.E_TUPLE, 0, 0, 0, 0, None, tuple(range(99)), 0),),
        ),
    ],
    ids=["empty", "name", "fields", "arity", "second", "masks", "too-many-masks"],
)
def test_a_malformed_plan_is_an_error_not_a_crash(args: tuple) -> None:
    with pytest.raises((TypeError, SystemError)):
        native._core.Plan(*args)
