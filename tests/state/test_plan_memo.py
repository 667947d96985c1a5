"""The load plan's field mapping is remembered per class and stream layout
(``graph.make_plan``): the same image restored twice maps its fields once, a changed
layout gets its own mapping, refused layouts are refused every time and never
remembered, and a hostile stream cannot grow the memo without bound."""

from __future__ import annotations

import dataclasses

import pytest

from ckpt import state
from ckpt.errors import StateError
from ckpt.state import graph
from ckpt.state.schema import schema_of


@state.savable(name="tests.memo.Row")
@dataclasses.dataclass(eq=False)
class Row:
    a: int = 0
    b: str = ""
    c: list[int] = dataclasses.field(default_factory=list)


def _fresh() -> object:
    sch = schema_of(Row)
    sch.plan_memo.clear()
    return sch


def test_the_same_layout_maps_once_and_loads_the_same() -> None:
    sch = _fresh()
    data = state.dumps([Row(1, "x", [2]), Row(3, "y", [])], engine="typed")
    first = state.loads(data, engine="typed")
    assert len(sch.plan_memo) == 1
    sources = next(iter(sch.plan_memo.values()))
    second = state.loads(data, engine="typed")
    assert len(sch.plan_memo) == 1 and next(iter(sch.plan_memo.values())) is sources
    assert [(r.a, r.b, r.c) for r in first] == [(r.a, r.b, r.c) for r in second]
    assert [(r.a, r.b, r.c) for r in second] == [(1, "x", [2]), (3, "y", [])]


def test_another_layout_gets_its_own_mapping() -> None:
    sch = _fresh()
    exact = graph.make_plan(0, sch, ["a", "b", "c"], ["int", "str", "list[int]"], 1)
    reordered = graph.make_plan(0, sch, ["c", "a"], ["list[int]", "int"], 1)
    assert len(sch.plan_memo) == 2
    assert [i for _, i in exact.sources] == [0, 1, 2]
    assert [i for _, i in reordered.sources] == [1, None, 0]  # b takes its default
    assert reordered.stream_names == ("c", "a") and reordered.nfields == 2


def test_a_refused_layout_is_refused_again_and_not_remembered() -> None:
    sch = _fresh()
    for _ in range(2):
        with pytest.raises(StateError, match="changed kind"):
            graph.make_plan(0, sch, ["a"], ["str"], 1)
        with pytest.raises(StateError, match="lists a field twice"):
            graph.make_plan(0, sch, ["a", "a"], ["int", "int"], 1)
    assert sch.plan_memo == {}


def test_many_layouts_do_not_grow_the_memo_without_bound() -> None:
    sch = _fresh()
    for n in range(graph.PLAN_MEMO_MAX + 50):
        extra = [f"gone{k}" for k in range(n % 7)] + [f"x{n}"]
        plan = graph.make_plan(0, sch, ["a", *extra], ["int"] + ["int"] * len(extra), 1)
        assert plan.sources[0][1] == 0  # still mapped right past the cap
    assert len(sch.plan_memo) == graph.PLAN_MEMO_MAX
