"""The native save walk keeps its large blocks (id table, container memo, row buffers)
for the next save (``_native_scratch.c``), so repeated saves do not fault fresh pages in.

What must hold: a reused block never leaks what the previous walk left in it (every
save still writes exactly typed's bytes, whatever came before it, failed saves
included), and what is kept stays within its bound and can be given back.
"""

from __future__ import annotations

import dataclasses
import faulthandler

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.bench import state_flat, state_models
from ckpt.errors import StateError
from ckpt.state import native

pytestmark = pytest.mark.skipif(
    not state.native_status()[0], reason=f"native engine: {state.native_status()[1]}"
)
HELD_MAX = 64 << 20  # SCRATCH_HELD_MAX in _native_scratch.c


@pytest.fixture(autouse=True)
def hang_is_a_failure():
    """A table left full of stale keys would make a lookup probe forever: end the run
    with a traceback instead of hanging it."""
    faulthandler.dump_traceback_later(300, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@state.savable(name="tests.scratch.Blob")
@dataclasses.dataclass(eq=False)
class Blob:
    data: bytes = b""
    next: Blob | None = None


class Unsavable:
    pass


@state.savable(name="tests.scratch.Holder")
@dataclasses.dataclass(eq=False)
class Holder:
    items: list = dataclasses.field(default_factory=list)


def _same_as_typed(root: object) -> None:
    assert state.dumps(root, engine="native") == state.dumps(root, engine="typed")


def test_a_large_save_keeps_blocks_and_release_gives_them_back() -> None:
    native._core.scratch_release()
    assert native._core.scratch_held() == 0
    state.dumps(state_models.make_graph(20000), engine="native")
    held = native._core.scratch_held()
    assert 64 << 10 <= held <= HELD_MAX
    assert native._core.scratch_release() == held
    assert native._core.scratch_held() == 0
    _same_as_typed(state_models.make_graph(2000))  # and saving goes on afterwards


MAKERS = [
    lambda: state_models.make_graph(20000, seed=1),
    lambda: state_models.make_graph(300, seed=2),
    lambda: state_flat.make_flat(8000),
    lambda: state_models.make_people(5000),
    lambda: state_models.make_graph(12000, seed=3),
    lambda: [1, "x"],
    lambda: state_models.make_graph(20000, seed=4),
]


def test_saves_after_larger_and_different_ones_write_exactly_typeds_bytes() -> None:
    # Each save reuses what the one before it left: larger tables holding the
    # addresses of objects since freed (and now reused by the next graph's objects),
    # row buffers holding another graph's rows.
    for make in MAKERS + MAKERS[::-1]:
        _same_as_typed(make())
    kept = [make() for make in MAKERS]  # and with every graph alive at once
    for root in kept:
        _same_as_typed(root)


def test_a_failed_save_leaves_nothing_behind_for_the_next() -> None:
    big = state_models.make_graph(20000, seed=5)
    bad = Holder(items=[Blob(b"x" * 100) for _ in range(5000)] + [Unsavable()])
    for _ in range(3):
        with pytest.raises(StateError):
            state.dumps(Holder(items=[big, bad]), engine="native")
        assert native._core.scratch_held() <= HELD_MAX
        _same_as_typed(state_models.make_graph(3000, seed=6))


def test_what_is_kept_stays_bounded_after_a_very_large_row_buffer() -> None:
    # One 40 MiB field grows a row buffer through every power of two up to 64 MiB;
    # the blocks it leaves on the way must not add up past the bound.
    root = Blob(b"\x07" * (40 << 20), Blob(b"tail"))
    data = state.dumps(root, engine="native")
    assert native._core.scratch_held() <= HELD_MAX
    back = state.loads(data)
    assert back.data == root.data and back.next.data == b"tail"
    _same_as_typed(state_models.make_graph(2000, seed=7))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(20, 6000), st.integers(0, 3)), min_size=1, max_size=6))
def test_any_sequence_of_saves_writes_typeds_bytes(plan: list[tuple[int, int]]) -> None:
    for nodes, seed in plan:
        _same_as_typed(state_models.make_graph(nodes, seed=seed))
