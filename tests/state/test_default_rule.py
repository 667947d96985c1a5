"""The default-field rule (after a decoder bug once found here): every field loads exactly what was saved.

Each holder class has a non-zero/non-empty default.  The typed engine may write a value
equal to the default as Nil; whatever the encoding, a loaded field must hold the saved
value: zero stays zero, the default stays the default (a fresh object when it comes from a
factory), and all four save/load engine combinations agree.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from ckpt import state

from .conftest import ENGINES, roundtrip
from .graph_equal import graph_diff
from .kinds import KINDS, UNSET, Kind, holder, zero_of

WITH_ZERO = [k for k in KINDS if k.zero is not UNSET]
WITH_FACTORY = [k for k in KINDS if k.default_factory is not UNSET]
SLOTS = pytest.mark.parametrize("slots", [False, True], ids=["plain", "slots"])


def _check(kind: Kind, slots: bool, value: Any, engines: tuple[str, str]) -> Any:
    cls = holder(kind, slots)
    loaded = roundtrip(cls(value), engines)
    diff = graph_diff(value, loaded.v)
    assert diff is None, f"{kind.name}: saved {value!r:.80}, loaded {loaded.v!r:.80}: {diff}"
    return loaded


@pytest.mark.parametrize("kind", WITH_ZERO, ids=[k.name for k in WITH_ZERO])
@SLOTS
def test_zero_value_loads_as_zero_not_the_default(
    kind: Kind, slots: bool, engines: tuple[str, str]
) -> None:
    _check(kind, slots, zero_of(kind), engines)


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
@SLOTS
def test_default_value_loads_as_the_default(
    kind: Kind, slots: bool, engines: tuple[str, str]
) -> None:
    _check(kind, slots, kind.default_value(), engines)


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_all_engine_combinations_load_the_same_values(kind: Kind) -> None:
    cls = holder(kind, slots=False)
    values = [*kind.samples(), kind.default_value()]
    if kind.zero is not UNSET:
        values.append(zero_of(kind))
    originals = [cls(v) for v in values]
    loads = {
        (save, load): state.loads(state.dumps(originals, engine=save), engine=load)
        for save, load in itertools.product(ENGINES, ENGINES)
    }
    first_key, first = next(iter(loads.items()))
    for key, other in loads.items():
        diff = graph_diff(first, other)
        assert diff is None, f"{kind.name}: {first_key} and {key} load differently: {diff}"
        diff = graph_diff(originals, other)
        assert diff is None, f"{kind.name}: {key}: {diff}"


@pytest.mark.parametrize("kind", WITH_FACTORY, ids=[k.name for k in WITH_FACTORY])
def test_factory_default_is_a_fresh_object_per_loaded_instance(
    kind: Kind, engines: tuple[str, str]
) -> None:
    cls = holder(kind, slots=False)
    originals = [cls(), cls(), cls()]  # three separate default_factory() results
    loaded = roundtrip(originals, engines)
    values = [obj.v for obj in loaded]
    assert len({id(v) for v in values}) == 3, f"{kind.name}: defaults shared after load"
    assert all(graph_diff(kind.default_value(), v) is None for v in values)
    again = roundtrip(originals, engines)
    assert all(a.v is not b.v for a, b in zip(loaded, again, strict=True))


def test_load_does_not_touch_the_class_default() -> None:
    """A loaded mutable default must not be the object a default argument would share."""
    kind = next(k for k in KINDS if k.name == "list_int")
    cls = holder(kind, slots=False)
    for save_with, load_with in itertools.product(ENGINES, ENGINES):
        loaded = state.loads(state.dumps(cls(), engine=save_with), engine=load_with)
        loaded.v.append(99)
        assert cls().v == [1]
        fresh = state.loads(state.dumps(cls(), engine=save_with), engine=load_with)
        assert fresh.v == [1]
