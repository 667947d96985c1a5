# ruff: noqa: RUF009  (state.field is a dataclass field specifier ruff does not know)
"""Field options: nosave, save-through-value, and what an unsupported field does."""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from ckpt import state
from ckpt.errors import CkptError

from .conftest import roundtrip
from .graph_equal import assert_graph_equal
from .models import Leaf

UTC = dt.UTC


@state.savable(name="tests.state.fields.WithNosave")
@dataclass(eq=False)
class WithNosave:
    kept: int = 0
    lock: Any = state.field(nosave=True, default=None, compare=False)
    cache: dict[str, int] = state.field(nosave=True, default_factory=lambda: {"fresh": 1})
    count: int = state.field(nosave=True, default=42)


@state.savable(name="tests.state.fields.SlotsNosave")
@dataclass(eq=False, slots=True)
class SlotsNosave:
    kept: str = ""
    scratch: list[int] = state.field(nosave=True, default_factory=list)


def _lock_state(lock: Any) -> bool:
    return lock.locked()


def _new_lock(locked: bool) -> Any:
    lock = threading.Lock()
    if locked:
        lock.acquire()
    return lock


@state.savable(name="tests.state.fields.Through")
@dataclass(eq=False)
class Through:
    """Fields whose values cannot be saved directly, saved as plain values."""

    when: dt.datetime = state.field(
        save=lambda d: d.isoformat(),
        load=dt.datetime.fromisoformat,
        default=dt.datetime(2000, 1, 1, tzinfo=UTC),
    )
    lock: Any = state.field(save=_lock_state, load=_new_lock, default_factory=threading.Lock)
    span: dt.timedelta = state.field(
        save=lambda d: (d.days, d.seconds, d.microseconds),
        load=lambda t: dt.timedelta(days=t[0], seconds=t[1], microseconds=t[2]),
        default=dt.timedelta(0),
    )
    after: Leaf | None = None


@state.savable(name="tests.state.fields.Calls")
@dataclass(eq=False)
class Calls:
    """save=/load= functions that record their calls."""

    log: Any = state.field(
        save=lambda v: ("saved", v[1]), load=lambda p: ("loaded", p[1]), default=("x", 0)
    )


def test_nosave_field_takes_its_default(engines: tuple[str, str]) -> None:
    obj = WithNosave(kept=5, lock=threading.Lock(), cache={"stale": 2}, count=1)
    loaded = roundtrip(obj, engines)
    assert loaded.kept == 5
    assert loaded.lock is None
    assert loaded.cache == {"fresh": 1}
    assert loaded.count == 42


def test_nosave_default_factory_is_fresh_per_object(engines: tuple[str, str]) -> None:
    loaded = roundtrip([WithNosave(), WithNosave()], engines)
    assert loaded[0].cache is not loaded[1].cache
    loaded[0].cache["x"] = 1
    assert loaded[1].cache == {"fresh": 1}


def test_nosave_value_is_never_encoded(engine: str) -> None:
    """An unsavable value (a lock) in a nosave field does not stop the save."""
    data = state.dumps(WithNosave(kept=1, lock=threading.Lock()), engine=engine)
    loaded = state.loads(data, engine=engine)
    assert loaded.lock is None


def test_nosave_on_a_slots_class(engines: tuple[str, str]) -> None:
    loaded = roundtrip(SlotsNosave("k", [1, 2]), engines)
    assert loaded.kept == "k"
    assert loaded.scratch == []


def test_save_through_value(engines: tuple[str, str]) -> None:
    when = dt.datetime(2026, 11, 29, 21, 0, 5, 123456, tzinfo=UTC)
    held = threading.Lock()
    held.acquire()
    obj = Through(when=when, lock=held, span=dt.timedelta(days=2, microseconds=7), after=Leaf(3))
    loaded = roundtrip(obj, engines)
    assert loaded.when == when and loaded.when.tzinfo is not None
    assert loaded.span == dt.timedelta(days=2, microseconds=7)
    assert loaded.lock is not held
    assert loaded.lock.locked()
    assert loaded.after.value == 3
    free = roundtrip(Through(), engines)
    assert not free.lock.locked()
    assert free.when == dt.datetime(2000, 1, 1, tzinfo=UTC)


