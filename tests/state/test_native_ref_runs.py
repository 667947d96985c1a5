"""Lists and dict passes of references write an item equal to the one before it without
looking its id up again: runs of one object, alternations and None in between must give
typed's bytes and load back to the same graph."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.bench.state_models import MapHolder, SliceHolder, Target

from .graph_equal import graph_diff
from .models import Node
from .requires import requires_native

pytestmark = requires_native


def _check(root: Any) -> None:
    data = state.dumps(root, engine="native")
    assert data == state.dumps(root, engine="typed")
    assert graph_diff(root, state.loads(data, engine="native")) is None


# indices into a pool of three targets; -1 is None
runs = st.lists(st.integers(-1, 2), max_size=12)


def _pick(pool: list[Target], picks: list[int]) -> list[Target | None]:
    return [None if i < 0 else pool[i] for i in picks]


@settings(max_examples=150, deadline=None)
@given(runs)
def test_lists_of_references_with_runs(picks: list[int]) -> None:
    pool = [Target(i) for i in range(3)]
    _check(SliceHolder(entries=_pick(pool, picks)))
    kids = [Node(i) for i in range(3)]
    _check(Node(9, kids=[kids[i] for i in picks if i >= 0]))


@settings(max_examples=150, deadline=None)
@given(runs)
def test_dict_values_with_runs(picks: list[int]) -> None:
    pool = [Target(i) for i in range(3)]
    _check(MapHolder(entries=dict(enumerate(_pick(pool, picks)))))


@pytest.mark.parametrize("n", [1, 2, 1024])
def test_one_shared_object_many_times(n: int) -> None:
    target = Target(7)
    _check(SliceHolder(entries=[target] * n))
    _check(MapHolder(entries=dict.fromkeys(range(n), target)))
    _check(SliceHolder(entries=[target, Target(8)] * n))
