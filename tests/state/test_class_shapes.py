"""Unusual but legal savable classes: odd field names, many fields, none, frozen, kw_only."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

import pytest

from ckpt import state

from .conftest import roundtrip
from .graph_equal import assert_graph_equal

# Names a code generator might use for its own locals, or that shadow builtins it calls.
ODD_NAMES = [
    *("_v0", "_e0", "_r0", "_v1", "self", "obj", "rows", "row", "d0", "data", "ctx"),
    *("ñame", "_ckpt", "zip", "None_", "_", "print", "len", "isinstance", "type", "id"),
    *("range", "dict", "list", "StateError", "append", "cls", "value", "default"),
]


def _make(name: str, fields: list, slots: bool = False) -> type:
    cls = dataclasses.make_dataclass(
        name, fields, namespace={"__module__": __name__}, eq=False, slots=slots
    )
    globals()[name] = cls  # module-level, so annotations resolve like a normal class's
    return state.savable(name=f"tests.state.shapes.{name}")(cls)


ODD = {
    slots: _make(
        f"Odd{'Slots' if slots else ''}",
        [(n, int, dataclasses.field(default=i)) for i, n in enumerate(ODD_NAMES)],
        slots,
    )
    for slots in (False, True)
}
MANY = _make("Many", [(f"f{i}", int, dataclasses.field(default=i)) for i in range(300)])


@state.savable(name="tests.state.shapes.Empty")
@dataclass(eq=False)
class Empty:
    pass


@state.savable(name="tests.state.shapes.EmptySlots")
@dataclass(eq=False, slots=True)
class EmptySlots:
    pass


@state.savable(name="tests.state.shapes.Frozen")
@dataclass(eq=False, frozen=True)
class Frozen:
    a: int = 0
    items: tuple[str, ...] = ()


@state.savable(name="tests.state.shapes.FrozenSlots")
@dataclass(eq=False, frozen=True, slots=True)
class FrozenSlots:
    a: int = 0
    peer: Frozen | None = None


@state.savable(name="tests.state.shapes.KwOnly")
@dataclass(eq=False, kw_only=True)
class KwOnly:
    required: int
    items: list[int] = field(default_factory=list)
    computed: int = field(default=5, init=False)


@state.savable(name="tests.state.shapes.Base")
@dataclass(eq=False)
class Base:
    a: int = 0
    shared: list[int] = field(default_factory=list)


@state.savable(name="tests.state.shapes.Override")
@dataclass(eq=False)
class Override(Base):
    """Redeclares an inherited field with another kind."""

    a: str = "override"  # type: ignore[assignment]
    b: int = 1


@state.savable(name="tests.state.shapes.Dangling")
@dataclass(eq=False)
class Dangling:
    x: DoesNotExist | None = None  # type: ignore[name-defined]  # noqa: F821


@pytest.mark.parametrize("slots", [False, True], ids=["plain", "slots"])
def test_field_names_a_generator_might_collide_with(slots: bool, engines: tuple[str, str]) -> None:
    cls = ODD[slots]
    custom = cls(*[1000 + i for i in range(len(ODD_NAMES))])
    loaded = roundtrip([custom, cls()], engines)
    assert [getattr(loaded[0], n) for n in ODD_NAMES] == [1000 + i for i in range(len(ODD_NAMES))]
    assert [getattr(loaded[1], n) for n in ODD_NAMES] == list(range(len(ODD_NAMES)))


def test_generated_source_for_odd_names_mentions_them() -> None:
    source = state.generated_source(ODD[False])
    for name in ("ñame", "StateError", "_r0"):
        assert name in source


def test_three_hundred_fields(engines: tuple[str, str]) -> None:
    obj = MANY(f0=-1, f150=2**70, f299="not an int")  # type: ignore[call-arg]
    loaded = roundtrip(obj, engines)
    assert_graph_equal(obj, loaded)


def test_classes_without_fields(engines: tuple[str, str]) -> None:
    graph = [Empty(), EmptySlots(), Empty()]
    loaded = roundtrip(graph, engines)
    assert_graph_equal(graph, loaded)
    assert loaded[0] is not loaded[2]


def test_frozen_dataclasses(engines: tuple[str, str]) -> None:
    inner = Frozen(3, ("a", "b"))
    graph = [FrozenSlots(1, inner), inner]
    loaded = roundtrip(graph, engines)
    assert_graph_equal(graph, loaded)
    assert loaded[0].peer is loaded[1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded[1].a = 5


def test_kw_only_and_init_false_fields(engines: tuple[str, str]) -> None:
    obj = KwOnly(required=1, items=[2])
    obj.computed = 7
    loaded = roundtrip(obj, engines)
    assert (loaded.required, loaded.items, loaded.computed) == (1, [2], 7)


def test_subclass_redeclaring_a_field_with_another_kind(engines: tuple[str, str]) -> None:
    shared = [1]
    graph = [Override("z", shared, 2), Base(3, shared)]
    loaded = roundtrip(graph, engines)
    assert_graph_equal(graph, loaded)


def test_unresolvable_annotation_is_a_state_error_naming_the_class(engine: str) -> None:
    with pytest.raises(state.StateError, match="Dangling"):
        state.dumps(Dangling(), engine=engine)


# Two classes each with a nested enum called State: under postponed evaluation both
# annotations are the string "State", resolved in each class's own namespace.
@state.savable(name="tests.state.shapes.Task")
@dataclass(eq=False)
class Task:
    class State(enum.Enum):
        RUNNING = "running"
        STOPPED = "stopped"

    state: State = State.RUNNING
    history: list[State] = field(default_factory=list)


@state.savable(name="tests.state.shapes.Socket")
@dataclass(eq=False, slots=True)
class Socket:
    class State(enum.Enum):
        LISTEN = 1
        CLOSED = 2

    state: State = State.CLOSED
    history: list[State] = field(default_factory=list)


def test_same_annotation_text_in_two_classes_means_two_types(engines: tuple[str, str]) -> None:
    graph = [
        Task(Task.State.STOPPED, [Task.State.RUNNING]),
        Socket(Socket.State.LISTEN, [Socket.State.CLOSED]),
        Task(),
        Socket(),
    ]
    loaded = roundtrip(graph, engines)
    assert_graph_equal(graph, loaded)
