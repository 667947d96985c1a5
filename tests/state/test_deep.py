"""Deep graphs: a 100000-long chain saves and loads without recursion."""

from __future__ import annotations

import pytest

from ckpt import state

from .conftest import ENGINE_PAIRS, pair_id, roundtrip
from .models import Node, SNode

LENGTH = 100_000


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


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
def test_long_chain_through_a_typed_reference(engines: tuple[str, str]) -> None:
    loaded = roundtrip(_typed_chain(LENGTH), engines)
    assert _walk(loaded, "next") == LENGTH


def test_long_chain_through_a_polymorphic_field(engine: str) -> None:
    head = SNode(0)
    cur = head
    for i in range(1, LENGTH):
        cur.link = SNode(i)
        cur = cur.link
    loaded = state.loads(state.dumps(head, engine=engine), engine=engine)
    assert _walk(loaded, "link") == LENGTH


def test_long_chain_through_typed_lists(engine: str) -> None:
    head = Node(0)
    cur = head
    for i in range(1, LENGTH):
        nxt = Node(i)
        cur.kids.append(nxt)
        cur = nxt
    loaded = state.loads(state.dumps(head, engine=engine), engine=engine)
    count, cur = 1, loaded
    while cur.kids:
        (cur,) = cur.kids
        assert cur.ident == count
        count += 1
    assert count == LENGTH


def test_long_ring_closes(engine: str) -> None:
    head = _typed_chain(LENGTH)
    tail = head
    while tail.next is not None:
        tail = tail.next
    tail.next = head
    loaded = state.loads(state.dumps(head, engine=engine), engine=engine)
    cur = loaded
    for _ in range(LENGTH):
        cur = cur.next
    assert cur is loaded
