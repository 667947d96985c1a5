"""Every value comes back exactly, whatever its field's annotation says.

Python does not enforce annotations, so a field may hold anything: None in an ``int``,
a tuple in a ``list[int]``, an int in a reference field, an int beyond 64 bits, an enum
member in an ``int`` field.  Each loads back as exactly that value and type, in both
engines and across them, and only the slot that does not fit is written self-describing
(the per-slot rule in ckpt/state/README.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.state import wire

from .conftest import ENGINE_PAIRS, pair_id, roundtrip
from .graph_equal import graph_diff
from .models import Color, Leaf, Level


class Small(enum.IntEnum):
    ONE = 1
    TWO = 2


class Flags(enum.Flag):
    A = 1
    B = 2


# One holder class per annotation; field ``v`` holds whatever the test puts there.
ANNOTATIONS: dict[str, Any] = {
    "int": int,
    "bool": bool,
    "float": float,
    "str": str,
    "bytes": bytes,
    "bytearray": bytearray,
    "opt_int": Optional[int],  # noqa: UP045
    "opt_str": str | None,
    "list_int": list[int],
    "list_float": list[float],
    "list_list_int": list[list[int]],
    "set_int": set[int],
    "frozenset_str": frozenset[str],
    "vartuple_int": tuple[int, ...],
    "tuple_int_str": tuple[int, str],
    "dict_str_int": dict[str, int],
    "dict_int_ref": dict[int, Leaf],
    "ref": Leaf,
    "opt_ref": Optional[Leaf],  # noqa: UP045
    "list_ref": list[Leaf],
    "enum": Color,
    "intenum": Level,
    "flag": Flags,
    "opt_enum": Color | None,
    "any": Any,
}


def _holder(name: str, annotation: Any) -> type:
    cls = type(f"Hold_{name}", (), {"__annotations__": {"v": annotation}, "v": None})
    cls.__module__ = __name__
    cls = dataclass(eq=False)(cls)
    return state.savable(name=f"tests.state.exact.{name}")(cls)


HOLDERS = {name: _holder(name, ann) for name, ann in ANNOTATIONS.items()}

# Values of every sort, fitting some annotations and misfitting others.
_leaf = st.builds(Leaf, st.integers(-5, 5))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1]),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.sampled_from([*Color, *Level, *Small, Flags.A | Flags.B]),
)
_values = st.recursive(
    st.one_of(_scalars, _leaf),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(-3, 3)), inner, max_size=3),
        st.sets(st.one_of(st.integers(-9, 9), st.text(max_size=2)), max_size=3),
        st.frozensets(st.text(max_size=2), max_size=3),
        st.binary(max_size=3).map(bytearray),
    ),
    max_leaves=8,
)


@settings(max_examples=300)
@given(
    cells=st.lists(st.tuples(st.sampled_from(sorted(HOLDERS)), _values), min_size=1, max_size=6),
    pair=st.sampled_from(ENGINE_PAIRS),
)
def test_any_value_in_any_annotated_field_loads_exactly(
    cells: list[tuple[str, Any]], pair: tuple[str, str]
) -> None:
    root = [HOLDERS[name](value) for name, value in cells]
    loaded = roundtrip(root, pair)
    assert graph_diff(root, loaded) is None, graph_diff(root, loaded)


@settings(max_examples=100)
@given(cells=st.lists(st.tuples(st.sampled_from(sorted(HOLDERS)), _values), max_size=6))
def test_both_engines_read_each_others_streams_identically(cells: list[tuple[str, Any]]) -> None:
    root = [HOLDERS[name](value) for name, value in cells]
    for saved_with in ("typed", "reflect"):
        data = state.dumps(root, saved_with)
        a, b = state.loads(data, "typed"), state.loads(data, "reflect")
        assert graph_diff(a, b) is None


# --- the reported cases, one by one -------------------------------------------------


@state.savable(name="tests.state.exact.Node")
@dataclass(eq=False)
class XNode:
    n: int = 0
    items: list[int] = field(default_factory=list)
    ref: XNode | None = None
    color: Color = Color.RED
    level: int = 0


CASES = {
    "none-in-int": XNode(n=None),
    "tuple-in-list": XNode(items=(1, 2)),
    "int-in-ref": XNode(ref=5),
    "none-in-enum": XNode(color=None),
    "bigint-in-int": XNode(n=2**70),
    "intenum-in-int": XNode(level=Level.HIGH),
    "none-inside-list": XNode(items=[1, None, 3]),
    "bigint-inside-list": XNode(items=[1, 2**65]),
    "str-in-enum": XNode(color="red"),
    "list-in-ref": XNode(ref=[XNode(1)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
def test_issue_cases_load_exactly(case: str, engines: tuple[str, str]) -> None:
    root = CASES[case]
    assert graph_diff(root, roundtrip(root, engines)) is None


def test_only_the_misfit_slot_is_self_describing() -> None:
    fine = [XNode(i, [i], color=Color.BLUE) for i in range(50)]
    odd = XNode(n=None, items=(1,))
    payload = wire.unframe(state.dumps([*fine, odd], "typed"))
    rows = payload[wire.ROWS][0]
    escapes = [(r, j) for r, row in enumerate(rows) for j, v in enumerate(row) if type(v) is dict]
    assert escapes == [(50, 0), (50, 1)]
    assert rows[50][0] == {wire.T_SLOT: None}
    assert payload[wire.FLAGS] == {"escaped": [0]}
    assert all(type(v) is not dict for row in rows[:50] for v in row)


def test_no_escape_no_flag() -> None:
    payload = wire.unframe(state.dumps([XNode(1), XNode(2)], "typed"))
    assert payload[wire.FLAGS] == {}


def test_before_save_runs_once_even_with_escapes() -> None:
    calls = []

    @state.savable(name="tests.state.exact.Hooked")
    @dataclass(eq=False)
    class Hooked:
        n: int = 0

        def __before_save__(self) -> None:
            calls.append(self)

    state.dumps([Hooked(2**80), Hooked(None)], "typed")
    assert len(calls) == 2


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
def test_shared_container_inside_an_escape_stays_shared(engines: tuple[str, str]) -> None:
    shared = [1, 2]
    a = XNode(items=shared)
    b = XNode(ref=shared)  # a list in a reference field: escaped, holding the shared list
    c = XNode(items=(shared,))  # a tuple holding it, in a list[int] field
    loaded = roundtrip([a, b, c], engines)
    assert graph_diff([a, b, c], loaded) is None
    assert loaded[0].items is loaded[1].ref is loaded[2].items[0]


@pytest.mark.parametrize("engine", ["typed", "reflect"])
def test_version_1_streams_still_load(engine: str) -> None:
    from pathlib import Path

    from . import models as m

    data_dir = Path(__file__).parent / "data"
    for name in ("v1_typed", "v1_reflect"):
        root = state.loads((data_dir / f"{name}.ckst").read_bytes(), engine)
        assert root["e"].nums == [1, 2, 2**70]
        assert root["e2"].big == 2**80
        assert root["lvl"] is m.Level.HUGE
        assert root["sq"].color is m.Color.BLUE
        assert root["n"].next is root["n"].kids[0]
        assert root["n"].kids[0].payload == (1, 2.5, "x")
    for name in ("v1_typed_plain", "v1_reflect_plain"):
        n, sq = state.loads((data_dir / f"{name}.ckst").read_bytes(), engine)
        assert n.kids[0].label == "b" and sq.side == 3


def test_version_2_is_written() -> None:
    data = state.dumps(XNode(), "typed")
    assert data[4] == wire.FORMAT_VERSION == 2
    assert wire.unframe(data)[wire.VERSION] == 2


def test_unknown_future_version_is_refused() -> None:
    payload = wire.unframe(state.dumps(XNode(), "typed"))
    payload[wire.VERSION] = 3
    with pytest.raises(state.StateError, match="version 3"):
        state.loads(wire.frame(payload))
