"""The native core's version-specific paths (_native_compat.h) at their edges: sets read
in place with deleted entries in their tables, ints on both sides of each fast path's
limit (one 30-bit digit, two, 64 bits), and UUIDs at both ends of their range.  Each
writes typed's bytes and loads back, on whichever CPython runs the tests."""

from __future__ import annotations

import sys
import sysconfig
import uuid
from dataclasses import dataclass, field

import pytest

from ckpt import state
from ckpt.state import native

from .graph_equal import graph_diff
from .requires import requires_native

pytestmark = requires_native


@state.savable(name="test.native.VersionLeaf")
@dataclass(eq=False)
class VersionLeaf:
    n: int = 0


@state.savable(name="test.native.VersionBox")
@dataclass(eq=False)
class VersionBox:
    ints: set[int] = field(default_factory=set)
    names: frozenset[str] = frozenset()
    leaves: set[VersionLeaf] = field(default_factory=set)
    n: int = 0
    maybe: int | None = None
    many: list[int] = field(default_factory=list)
    key: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))


def _same(root: object) -> None:
    typed = state.dumps(root, engine="typed")
    native = state.dumps(root, engine="native")
    assert native == typed
    assert graph_diff(root, state.loads(native, engine="native")) is None


def _holey_set(keep: range, drop: range) -> set[int]:
    """A set whose table holds deleted (dummy) entries among the live ones."""
    s = set(keep) | set(drop)
    for x in drop:
        s.discard(x)
    return s


@pytest.mark.parametrize("size", [0, 1, 5, 40, 1000])
def test_sets_with_deleted_entries_write_typeds_bytes(size: int) -> None:
    ints = _holey_set(range(0, 2 * size, 2), range(1, 2 * size, 2))
    names = frozenset(str(i) for i in _holey_set(range(size), range(size, 3 * size)))
    leaves = {VersionLeaf(i) for i in range(size)}
    extra = [VersionLeaf(-i) for i in range(size)]
    leaves.update(extra)
    leaves.difference_update(extra)
    box = VersionBox(ints=ints, names=names, leaves=leaves)
    assert len(box.ints) == len(box.leaves) == size
    _same(box)


EDGES = [
    0,
    1,
    -1,
    2**30 - 1,
    2**30,
    -(2**30) + 1,
    -(2**30),
    2**60 - 1,
    2**60,
    -(2**60),
    2**63 - 1,
    2**63,
    -(2**63),
    2**64 - 1,
    2**64,  # beyond MessagePack: typed's slot escape
    -(2**63) - 1,
    2**200,
]


@pytest.mark.parametrize("n", EDGES, ids=[f"{n:#x}" for n in EDGES])
def test_ints_at_each_fast_path_limit_write_typeds_bytes(n: int) -> None:
    _same(VersionBox(n=n, maybe=n, many=[n, -n, n // 3], ints={n, n - 1}))


@pytest.mark.parametrize("n", [0, 1, 2**64, 2**127, 2**128 - 1], ids=hex)
def test_uuids_at_both_ends_write_typeds_bytes(n: int) -> None:
    _same(VersionBox(key=uuid.UUID(int=n)))


@state.savable(name="test.native.VersionLate")
@dataclass(eq=False)
class VersionLate:
    n: int = 0


@state.savable(name="test.native.VersionTable")
@dataclass(eq=False)
class VersionTable:
    refs: dict[int, VersionLate] = field(default_factory=dict)


@pytest.mark.parametrize("change", ["add", "replace", "remove"])
def test_a_dict_changed_while_it_is_written_in_place_is_written_as_changed(
    monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Python code run to discover a class (here: its plan) changes the dict being
    written in place: the write starts again from snapshots (3.11: the dict's version
    tag says so; 3.12 and later: a dict watcher)."""
    from ckpt.state import native

    table = VersionTable({i: VersionLate(i) for i in range(3)})
    plan_for, changed = native._plan_for, []

    def meddling_plan_for(cls: type) -> object:
        if cls is VersionLate and not changed:
            changed.append(cls)
            if change == "add":
                table.refs[99] = VersionLate(99)
            elif change == "replace":
                table.refs[2] = VersionLate(-2)
            else:
                del table.refs[2]
        return plan_for(cls)

    for cls in (VersionTable, VersionLate):  # no plans cached: discovery asks for them
        state.schema.schema_of(cls).info.__dict__.pop("_native_plan", None)
    monkeypatch.setattr(native, "_plan_for", meddling_plan_for)
    data = state.dumps(table, engine="native")
    assert changed
    assert graph_diff(table, state.loads(data, engine="native")) is None
    if change != "remove":  # the objects met keep their ids: same order as typed's here
        assert data == state.dumps(table, engine="typed")


@pytest.mark.skipif(
    not (3, 11) <= sys.version_info[:2] <= (3, 13)
    or bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    reason="dicts' tables are read in place on CPython 3.11-3.13 with the GIL only",
)
def test_dict_tables_are_read_in_place_where_their_layout_is_known() -> None:
    from ckpt.state import native

    assert native._core.fast_paths == 1
    assert native._core.dict_table == 1  # the import-time check agreed with PyDict_Next


KNOWN_LAYOUT = (3, 11) <= sys.version_info[:2] <= (3, 13) and not sysconfig.get_config_var(
    "Py_GIL_DISABLED"
)


@pytest.mark.skipif(
    not KNOWN_LAYOUT or not getattr(native._core, "fast_paths", 0),
    reason="instance layouts are read in place only on CPython 3.11-3.13, in a build that "
    "may read them",
)
def test_the_layout_checks_accept_this_interpreter() -> None:
    """Where the core knows this CPython's instance layout, its import-time checks find
    attributes where getattr does; a layout read wrongly would turn the fast paths off
    and every field would be read through getattr, correct but twice as slow."""
    fresh = native._Probe()
    assert native._core.check_values(fresh, "x") is True
    assert fresh.__dict__ == {"x": 1}  # materialises the dict
    assert native._core.check_layout(fresh) is True
    # and an instance whose dict replaced its values: not what check_values reads
    replaced = native._Probe()
    replaced.__dict__ = {"x": 2}
    assert native._core.check_values(replaced, "x") is False
    native._core.check_values(native._Probe(), "x")  # on again
