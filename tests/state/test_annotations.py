"""Annotations resolve fully: quoted names inside generics, and classes defined in a
function.  Written without ``from __future__ import annotations`` on purpose: quoted
forward references are how people write self-referencing dataclasses without it (see
``test_local_classes.py`` for the PEP 563 side)."""

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest

from ckpt import state
from ckpt.state import wire
from ckpt.state.schema import schema_of

from .conftest import ENGINE_PAIRS, pair_id, roundtrip
from .graph_equal import graph_diff


class Shade(enum.Enum):
    DARK = 1
    LIGHT = 2


@state.savable(name="tests.state.annotations.Tree")
@dataclass(eq=False)
class Tree:
    parent: Optional["Tree"] = None
    kids: list["Tree"] = field(default_factory=list)
    by_name: dict[str, "Tree"] = field(default_factory=dict)
    alt: "Tree | None" = None
    pair: tuple["Tree", "Shade"] | None = None
    shade: "Shade" = Shade.DARK
    maybe: "int | None" = None
    nested: list[Optional["Tree"]] = field(default_factory=list)


def test_quoted_names_inside_generics_get_their_kinds() -> None:
    assert schema_of(Tree).descriptors == (
        "opt[ref]",
        "list[ref]",
        "dict[str,ref]",
        "opt[ref]",
        "opt[tuple[ref,enum:test_annotations.Shade]]".replace("test_annotations", Shade.__module__),
        f"enum:{Shade.__module__}.Shade",
        "opt[int]",
        "list[opt[ref]]",
    )


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
def test_forward_referenced_graph_round_trips_compactly(engines: tuple[str, str]) -> None:
    root = Tree()
    kids = [Tree(parent=root, shade=Shade.LIGHT, maybe=i) for i in range(3)]
    root.kids = kids
    root.by_name = {"a": kids[0]}
    root.alt = kids[1]
    root.pair = (kids[2], Shade.LIGHT)
    root.nested = [None, kids[0]]
    assert graph_diff(root, roundtrip(root, engines)) is None
    payload = wire.unframe(state.dumps(root, "typed"))
    assert payload[wire.FLAGS] == {}  # nothing self-describing was needed


def test_unresolvable_name_names_class_and_field() -> None:
    @state.savable(name="tests.state.annotations.Broken")
    @dataclass(eq=False)
    class Broken:
        ok: int = 0
        bad: Optional["NoSuchClass"] = None  # noqa: F821

    with pytest.raises(state.StateError, match=r"Broken\.bad.*NoSuchClass"):
        state.dumps(Broken(), "typed")
    with pytest.raises(state.StateError, match=r"Broken\.bad.*NoSuchClass"):
        schema_of(Broken)


def test_any_and_object_and_unsavable_bases_stay_any() -> None:
    class Base:
        pass

    @state.savable(name="tests.state.annotations.Poly")
    @dataclass(eq=False)
    class Poly:
        a: Any = None
        b: object = None
        c: "Base | None" = None  # a non-savable class, named in the function

    assert schema_of(Poly).descriptors == ("any", "any", "any")


def test_quoted_local_class_in_a_function() -> None:
    @state.savable(name="tests.state.annotations.LocalA")
    @dataclass(eq=False)
    class LocalA:
        b: Optional["LocalB"] = None
        peers: list["LocalA"] = field(default_factory=list)

    @state.savable(name="tests.state.annotations.LocalB")
    @dataclass(eq=False)
    class LocalB:
        a: LocalA | None = None

    assert schema_of(LocalA).descriptors == ("opt[ref]", "list[ref]")
    a = LocalA(LocalB())
    a.b.a = a
    a.peers = [a]
    loaded = roundtrip(a, ("typed", "reflect"))
    assert loaded.b.a is loaded and loaded.peers == [loaded]


def test_decorating_does_not_keep_the_frame_after_first_use() -> None:
    @state.savable(name="tests.state.annotations.Once")
    @dataclass(eq=False)
    class Once:
        n: int = 0

    from ckpt.state import registry

    assert registry.type_info(Once).frame is not None
    schema_of(Once)
    assert registry.type_info(Once).frame is None
    assert dataclasses.is_dataclass(Once)
