"""Saves and loads in several threads at once do not share walk state."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from ckpt import state

from .graph_equal import graph_diff
from .models import Leaf, Node


def _graph(seed: int) -> list[Node]:
    nodes = [Node(seed * 1000 + i, payload={"seed": [seed, Leaf(i)]}) for i in range(200)]
    for i, node in enumerate(nodes):
        node.next = nodes[(i + 1) % 200]
        node.kids = [nodes[(i * 7) % 200]]
    return nodes


@pytest.fixture
def eager_switching() -> Iterator[None]:
    """Switch threads as often as possible, so interleavings actually happen."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def test_concurrent_round_trips(eager_switching: None) -> None:
    errors: list[str] = []

    def work(seed: int) -> None:
        save_with = state.ENGINES[seed % 2]
        load_with = state.ENGINES[(seed // 2) % 2]
        try:
            for _ in range(8):
                graph = _graph(seed)
                data = state.dumps(graph, engine=save_with)
                diff = graph_diff(graph, state.loads(data, engine=load_with))
                if diff is not None:
                    errors.append(f"thread {seed}: {diff}")
                    return
        except Exception as exc:
            errors.append(f"thread {seed}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