def test_save_and_load_functions_are_applied(engines: tuple[str, str]) -> None:
    loaded = roundtrip(Calls(log=("start", 5)), engines)
    assert loaded.log == ("loaded", 5)


def test_one_lock_rebuilt_per_object(engines: tuple[str, str]) -> None:
    loaded = roundtrip([Through(), Through()], engines)
    assert loaded[0].lock is not loaded[1].lock


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"save": str}, id="save-without-load"),
        pytest.param({"load": int}, id="load-without-save"),
        pytest.param({"nosave": True}, id="nosave-without-default"),
        pytest.param({"nosave": True, "default": 0, "wait": True}, id="nosave-and-wait"),
    ],
)
def test_bad_field_options_are_state_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(state.StateError):
        state.field(**kwargs)


def test_state_error_is_a_ckpt_error() -> None:
    assert issubclass(state.StateError, CkptError)


def test_savable_needs_a_dataclass() -> None:
    class NotADataclass:
        pass

    with pytest.raises(state.StateError, match="dataclass"):
        state.savable(NotADataclass)


def test_a_type_name_cannot_be_taken_twice() -> None:
    @dataclass(eq=False)
    class Other:
        value: int = 0

    with pytest.raises(state.StateError, match=r"tests\.state\.Leaf"):
        state.savable(name="tests.state.Leaf")(Other)


# -- values the engine cannot save are errors that say where, not crashes --------------


@state.savable(name="tests.state.fields.Unsupported")
@dataclass(eq=False)
class Unsupported:
    when: threading.Condition = field(default_factory=threading.Condition)


@state.savable(name="tests.state.fields.Poly")
@dataclass(eq=False)
class Poly:
    value: object = None


@dataclass(eq=False)
class NotRegistered:
    value: int = 0


def test_field_of_unsupported_kind_is_a_state_error(engine: str) -> None:
    with pytest.raises(state.StateError, match="when"):
        state.dumps(Unsupported(), engine=engine)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(threading.Lock(), id="lock"),
        pytest.param(NotRegistered(1), id="unregistered-dataclass"),
        pytest.param(lambda: 0, id="function"),
        pytest.param(object(), id="object"),
        pytest.param(threading.Event(), id="event"),
        pytest.param([1, NotRegistered()], id="nested-in-list"),
    ],
)
def test_unsavable_value_in_a_polymorphic_field(value: Any, engine: str) -> None:
    with pytest.raises(state.StateError):
        state.dumps(Poly(value), engine=engine)


@pytest.mark.parametrize(
    "root",
    [
        pytest.param(NotRegistered(), id="unregistered-dataclass"),
        pytest.param(threading.Lock(), id="lock"),
        pytest.param([NotRegistered()], id="in-list"),
    ],
)
def test_unsavable_root(root: Any, engine: str) -> None:
    with pytest.raises(state.StateError):
        state.dumps(root, engine=engine)


def test_unknown_engine_name_is_a_ckpt_error() -> None:
    with pytest.raises(CkptError, match="fast"):
        state.dumps(Leaf(), engine="fast")
    data = state.dumps(Leaf(), engine="typed")
    with pytest.raises(CkptError, match="fast"):
        state.loads(data, engine="fast")


def test_lone_surrogate_string_is_saved_or_refused_cleanly(engines: tuple[str, str]) -> None:
    obj = Poly("\ud800 lone surrogate")
    try:
        loaded = roundtrip(obj, engines)
    except state.StateError:
        return
    assert_graph_equal(obj, loaded)


def test_container_shared_with_a_nosave_field(engines: tuple[str, str]) -> None:
    """Sharing with a nosave field does not drag the container's content out of the stream."""
    shared = [1, 2]
    obj = WithNosave(kept=1, cache=shared)  # type: ignore[arg-type]
    holder = Poly([shared, shared])
    loaded = roundtrip([obj, holder], engines)
    assert loaded[0].cache == {"fresh": 1}
    assert loaded[1].value[0] == [1, 2]
    assert loaded[1].value[0] is loaded[1].value[1]
