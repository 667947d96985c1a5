"""Deep graphs: a 100000-long chain saves and loads without recursion."""

from __future__ import annotations

import pytest

from ckpt import state

from .conftest import pair_id, roundtrip
from .models import Node, SNode

LENGTH = 100_000
SHORTER = 20_000  # still 20x the recursion limit, for the variants of the chain


def _typed_chain(n: int) -> Node:
    head = Node(0)
    cur = head
    for i in range(1, n):
        cur.next = Node(i)
        cur = cur.next
    return head


def _walk(head: Node | SNode, attr: str) -> int:
    count, cur, expect = 0, head, 0
    while cur is not None:
        assert cur.ident == expect
        expect += 1
        count += 1
        cur = getattr(cur, attr)
    return count


def test_long_chain_through_a_typed_reference(engine: str) -> None:
    head = _typed_chain(LENGTH)
    loaded = state.loads(state.dumps(head, engine=engine), engine=engine)
    assert _walk(loaded, "next") == LENGTH


@pytest.mark.parametrize("engines", [("reflect", "typed"), ("typed", "reflect")], ids=pair_id)
def test_long_ring_across_engines(engines: tuple[str, str]) -> None:
    """The chain closed into a ring, saved with one engine and loaded with the other."""
    head = _typed_chain(SHORTER)
    tail = head
    while tail.next is not None:
        tail = tail.next
    tail.next = head
    loaded = roundtrip(head, engines)
    cur = loaded
    for i in range(SHORTER):
        assert cur.ident == i
        cur = cur.next
    assert cur is loaded


def test_long_chain_through_a_polymorphic_field(engine: str) -> None:
    head = SNode(0)
    cur = head
    for i in range(1, SHORTER):
        cur.link = SNode(i)
        cur = cur.link
    loaded = state.loads(state.dumps(head, engine=engine), engine=engine)
    assert _walk(loaded, "link") == SHORTER


def test_long_chain_through_typed_lists(engine: str) -> None:
    head = Node(0)
    cur = head
    for i in range(1, SHORTER):
        nxt = Node(i)
        cur.kids.append(nxt)
        cur = nxt
    loaded = state.loads(state.dumps(head, engine=engine), engine=engine)
    count, cur = 1, loaded
    while cur.kids:
        (cur,) = cur.kids
        assert cur.ident == count
        count += 1
    assert count == SHORTER
