"""FrameBits (the unfetched frames of a restored memory file) against a plain set."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.kernel.framebits import FrameBits, intersect_runs


@st.composite
def _runs(draw: st.DrawFn, top: int = 200) -> list[tuple[int, int]]:
    """Ascending, disjoint (first, count) runs, adjacent or with gaps."""
    runs, at = [], draw(st.integers(0, 20))
    for _ in range(draw(st.integers(0, 10))):
        at += draw(st.sampled_from([0, 0, 1, 5]))
        n = draw(st.integers(1, 15))
        runs.append((at, n))
        at += n
    return runs


def _frames(runs: list[tuple[int, int]]) -> set[int]:
    return {f for first, n in runs for f in range(first, first + n)}


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("discard"), st.integers(-3, 220), st.just(1)),
        st.tuples(st.just("range"), st.integers(-10, 220), st.integers(0, 40)),
    ),
    max_size=30,
)


@given(_runs(), _OPS)
def test_framebits_behaves_as_a_set(runs: list[tuple[int, int]], ops: list) -> None:
    bits, model = FrameBits(runs), _frames(runs)
    for op, first, n in ops:
        if op == "discard":
            bits.discard(first)
            model.discard(first)
        else:
            bits.discard_range(first, n)
            model.difference_update(range(first, first + n))
        assert len(bits) == len(model) and bool(bits) == bool(model)
    assert list(bits) == sorted(model)  # ascending, each once
    for f in range(-2, 230):
        assert (f in bits) == (f in model)
    assert "1" not in bits and 1.0 not in bits


def test_framebits_refuses_overlapping_runs() -> None:
    with pytest.raises(ValueError):
        FrameBits([(0, 4), (2, 4)])
    with pytest.raises(ValueError):
        FrameBits([(-1, 2)])


@given(_runs(), _runs())
def test_intersect_runs_is_the_common_frames(a: list, b: list) -> None:
    out = list(intersect_runs(a, b))
    assert _frames(out) == _frames(a) & _frames(b)
    assert all(n > 0 for _, n in out)
    assert all(x[0] + x[1] <= y[0] for x, y in itertools.pairwise(out))
