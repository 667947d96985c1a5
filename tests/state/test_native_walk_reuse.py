"""The native engine keeps one released walk per interpreter for the next save
(``native._idle_walks``): a save taking it writes exactly what a fresh walk writes, runs
every hook again, and a big save leaves no big walk behind."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from ckpt import state
from ckpt.errors import StateError
from ckpt.state import native, registry

from .requires import requires_native

pytestmark = requires_native


@state.savable(name="tests.reuse.Box")
@dataclasses.dataclass(eq=False)
class Box:
    n: int = 0
    items: list = dataclasses.field(default_factory=list)


@state.savable(name="tests.reuse.Hooked")
@dataclasses.dataclass(eq=False)
class Hooked:
    n: int = 0

    def __before_save__(self) -> None:
        HOOK_CALLS.append(self.n)


HOOK_CALLS: list[int] = []


@state.savable(name="tests.reuse.Nesting")
@dataclasses.dataclass(eq=False)
class Nesting:
    inner: object = None

    def __before_save__(self) -> None:
        NESTED.append(state.dumps(self.inner, engine="native"))


NESTED: list[bytes] = []


def _fresh(root: object) -> bytes:
    """The bytes of a save with no idle walk to take."""
    native._idle_walks.clear()
    return state.dumps(root, engine="native")


def _shared_and_escaped() -> Box:
    shared = [1, 2]
    return Box(2**70, [Box(1, shared), Box(2, shared)])  # a big int escapes its slot


def test_a_taken_walk_writes_what_a_fresh_one_writes() -> None:
    plain = Box(5, [Box(6), Box(7)])
    want = _fresh(plain)
    assert want == state.dumps(plain, engine="typed")
    for before in (_shared_and_escaped(), Box(1, [Box(i) for i in range(5000)])):
        state.dumps(before, engine="native")  # shared locations, an escape, many ids
        _assert_empty()
        assert state.dumps(plain, engine="native") == want
    with pytest.raises(StateError):
        state.dumps(Box(1, [Box(2), object()]), engine="native")
    _assert_empty()
    assert state.dumps(plain, engine="native") == want


def _assert_empty() -> None:
    """The idle walk holds nothing of the save before."""
    assert native._idle_walks, "the save kept no walk for the next"
    walk = native._idle_walks[0]
    assert walk.objects == [] and walk.types == [] and walk.shared == {}
    assert walk.failed is None and len(walk.escaped) == 0 and len(walk.ids) == 0


def test_hooks_run_in_every_save_that_takes_the_walk() -> None:
    obj = Hooked(3)
    HOOK_CALLS.clear()
    for _ in range(3):
        state.dumps(Box(0, [obj]), engine="native")
    assert HOOK_CALLS == [3, 3, 3]


def test_a_save_nested_in_a_hook_has_its_own_walk() -> None:
    inner = Box(9, [Box(10)])
    NESTED.clear()
    outer = Nesting(inner)
    data = state.dumps(outer, engine="native")
    assert [state.dumps(inner, engine="typed")] == NESTED
    assert data == state.dumps(Nesting(inner), engine="typed")
    assert len(native._idle_walks) == 1


def test_a_big_save_leaves_no_big_walk_behind() -> None:
    state.dumps(Box(0, [Box(i, [i]) for i in range(50_000)]), engine="native")
    _assert_empty()
    (walk,) = native._idle_walks
    assert sys.getsizeof(walk.objects) < 1024, "the idle walk keeps the big save's list"


def test_renew_refuses_a_walk_in_use() -> None:
    args = (native._plan_for, native._enum_plan, set(), registry._by_class)
    walk = native._core.Walk(*args)
    with pytest.raises(RuntimeError, match="released"):
        walk.renew(*args)
    walk.release()
    walk.renew(*args)
    walk.release()
