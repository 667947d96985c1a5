"""No cyclic garbage collection during a typed save or load (and GC state is restored)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ckpt import state

from .graph_equal import assert_graph_equal
from .models import Leaf, Node, Pair


def _graph(n: int = 4000) -> list[Any]:
    nodes = [Node(i, f"n{i}", payload={"i": [i, (i,)]}) for i in range(n)]
    for i, node in enumerate(nodes):
        node.next = nodes[(i * 7 + 1) % n]
        node.kids = [nodes[(i + 3) % n], nodes[(i * 5) % n]]
    return [nodes, [Pair(Leaf(i), [i]) for i in range(n // 4)]]


@pytest.fixture
def collections() -> Iterator[list[int]]:
    starts: list[int] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            starts.append(info["generation"])

    gc.collect()
    gc.callbacks.append(on_gc)
    try:
        yield starts
    finally:
        gc.callbacks.remove(on_gc)


def test_the_counter_sees_collections(collections: list[int]) -> None:
    """Control: building a graph this size does trigger collections when GC is on."""
    assert gc.isenabled()
    _graph()
    assert collections, "building 4000 nodes ran no collection: the GC test proves nothing"


def test_no_collection_during_typed_save(collections: list[int]) -> None:
    graph = _graph()
    collections.clear()
    data = state.dumps(graph, engine="typed")
    assert collections == []
    assert_graph_equal(graph, state.loads(data, engine="typed"))


def test_no_collection_during_typed_load(collections: list[int]) -> None:
    graph = _graph()
    data = state.dumps(graph, engine="typed")
    gc.collect()
    collections.clear()
    loaded = state.loads(data, engine="typed")
    assert collections == []
    assert len(loaded[0]) == 4000


@pytest.mark.parametrize("engine", state.ENGINES)
def test_gc_state_is_restored(engine: str) -> None:
    assert gc.isenabled()
    data = state.dumps(_graph(50), engine=engine)
    assert gc.isenabled()
    state.loads(data, engine=engine)
    assert gc.isenabled()
    gc.disable()
    try:
        state.loads(state.dumps(_graph(50), engine=engine), engine=engine)
        assert not gc.isenabled(), "the engine turned GC on although the caller had it off"
    finally:
        gc.enable()


@pytest.mark.parametrize("engine", state.ENGINES)
def test_gc_state_is_restored_after_a_failure(engine: str) -> None:
    with pytest.raises(state.StateError):
        state.dumps([Leaf(), object()], engine=engine)
    assert gc.isenabled()
    with pytest.raises(state.StateError):
        state.loads(b"garbage" * 30, engine=engine)
    assert gc.isenabled()


class HookFailed(Exception):
    pass


@state.savable(name="tests.state.gc.Failing")
@dataclass(eq=False)
class Failing:
    when: str = "save"

    def __before_save__(self) -> None:
        if self.when == "save":
            raise HookFailed("before_save")

    def __after_load__(self) -> None:
        if self.when == "load":
            raise HookFailed("after_load")


@pytest.mark.parametrize("engine", state.ENGINES)
@pytest.mark.parametrize("when", ["save", "load"])
def test_gc_state_is_restored_when_a_hook_raises(engine: str, when: str) -> None:
    obj = Failing(when)
    with pytest.raises(Exception) as info:
        if when == "save":
            state.dumps([Leaf(), obj], engine=engine)
        else:
            state.loads(state.dumps([Leaf(), Failing("load")], engine=engine), engine=engine)
    chain, exc = [], info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(isinstance(e, HookFailed) for e in chain), chain
    assert gc.isenabled()


@pytest.mark.skipif("native" not in state.ENGINES, reason="the native C core is not built here")
def test_no_collection_during_native_save_or_load(collections: list[int]) -> None:
    """dumps and loads take native through one C call that pauses GC (native.call_paused)."""
    graph = _graph()
    collections.clear()
    data = state.dumps(graph, engine="native")
    assert collections == []
    gc.collect()
    collections.clear()
    loaded = state.loads(data, engine="native")
    assert collections == []
    assert_graph_equal(graph, loaded)


@pytest.mark.parametrize("engine", state.ENGINES)
def test_gc_stays_off_after_a_failure_when_the_caller_had_it_off(engine: str) -> None:
    gc.disable()
    try:
        with pytest.raises(state.StateError):
            state.dumps([Leaf(), object()], engine=engine)
        assert not gc.isenabled(), "a failed save turned GC on although the caller had it off"
        with pytest.raises(state.StateError):
            state.loads(b"garbage" * 30, engine=engine)
        assert not gc.isenabled(), "a failed load turned GC on although the caller had it off"
    finally:
        gc.enable()


def _pausers() -> list[Any]:
    from ckpt.state import native

    return [native._paused_in_python, native.call_paused]


@pytest.mark.parametrize("paused", _pausers(), ids=["python", "core"])
def test_call_paused_pauses_and_restores_on_every_way_out(paused: Any) -> None:
    seen: list[bool] = []

    def fails() -> None:
        seen.append(gc.isenabled())
        raise HookFailed("inside")

    assert paused(lambda a, b: (gc.isenabled(), a + b), 1, 2) == (False, 3)
    assert gc.isenabled()
    with pytest.raises(HookFailed):
        paused(fails)
    assert seen == [False] and gc.isenabled(), "GC was not paused inside, or not restored"
    gc.disable()
    try:
        with pytest.raises(HookFailed):
            paused(fails)
        assert paused(gc.isenabled) is False
        assert not gc.isenabled(), "GC turned on although the caller had it off"
    finally:
        gc.enable()
