"""The native core's version-specific paths (_native_compat.h) at their edges: sets read
in place with deleted entries in their tables, ints on both sides of each fast path's
limit (one 30-bit digit, two, 64 bits), and UUIDs at both ends of their range.  Each
writes typed's bytes and loads back, on whichever CPython runs the tests."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest

from ckpt import state

from .graph_equal import graph_diff

pytestmark = pytest.mark.skipif(
    not state.native_status()[0], reason=f"native engine: {state.native_status()[1]}"
)


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
