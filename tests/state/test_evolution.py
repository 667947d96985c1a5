"""Schema evolution: fields matched by name between the stream and the current class.

Each test builds two versions of one class with ``make_dataclass`` under the same module and
qualname, so registering the second replaces the first under the same stream name.
(Python 3.11's ``make_dataclass`` has no ``module=``; ``__module__`` goes in the namespace.)
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import pytest

from ckpt import state

from .conftest import ENGINE_PAIRS, pair_id
from .models import Leaf

PAIRS = pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)


def _version(stream_name: str, fields: list[Any], slots: bool = False) -> type:
    cls = dataclasses.make_dataclass(
        "Thing", fields, namespace={"__module__": __name__}, eq=False, slots=slots
    )
    return state.savable(name=stream_name)(cls)


def _evolve(
    stream_name: str,
    old: list[Any],
    new: list[Any],
    make_root: Any,
    engines: tuple[str, str],
    slots: bool = False,
) -> tuple[type, Any]:
    """Save a root built with the old class, re-register the new one, load."""
    old_cls = _version(stream_name, old, slots)
    data = state.dumps(make_root(old_cls), engine=engines[0])
    new_cls = _version(stream_name, new, slots)
    return new_cls, state.loads(data, engine=engines[1])


@PAIRS
@pytest.mark.parametrize("slots", [False, True], ids=["plain", "slots"])
def test_added_field_takes_its_default(engines: tuple[str, str], slots: bool) -> None:
    new_cls, loaded = _evolve(
        f"evo.Added.{slots}",
        [("a", int, dataclasses.field(default=0))],
        [
            ("a", int, dataclasses.field(default=0)),
            ("b", str, dataclasses.field(default="bee")),
            ("items", list[int], dataclasses.field(default_factory=lambda: [1, 2])),
        ],
        lambda cls: [cls(a=5), cls(a=6)],
        engines,
        slots,
    )
    assert [type(x) for x in loaded] == [new_cls, new_cls]
    assert [x.a for x in loaded] == [5, 6]
    assert [x.b for x in loaded] == ["bee", "bee"]
    assert loaded[0].items == [1, 2]
    assert loaded[0].items is not loaded[1].items


@PAIRS
def test_dropped_field_is_ignored(engines: tuple[str, str]) -> None:
    new_cls, loaded = _evolve(
        "evo.Dropped",
        [
            ("keep", int, dataclasses.field(default=0)),
            ("gone", list[Leaf], dataclasses.field(default_factory=list)),
            ("tail", str, dataclasses.field(default="")),
        ],
        [("keep", int, dataclasses.field(default=0)), ("tail", str, dataclasses.field(default=""))],
        lambda cls: cls(keep=3, gone=[Leaf(1)], tail="t"),
        engines,
    )
    assert type(loaded) is new_cls
    assert (loaded.keep, loaded.tail) == (3, "t")
    assert not hasattr(loaded, "gone")


@PAIRS
def test_reordered_fields_match_by_name(engines: tuple[str, str]) -> None:
    _, loaded = _evolve(
        "evo.Reordered",
        [("x", int, dataclasses.field(default=0)), ("y", str, dataclasses.field(default=""))],
        [("y", str, dataclasses.field(default="")), ("x", int, dataclasses.field(default=0))],
        lambda cls: cls(x=1, y="why"),
        engines,
    )
    assert (loaded.x, loaded.y) == (1, "why")


@PAIRS
def test_added_dropped_and_kept_together_with_references(engines: tuple[str, str]) -> None:
    _, loaded = _evolve(
        "evo.Mixed",
        [
            ("leaf", Leaf | None, dataclasses.field(default=None)),
            ("old", int, dataclasses.field(default=0)),
        ],
        [
            ("leaf", Leaf | None, dataclasses.field(default=None)),
            ("new", dict[str, int], dataclasses.field(default_factory=dict)),
        ],
        lambda cls: (lambda shared: [cls(leaf=shared, old=1), cls(leaf=shared, old=2)])(Leaf(8)),
        engines,
    )
    assert loaded[0].leaf is loaded[1].leaf
    assert loaded[0].leaf.value == 8
    assert loaded[0].new == {} and loaded[0].new is not loaded[1].new


@PAIRS
def test_added_field_without_default_is_a_state_error(engines: tuple[str, str]) -> None:
    with pytest.raises(state.StateError, match="needed"):
        _evolve(
            "evo.NoDefault",
            [("a", int, dataclasses.field(default=0))],
            [("needed", int), ("a", int, dataclasses.field(default=0))],
            lambda cls: cls(a=1),
            engines,
        )


@PAIRS
@pytest.mark.parametrize(
    ("old_type", "old_value", "new_type"),
    [
        pytest.param(int, 5, str, id="int-to-str"),
        pytest.param(list[int], [1, 2], dict[str, int], id="list-to-dict"),
        pytest.param(str, "s", bytes, id="str-to-bytes"),
        pytest.param(list[int], [1], list[str], id="list-int-to-list-str"),
        pytest.param(Leaf | None, None, int, id="ref-to-int"),
        pytest.param(float, 1.5, int, id="float-to-int"),
        pytest.param(dict[str, int], {"a": 1}, dict[int, int], id="dict-key-kind"),
        pytest.param(tuple[int, str], (1, "a"), tuple[int, ...], id="fixed-to-var-tuple"),
    ],
)
def test_changed_kind_is_a_state_error_naming_type_and_field(
    old_type: Any, old_value: Any, new_type: Any, engines: tuple[str, str]
) -> None:
    stream_name = f"evo.Changed.{pair_id(engines)}"
    with pytest.raises(state.StateError) as info:
        _evolve(
            stream_name,
            [("count", old_type, dataclasses.field(default=None))],
            [("count", new_type, dataclasses.field(default=None))],
            lambda cls: cls(count=old_value),
            engines,
        )
    message = str(info.value)
    assert stream_name in message or "Thing" in message, message
    assert "count" in message, message


@PAIRS
def test_changed_kind_is_refused_even_when_the_value_is_the_default(
    engines: tuple[str, str],
) -> None:
    """A Nil (default-valued) field still has a recorded kind; the change is still caught."""
    with pytest.raises(state.StateError, match="count"):
        _evolve(
            "evo.ChangedDefault",
            [("count", int, dataclasses.field(default=0))],
            [("count", str, dataclasses.field(default=""))],
            lambda cls: cls(),
            engines,
        )


@PAIRS
def test_unchanged_version_still_loads_after_reregistration(engines: tuple[str, str]) -> None:
    fields = [
        ("a", int, dataclasses.field(default=0)),
        ("b", list[int], dataclasses.field(default_factory=list)),
    ]
    new_cls, loaded = _evolve("evo.Same", fields, fields, lambda cls: cls(a=1, b=[2]), engines)
    assert type(loaded) is new_cls
    assert (loaded.a, loaded.b) == (1, [2])


def _enum_version(members: dict[str, int]) -> type:
    made = enum.Enum("EvoEnum", members, module=__name__, qualname="EvoEnum")
    globals()["EvoEnum"] = made  # annotations resolve through the module
    return made


@PAIRS
@pytest.mark.parametrize("slot", ["typed", "polymorphic"])
def test_removed_enum_member_is_a_state_error_naming_the_enum(
    engines: tuple[str, str], slot: str
) -> None:
    def fields(enum_cls: type) -> list[Any]:
        return [
            ("typed", enum_cls, dataclasses.field(default=enum_cls.A)),
            ("polymorphic", object, dataclasses.field(default=None)),
        ]

    old = _enum_version({"A": 1, "B": 2})
    stream_name = f"evo.EnumHolder.{slot}"
    old_cls = _version(stream_name, fields(old))
    data = state.dumps(old_cls(**{slot: old.B}), engine=engines[0])
    new = _enum_version({"A": 1})
    _version(stream_name, fields(new))
    with pytest.raises(state.StateError, match="EvoEnum"):
        state.loads(data, engine=engines[1])


@PAIRS
def test_enum_redefined_with_the_same_members_loads_the_new_members(
    engines: tuple[str, str],
) -> None:
    def fields(enum_cls: type) -> list[Any]:
        return [("c", enum_cls, dataclasses.field(default=enum_cls.A))]

    old = _enum_version({"A": 1, "B": 2})
    data = state.dumps(_version("evo.EnumSame", fields(old))(old.B), engine=engines[0])
    new = _enum_version({"A": 1, "B": 2})
    _version("evo.EnumSame", fields(new))
    assert state.loads(data, engine=engines[1]).c is new.B


@PAIRS
def test_field_that_became_nosave_takes_its_default(engines: tuple[str, str]) -> None:
    _, loaded = _evolve(
        "evo.BecameNosave",
        [("x", int, dataclasses.field(default=0)), ("y", int, dataclasses.field(default=0))],
        [
            ("x", int, state.field(nosave=True, default=-1)),
            ("y", int, dataclasses.field(default=0)),
        ],
        lambda cls: cls(5, 6),
        engines,
    )
    assert (loaded.x, loaded.y) == (-1, 6)


@PAIRS
def test_field_that_was_nosave_takes_its_default(engines: tuple[str, str]) -> None:
    _, loaded = _evolve(
        "evo.WasNosave",
        [("x", int, state.field(nosave=True, default=0)), ("y", int, dataclasses.field(default=0))],
        [("x", int, dataclasses.field(default=9)), ("y", int, dataclasses.field(default=0))],
        lambda cls: cls(5, 6),
        engines,
    )
    assert (loaded.x, loaded.y) == (9, 6)


@PAIRS
@pytest.mark.parametrize("direction", ["to-save-through", "from-save-through"])
def test_switching_to_or_from_save_through_is_a_kind_change(
    engines: tuple[str, str], direction: str
) -> None:
    plain = ("x", int, dataclasses.field(default=0))
    through = ("x", int, state.field(save=str, load=int, default=0))
    old, new = (plain, through) if direction == "to-save-through" else (through, plain)
    with pytest.raises(state.StateError, match=r"\bx\b"):
        _evolve(f"evo.Through.{direction}", [old], [new], lambda cls: cls(5), engines)


@PAIRS
def test_a_changed_default_does_not_change_saved_values(engines: tuple[str, str]) -> None:
    """Fields saved holding the old default load as that value, not the new default.

    (A writer that encodes default-valued fields as Nil must make Nil mean the value it
    saw, e.g. by recording defaults in the stream, or Nil only kind zero values.)
    """
    _, loaded = _evolve(
        "evo.ChangedDefault2",
        [
            ("label", str, dataclasses.field(default="old")),
            ("count", int, dataclasses.field(default=7)),
            ("ratio", float, dataclasses.field(default=0.5)),
            ("flag", bool, dataclasses.field(default=True)),
            ("items", list[int], dataclasses.field(default_factory=lambda: [1])),
        ],
        [
            ("label", str, dataclasses.field(default="new")),
            ("count", int, dataclasses.field(default=8)),
            ("ratio", float, dataclasses.field(default=0.25)),
            ("flag", bool, dataclasses.field(default=False)),
            ("items", list[int], dataclasses.field(default_factory=lambda: [2])),
        ],
        lambda cls: cls(),
        engines,
    )
    saved = ("old", 7, 0.5, True, [1])
    assert (loaded.label, loaded.count, loaded.ratio, loaded.flag, loaded.items) == saved


@PAIRS
def test_a_removed_default_does_not_change_saved_values(engines: tuple[str, str]) -> None:
    """The new class has no default at all: the saved value must still load (not None)."""
    _, loaded = _evolve(
        "evo.RemovedDefault",
        [
            ("count", int, dataclasses.field(default=7)),
            ("label", str, dataclasses.field(default="x")),
        ],
        [("count", int), ("label", str)],
        lambda cls: cls(),
        engines,
    )
    assert (loaded.count, loaded.label) == (7, "x")


def _self_referencing_version(extra_field: bool) -> type:
    """A class whose annotation names itself as a string, redefined under one name."""

    @dataclasses.dataclass(eq=False)
    class SelfRef:
        a: int = 0
        other: SelfRef | None = None
        if extra_field:
            b: str = "bee"

    SelfRef.__qualname__ = "SelfRef"
    globals()["SelfRef"] = SelfRef  # what the string annotation names from now on
    return state.savable(name="evo.SelfRef")(SelfRef)


@PAIRS
def test_redefined_class_whose_string_annotation_names_itself(engines: tuple[str, str]) -> None:
    """After redefinition the annotation means the new class (no stale resolution)."""
    old = _self_referencing_version(extra_field=False)
    old_data = state.dumps(old(1, old(2)), engine=engines[0])
    new = _self_referencing_version(extra_field=True)
    loaded = state.loads(old_data, engine=engines[1])
    assert type(loaded) is new and type(loaded.other) is new
    assert (loaded.a, loaded.other.a, loaded.b) == (1, 2, "bee")
    fresh = state.loads(state.dumps(new(3, new(4), "x"), engine=engines[0]), engine=engines[1])
    assert (fresh.a, fresh.other.a, fresh.b) == (3, 4, "x")
