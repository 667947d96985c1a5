"""Values of a subtype of the declared kind (legal under PEP 484) load as they were saved.

``int`` accepts ``bool`` and ``IntEnum`` members, ``float`` accepts ``int``, ``str`` accepts
``StrEnum`` members.  A typed engine may encode by annotation, but the loaded value must
still be the saved one, and above all both engines must load the same graph.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import pytest

from ckpt import state

from .conftest import roundtrip
from .graph_equal import graph_diff
from .models import Level, Mode


class ZeroLevel(enum.IntEnum):
    OFF = 0
    ON = 1


class Blank(enum.StrEnum):
    NONE = ""
    SOME = "some"


CASES = [
    pytest.param(float, 3, id="int-in-float"),
    pytest.param(float, 2**70, id="bigint-in-float"),
    pytest.param(int, True, id="bool-in-int"),
    pytest.param(int, Level.HIGH, id="intenum-in-int"),
    pytest.param(int, Level.HUGE, id="big-intenum-in-int"),
    pytest.param(str, Mode.WRITE, id="strenum-in-str"),
    pytest.param(int | None, Level.LOW, id="intenum-in-optional-int"),
    pytest.param(list[int], [True, Level.HIGH, 3], id="subtypes-in-list-int"),
    pytest.param(dict[str, int], {"a": Level.LOW}, id="intenum-as-dict-value"),
    pytest.param(dict[int, str], {Level.HIGH: Mode.READ}, id="enums-as-int-key-str-value"),
    pytest.param(tuple[int, ...], (False, Level.LOW), id="subtypes-in-var-tuple"),
    pytest.param(set[int], {Level.HIGH}, id="intenum-in-set-int"),
    # Zero-valued subtypes: equal to the kind's zero, but not the same value.
    pytest.param(int, False, id="false-in-int"),
    pytest.param(int, ZeroLevel.OFF, id="zero-intenum-in-int"),
    pytest.param(float, 0, id="int-zero-in-float"),
    pytest.param(float, False, id="false-in-float"),
    pytest.param(str, Blank.NONE, id="empty-strenum-in-str"),
    pytest.param(int | None, False, id="false-in-optional-int"),
    pytest.param(list[int], [False, 0], id="false-in-list-int"),
    pytest.param(tuple[int, str], (False, Blank.NONE), id="zero-subtypes-in-fixed-tuple"),
    pytest.param(dict[int, int], {0: False}, id="false-as-dict-value"),
    pytest.param(object, False, id="false-in-object"),
    pytest.param(object, 0.0, id="float-zero-in-object"),
]


def _holder(index: int, annotation: Any) -> type:
    cls = dataclasses.make_dataclass(
        f"Sub{index}",
        [("v", annotation, dataclasses.field(default=None))],
        namespace={"__module__": __name__},
        eq=False,
    )
    return state.savable(name=f"tests.state.subtypes.Sub{index}")(cls)


HOLDERS = {index: _holder(index, case.values[0]) for index, case in enumerate(CASES)}


@pytest.mark.parametrize(("annotation", "value"), CASES)
def test_subtype_value_round_trips(annotation: Any, value: Any, engines: tuple[str, str]) -> None:
    index = next(i for i, c in enumerate(CASES) if c.values == (annotation, value))
    original = HOLDERS[index](value)
    loaded = roundtrip(original, engines)
    diff = graph_diff(original, loaded)
    assert diff is None, f"saved {value!r} in a {annotation} field: {diff}"


@pytest.mark.parametrize(("annotation", "value"), CASES)
def test_both_engines_load_the_same_value(annotation: Any, value: Any) -> None:
    index = next(i for i, c in enumerate(CASES) if c.values == (annotation, value))
    original = HOLDERS[index](value)
    loaded = {
        engine: state.loads(state.dumps(original, engine=engine), engine=engine)
        for engine in state.ENGINES
    }
    diff = graph_diff(loaded["reflect"], loaded["typed"])
    assert diff is None, f"reflect and typed disagree on {value!r} in a {annotation} field: {diff}"
