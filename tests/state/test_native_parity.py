"""Many native saves in one process: each writes exactly typed's bytes whatever came
before it (larger graphs, other shapes, failed saves, freed graphs whose addresses the
next graph's objects reuse), so nothing a walk leaves behind (its tables sized by the
previous walk, its module state) leaks into the next.
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

from .requires import requires_native

pytestmark = requires_native


@pytest.fixture(autouse=True)
def hang_is_a_failure():
    """A table with no empty slot left (one sized or cleared wrongly between walks)
    would make a lookup probe forever: end the run with a traceback instead."""
    faulthandler.dump_traceback_later(300, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@state.savable(name="tests.repeated.Blob")
@dataclasses.dataclass(eq=False)
class Blob:
    data: bytes = b""
    next: Blob | None = None


class Unsavable:
    pass


@state.savable(name="tests.repeated.Holder")
@dataclasses.dataclass(eq=False)
class Holder:
    items: list = dataclasses.field(default_factory=list)


def _same_as_typed(root: object) -> None:
    assert state.dumps(root, engine="native") == state.dumps(root, engine="typed")


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
        _same_as_typed(state_models.make_graph(3000, seed=6))


def test_a_very_large_row_buffer_and_then_small_saves() -> None:
    # One 40 MiB field grows a row buffer through every power of two up to 64 MiB.
    root = Blob(b"\x07" * (40 << 20), Blob(b"tail"))
    data = state.dumps(root, engine="native")
    back = state.loads(data)
    assert back.data == root.data and back.next.data == b"tail"
    _same_as_typed(state_models.make_graph(2000, seed=7))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(20, 6000), st.integers(0, 3)), min_size=1, max_size=6))
def test_any_sequence_of_saves_writes_typeds_bytes(plan: list[tuple[int, int]]) -> None:
    for nodes, seed in plan:
        _same_as_typed(state_models.make_graph(nodes, seed=seed))


def test_kept_row_buffers_switched_on_and_off_between_saves() -> None:
    """Large row buffers are kept for the next walk (``_native.set_keep_buffers``): a
    walk that takes one, grows it, or finds none must write the same bytes."""
    from ckpt.state import native

    core = native._core
    was = core.set_keep_buffers(True)
    try:
        for k, make in enumerate(MAKERS * 2):
            core.set_keep_buffers(k % 3 != 1)
            _same_as_typed(make())
    finally:
        core.set_keep_buffers(was)
