"""The native engine writes the typed engine's stream byte for byte and loads every stream.

A parametrized cross-check over every model the suite and the bench know (the kinds
table, the shared test models, the bench shapes and its random graph) and over
hypothesis random graphs: whenever the typed engine's encoding changes, a native
engine that did not follow fails here first.  The rest of the state suite runs against
native too (``conftest.ENGINES``); ``test_native_build`` covers a machine without it.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings

from ckpt import state
from ckpt.bench import state_flat, state_models

from .graph_equal import graph_diff
from .kinds import KINDS, holder
from .models import Color, Containers, Everything, Leaf, Level, Node, Pair, SLeaf
from .requires import requires_native
from .test_corruption import _small_graph
from .test_random_graphs import graphs

pytestmark = requires_native


def _first_difference(a: bytes, b: bytes) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"lengths {len(a)} / {len(b)}, first difference at byte {i}: {a[i : i + 16].hex()} vs {b[i : i + 16].hex()}"


def check_native(make: Callable[[], Any]) -> None:
    """Native's stream equals typed's; native loads every engine's stream to the graph."""
    root = make()
    typed_stream = state.dumps(root, engine="typed")
    native_stream = state.dumps(root, engine="native")
    assert native_stream == typed_stream, _first_difference(native_stream, typed_stream)
    for saved_with in ("reflect", "typed", "native"):
        loaded = state.loads(state.dumps(root, engine=saved_with), engine="native")
        diff = graph_diff(root, loaded)
        assert diff is None, f"{saved_with} -> native: {diff}"


def _kind_models() -> Iterator[Any]:
    for kind in KINDS:
        for slots in (False, True):
            yield pytest.param(
                lambda k=kind, s=slots: [holder(k, s)(v) for v in k.samples()],
                id=f"kind-{kind.name}-{'slots' if slots else 'plain'}",
            )
            # One holder per sample too: each value alone decides its stream (tagged or not).
            for i in range(len(kind.samples())):
                yield pytest.param(
                    lambda k=kind, s=slots, i=i: holder(k, s)(k.samples()[i]),
                    id=f"kind-{kind.name}-{'slots' if slots else 'plain'}-{i}",
                )


def _shared_models() -> list[Any]:
    def ring() -> Any:
        nodes = [Node(i, f"n{i}", payload={"i": [i, (i,)]}) for i in range(300)]
        for i, node in enumerate(nodes):
            node.next = nodes[(i * 7 + 1) % 300]
            node.kids = [nodes[(i + 3) % 300], nodes[(i * 5) % 300]]
        return [nodes, [Pair(Leaf(i), [i]) for i in range(75)]]

    def shared_containers() -> Any:
        items = [1, 2]
        a, b = Containers(), Containers()
        a.items = b.items = items  # one list reached from two objects
        a.nested = [items, [3]]
        b.table = a.table = {"x": 1}
        return [a, b, items, {"again": items}, a.nested]

    return [
        pytest.param(_small_graph, id="corruption-graph"),
        pytest.param(ring, id="ring"),
        pytest.param(shared_containers, id="shared-containers"),
        pytest.param(lambda: Everything(small=-4, text="ü", color=Color.BLUE), id="everything"),
        pytest.param(lambda: [SLeaf(2**70, "big"), Leaf(Level.HIGH)], id="tagged"),
        pytest.param(lambda: {"root": [Leaf(i) for i in range(40)], 3: (1, 2.5)}, id="plain-root"),
    ]


def _bench_models() -> list[Any]:
    shapes = [pytest.param(make, id=f"bench-{name}") for name, make in state_models.SHAPES.items()]
    return [
        *shapes,
        pytest.param(lambda: state_models.make_graph(3000), id="bench-graph"),
        pytest.param(lambda: state_flat.make_flat(3000), id="bench-flat"),
    ]


@pytest.mark.parametrize("make", [*_kind_models(), *_shared_models(), *_bench_models()])
def test_native_stream_is_typed_stream_and_loads_every_stream(make: Callable[[], Any]) -> None:
    check_native(make)


@settings(max_examples=60)
@given(graph=graphs())
def test_random_graph_native_stream_is_typed_stream(graph: Any) -> None:
    check_native(lambda: graph)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: [Leaf(), object()], id="unsavable-in-root"),
        pytest.param(lambda: Node(1, payload=object()), id="unsavable-in-field"),
        pytest.param(lambda: Pair(object(), None), id="unsavable-in-ref"),
        pytest.param(lambda: Node(1, kids=[Leaf(), object()]), id="unsavable-in-list"),
        pytest.param(lambda: Node(1, label="\udcff"), id="lone-surrogate"),
    ],
)
def test_native_fails_where_typed_fails_with_the_same_message(make: Callable[[], Any]) -> None:
    messages = []
    for engine in ("typed", "native"):
        with pytest.raises(state.StateError) as info:
            state.dumps(make(), engine=engine)
        messages.append(str(info.value).removeprefix(f"{engine} save failed: "))
    assert messages[0] == messages[1]


def test_no_collection_during_native_save_or_load() -> None:
    graph = state_models.make_graph(3000)
    starts: list[int] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            starts.append(info["generation"])

    gc.collect()
    gc.callbacks.append(on_gc)
    try:
        data = state.dumps(graph, engine="native")
        state.loads(data, engine="native")
    finally:
        gc.callbacks.remove(on_gc)
    assert starts == []


def test_native_stats_count_objects_per_type() -> None:
    graph = state_models.make_graph(500)
    for engine in ("typed", "native"):
        stats = state.Stats()
        state.dumps(graph, engine=engine, stats=stats)
        if engine == "typed":
            expected = dict(stats.counts)
        else:
            assert stats.counts == expected
            assert all(ns >= 0 for ns in stats.times.values())


def test_native_reads_no_clock_without_stats(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    calls = []
    real = time.perf_counter_ns
    monkeypatch.setattr(time, "perf_counter_ns", lambda: calls.append(1) or real())
    data = state.dumps(state_models.make_graph(200), engine="native")
    state.loads(data, engine="native")
    assert calls == []


def test_before_save_runs_once_per_object_even_when_typed_saves_again() -> None:
    from .test_hooks import EVENTS, Counted

    EVENTS.clear()
    state.dumps([Counted(7), SLeaf(2**70)], engine="native")  # the big int: tagged mode
    assert EVENTS == [("before_save", "Counted", 7)]


def test_default_engine_is_native_where_built() -> None:
    assert state.default_engine() == "native"
    assert "native" in state.ENGINES
    assert state.loads(state.dumps([Leaf(3)]))[0].value == 3
