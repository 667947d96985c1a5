"""The typed engine's large-graph shortcuts keep every contract.

Save: a container held by one field only is not recorded in the identity memo (its
reference count says nothing else can reach it).  Load: fields are filled with plain
attribute stores, except for classes with their own ``__setattr__`` or a data
descriptor named like a field.  Each test would fail if a shortcut were taken where
it must not be.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ckpt import state
from ckpt.state import codegen
from ckpt.state.schema import schema_of

from .conftest import ENGINES

NATIVE = "native" in ENGINES


@state.savable(name="tscale.Box")
@dataclass(eq=False)
class Box:
    n: int = 0
    items: list[int] = field(default_factory=list)
    refs: list[Box] = field(default_factory=list)
    table: dict[str, int] = field(default_factory=dict)
    tags: set[str] = field(default_factory=set)
    other: Any = None


@state.savable(name="tscale.Watched")
@dataclass(eq=False)
class Watched:
    a: int = 0
    b: list[int] = field(default_factory=list)

    def __setattr__(self, name: str, value: Any) -> None:
        type(self).calls.append(name)
        object.__setattr__(self, name, value)


Watched.calls: list[str] = []  # type: ignore[attr-defined]


def _streams_agree(root: Any) -> bytes:
    data = state.dumps(root, "typed")
    if NATIVE:
        assert state.dumps(root, "native") == data
    return data


def test_refcount_calibration_is_what_the_loop_sees() -> None:
    if codegen.UNIQUE_REFS is None:
        pytest.skip("this interpreter has no usable reference counts")
    source = codegen.build_save(schema_of(Box))[0]
    assert f"__ckpt_refs(_v1) > {codegen.UNIQUE_REFS}" in source


@pytest.mark.parametrize("load_with", ENGINES)
def test_containers_shared_between_fields_objects_and_any(load_with: str) -> None:
    shared_list, shared_map, shared_set = [1, 2], {"k": 1}, {"t"}
    a = Box(1, items=shared_list, table=shared_map, tags=shared_set)
    b = Box(2, items=shared_list, table=shared_map, tags=shared_set, other=(shared_list,))
    c = Box(3, items=[5], other=[a, b])  # c.items is held by c alone
    a.refs = [b, c]
    b.refs = a.refs  # one list of references in two fields
    del shared_list, shared_map, shared_set
    root = _streams_agree(c)
    got = state.loads(root, load_with)
    ga, gb = got.other
    assert ga.items is gb.items is gb.other[0] and ga.items == [1, 2]
    assert ga.table is gb.table and ga.tags is gb.tags
    assert ga.refs is gb.refs and ga.refs[1] is got
    assert got.items == [5] and got.items is not ga.items


def test_same_container_twice_in_one_object_stays_one() -> None:
    one = [7]
    box = Box(items=one, other=one)
    del one
    got = state.loads(_streams_agree(box), "typed")
    assert got.items is got.other


@pytest.mark.parametrize("shared", [False, True])
def test_list_of_refs_with_a_misfit_is_escaped_exactly(shared: bool) -> None:
    """The escape path forgets the memo entry only if one was made."""
    bad = [Box(1), "not a box"]
    boxes = [Box(10, refs=bad), Box(11, refs=bad if shared else [Box(2)])]
    del bad
    holder = Box(0, other=boxes)
    got = state.loads(_streams_agree(holder), "typed")
    first, second = got.other
    assert first.refs[1] == "not a box" and type(first.refs[0]) is Box
    assert (first.refs is second.refs) is shared


def test_dict_with_misfit_values_is_escaped_exactly() -> None:
    box = Box(table={"a": 1, "b": None})  # type: ignore[dict-item]
    got = state.loads(_streams_agree(box), "typed")
    assert got.table == {"a": 1, "b": None}


@pytest.mark.parametrize("saved_with", ENGINES)
def test_plain_stores_give_the_same_instance_dict(saved_with: str) -> None:
    box = Box(4, items=[1], refs=[], table={"x": 2}, tags={"t"}, other="o")
    got = state.loads(state.dumps(box, saved_with), "typed")
    assert list(vars(got)) == ["n", "items", "refs", "table", "tags", "other"]
    assert vars(got) == {**vars(box), "refs": []} and got.refs == []


def test_custom_setattr_is_not_called_on_load() -> None:
    w = Watched(3, [1])
    data = state.dumps(w, "typed")
    Watched.calls.clear()
    got = state.loads(data, "typed")
    assert not {"a", "b"} & set(Watched.calls) and got.a == 3 and got.b == [1]


def test_plain_stores_only_where_they_do_what_the_dict_would() -> None:
    class Prop:
        @property
        def size(self) -> int:
            return 0

    class Method:
        def size(self) -> int:  # a non-data descriptor: the instance dict shadows it
            return 0

    class Slotted:
        __slots__ = ("__dict__", "size")

    assert codegen._plain_stores(Box, ["n", "items"])
    assert codegen._plain_stores(Method, ["size"])
    assert not codegen._plain_stores(Prop, ["size"])
    assert not codegen._plain_stores(Slotted, ["size"])
    assert not codegen._plain_stores(Watched, ["a"])
    assert not codegen._plain_stores(Box, ["not-a-name"])
