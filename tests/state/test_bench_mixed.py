"""The bench's ``mixed`` shape (one class, every common field kind) round-trips through
every engine and C pickle to an isomorphic graph, and native writes typed's stream.

The shape is a benchmark first: these tests keep its figures honest (an engine that
loses a kind on it would look fast) and check the generator really sets every kind.
"""

from __future__ import annotations

import math
import pickle
import sys
import threading
from typing import Any

import pytest

from ckpt import state
from ckpt.bench import state_mixed
from ckpt.bench.state_mixed import MNode

from .graph_equal import graph_diff

NODES = 1500


@pytest.fixture(scope="module")
def root() -> state_mixed.MixedRoot:
    return state_mixed.make_mixed(NODES)


def test_the_generator_sets_every_kind(root: state_mixed.MixedRoot) -> None:
    nodes = root.nodes
    assert len(nodes) == NODES and all(type(n) is MNode for n in nodes)
    assert any(n.ident >= 1 << 64 for n in nodes), "an int beyond 64 bits"
    assert any(n.weight == math.inf for n in nodes) and any(n.weight == -math.inf for n in nodes)
    assert {type(n.extra) for n in nodes} == {MNode, int, type(None)}
    assert all(type(n.peer) is MNode for n in nodes)
    assert {type(n.next) for n in nodes} == {MNode, type(None)}
    for name in ("raw", "path", "tags", "attrs", "kids"):
        assert any(getattr(n, name) for n in nodes), f"a non-empty {name}"
    assert len({n.mode for n in nodes}) == len(type(nodes[0].mode))


def test_the_generator_is_seeded() -> None:
    a, b = state_mixed.make_mixed(200), state_mixed.make_mixed(200)
    assert state.dumps(a, engine="typed") == state.dumps(b, engine="typed")


@pytest.mark.parametrize("engine", state.ENGINES)
def test_every_engine_round_trips_it(root: state_mixed.MixedRoot, engine: str) -> None:
    loaded = state.loads(state.dumps(root, engine=engine), engine=engine)
    assert graph_diff(root, loaded) is None


@pytest.mark.skipif(not state.native_status()[0], reason=f"native: {state.native_status()[1]}")
def test_native_writes_the_typed_stream(root: state_mixed.MixedRoot) -> None:
    assert state.dumps(root, engine="native") == state.dumps(root, engine="typed")


def test_c_pickle_round_trips_it(root: state_mixed.MixedRoot) -> None:
    """As ``bench state`` runs pickle: in a thread with a large stack and a raised
    recursion limit (pickle recurses once per nested object)."""
    out: dict[str, Any] = {}

    def work() -> None:
        try:
            out["loaded"] = pickle.loads(pickle.dumps(root, 5))
        except RecursionError as exc:
            out["deep"] = exc

    old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(max(old_limit, 50_000))
    threading.stack_size(256 << 20)
    try:
        worker = threading.Thread(target=work)
        worker.start()
        worker.join(timeout=60)
    finally:
        threading.stack_size(old_stack)
        sys.setrecursionlimit(old_limit)
    if "deep" in out and sys.version_info >= (3, 12):
        # there C pickle's depth limit is fixed at build time: the recursion limit and
        # the thread's stack above do not raise it (bench state leaves its cells empty)
        pytest.skip(f"C pickle cannot nest this deep on Python 3.12 and later: {out['deep']}")
    assert "loaded" in out, f"pickle failed: {out.get('deep', 'see the traceback above')}"
    assert graph_diff(root, out["loaded"]) is None
