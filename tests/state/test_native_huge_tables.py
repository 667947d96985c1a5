"""The native save walk's large tables are mappings of their own that ask for huge pages.

A walk over more than ~130k objects has an id table of 4 MiB or more; it is then an
anonymous 2 MiB-aligned mapping with MADV_HUGEPAGE (the kernel's "hg" flag), freed with
munmap.  Which way a table came is recorded with it, so switching the mode between walks
(``_native.set_huge_tables``) while an array is kept for the next walk frees every array
the way it was made; under AddressSanitizer (.ci/asan.sh) a mapping handed to free(), or
a heap block to munmap, aborts the run.  The bytes never depend on the mode.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys

import pytest

from ckpt import state

from .requires import requires_native

pytestmark = requires_native

HUGE_MIN = 4 << 20  # bytes: _native.c's HUGE_MIN
SPARE_MAX = 8 << 20  # bytes: the largest array a walk keeps for the next one
# Past this many objects the id table (16-byte slots, at most half full) is HUGE_MIN or more.
OVER_MIN = HUGE_MIN // 16 // 2 + 1000
# Past this many, it is larger than any array kept from an earlier walk: a new mapping.
OVER_SPARE = SPARE_MAX // 16 // 2 + 1000


@state.savable(name="tests.huge.Node")
@dataclasses.dataclass(eq=False)
class Node:
    value: int = 0
    next: Node | None = None


@state.savable(name="tests.huge.Probe")
@dataclasses.dataclass(eq=False)
class Probe:
    """Reads this process's mappings while the walk that saves it is under way."""

    seen: list = dataclasses.field(default_factory=list)

    def __before_save__(self) -> None:
        self.seen.append(_huge_advised_mappings())


@state.savable(name="tests.huge.Root")
@dataclasses.dataclass(eq=False)
class Root:
    nodes: list[Node] = dataclasses.field(default_factory=list)
    probe: Probe | None = None


def _native():
    from ckpt.state import native

    return native._core


def _huge_advised_mappings() -> list[int]:
    """Sizes in bytes of the mappings of HUGE_MIN or more that carry the 'hg' flag."""
    sizes, size = [], 0
    with open("/proc/self/smaps") as f:
        for line in f:
            if line.startswith("Size:"):
                size = int(line.split()[1]) * 1024
            elif line.startswith("VmFlags:") and "hg" in line.split()[1:] and size >= HUGE_MIN:
                sizes.append(size)
    return sizes


def _root(n: int, seed: int = 0) -> Root:
    nodes = [Node(seed + i) for i in range(n)]
    for a, b in itertools.pairwise(nodes):
        a.next = b
    return Root(nodes)


@pytest.fixture
def restore_mode():
    core = _native()
    was = core.set_huge_tables(True)
    yield core
    core.set_huge_tables(was)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="huge pages are asked of Linux")
def test_a_large_walk_table_is_advised_huge_pages(restore_mode):
    root = _root(OVER_SPARE)
    root.probe = Probe()
    before = _huge_advised_mappings()
    state.dumps(root, "native")
    (during,) = root.probe.seen
    if not during:
        try:
            with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
                f.read()
        except OSError:
            pytest.skip("this kernel has no transparent huge pages")
    table = 2 * SPARE_MAX  # the id table of OVER_SPARE objects, never one kept before
    assert not [size for size in before if size >= table], before
    assert [size for size in during if size >= table], (before, during)
    assert all(size % (2 << 20) == 0 for size in during)


def test_bytes_do_not_depend_on_the_mode(restore_mode):
    core = restore_mode
    root = _root(OVER_MIN)
    core.set_huge_tables(True)
    huge = state.dumps(root, "native")
    core.set_huge_tables(False)
    small = state.dumps(root, "native")
    assert huge == small == state.dumps(root, "typed")
    assert state.loads(huge, "native").nodes[-1].value == OVER_MIN - 1


def test_switching_modes_between_walks_frees_each_array_as_it_was_made(restore_mode):
    """Sizes chosen so the id table is kept for the next walk (4-8 MiB), taken up by a
    walk in the other mode, then replaced by a larger one and freed."""
    core = restore_mode
    sizes = [OVER_MIN, OVER_MIN + 10, 60_000, OVER_MIN * 2 + 10, OVER_MIN, 500]
    expected = {}
    for n in sizes:
        core.set_huge_tables(False)
        expected[n] = state.dumps(_root(n, n), "native")
    for k, n in enumerate(sizes * 2):
        core.set_huge_tables(k % 2 == 0)
        assert state.dumps(_root(n, n), "native") == expected[n], (k, n)
