"""The typed walk's chunks: a chain longer than a chunk, and errors and counts in it.

Typed save hands the generated code an iterator over a type's queue, CHUNK objects per
call; objects discovered during a call (a chain) are saved in that call, and rows are
encoded once CHUNK of them wait.  The stream must not depend on where chunks fall."""

from __future__ import annotations

import itertools

import pytest

from ckpt import state
from ckpt.errors import StateError
from ckpt.state import typed

from .models import Leaf, Node


def _chain(n: int, payload_at: int | None = None, payload: object = None) -> Node:
    nodes = [Node(i, label=f"n{i}") for i in range(n)]
    for a, b in itertools.pairwise(nodes):
        a.next = b
    for i in range(0, n, 7):
        nodes[i].kids = [Node(-i)]  # a second queue of the same type, met in a call
    if payload_at is not None:
        nodes[payload_at].payload = payload
    return nodes[0]


LENGTHS = [1, typed.CHUNK - 1, typed.CHUNK, typed.CHUNK + 1, 2 * typed.CHUNK + 3]


@pytest.mark.parametrize("n", LENGTHS)
def test_a_chain_across_chunk_edges_writes_the_other_engines_stream(n: int) -> None:
    head = _chain(n)
    data = state.dumps(head, engine="typed")
    if "native" in state.ENGINES:
        assert data == state.dumps(head, engine="native")
    loaded = state.loads(data, engine="typed")
    cur, seen = loaded, 0
    while cur is not None:
        assert (cur.ident, cur.label) == (seen, f"n{seen}")
        assert [k.ident for k in cur.kids] == ([-seen] if seen % 7 == 0 else [])
        cur, seen = cur.next, seen + 1
    assert seen == n


@pytest.mark.parametrize("monkey_chunk", [3, 64])
def test_a_small_chunk_changes_nothing_in_the_stream(monkeypatch, monkey_chunk: int) -> None:
    head = _chain(500)
    before = state.dumps(head, engine="typed")
    monkeypatch.setattr(typed, "CHUNK", monkey_chunk)
    assert state.dumps(head, engine="typed") == before


@pytest.mark.parametrize("at", [0, 5, typed.CHUNK + 2, 2 * typed.CHUNK])
def test_an_unsavable_value_deep_in_a_chain_is_named_with_its_field(at: int) -> None:
    head = _chain(2 * typed.CHUNK + 3, payload_at=at, payload=object())
    with pytest.raises(StateError, match=r"tests\.state\.Node\.payload: "):
        state.dumps(head, engine="typed")


def test_stats_count_every_object_of_a_chain() -> None:
    n = 2 * typed.CHUNK + 3
    head = _chain(n, payload_at=1, payload=Leaf(1))
    stats = state.Stats()
    state.dumps(head, engine="typed", stats=stats)
    counts = {row["type"]: row["count"] for row in stats.as_dict()["types"]}
    assert counts["tests.state.Node"] == n + len(range(0, n, 7))
    assert counts["tests.state.Leaf"] == 1
