"""LockSet against a byte-by-byte model: splitting and merging never change who holds what."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt.kernel.locks import LockSet, LockType

SIZE = 48
R, W = LockType.READ, LockType.WRITE

ops = st.lists(
    st.tuples(
        st.sampled_from(["lock", "unlock"]),
        st.integers(1, 3),  # owner
        st.sampled_from([R, W]),
        st.integers(0, SIZE - 1),
        st.integers(1, 16),
    ),
    max_size=40,
)


class Model:
    """Per byte: the writer (0 for none) and the set of readers."""

    def __init__(self) -> None:
        self.writer = [0] * SIZE
        self.readers: list[set[int]] = [set() for _ in range(SIZE)]

    def conflicts(self, owner: int, kind: LockType, start: int, end: int) -> bool:
        for i in range(start, end):
            if self.writer[i] not in (0, owner):
                return True
            if kind is W and self.readers[i] - {owner}:
                return True
        return False

    def lock(self, owner: int, kind: LockType, start: int, end: int) -> bool:
        if self.conflicts(owner, kind, start, end):
            return False
        for i in range(start, end):
            if kind is W:
                self.writer[i] = owner
                self.readers[i].discard(owner)
            else:
                if self.writer[i] == owner:
                    self.writer[i] = 0
                self.readers[i].add(owner)
        return True

    def unlock(self, owner: int, start: int, end: int) -> None:
        for i in range(start, end):
            if self.writer[i] == owner:
                self.writer[i] = 0
            self.readers[i].discard(owner)

    def held_by(self, owner: int) -> list[tuple[LockType, int, int]]:
        out: list[tuple[LockType, int, int]] = []
        for i in range(SIZE):
            kind = W if self.writer[i] == owner else R if owner in self.readers[i] else None
            if kind is None:
                continue
            if out and out[-1][0] is kind and out[-1][2] == i:
                out[-1] = (kind, out[-1][1], i + 1)
            else:
                out.append((kind, i, i + 1))
        return out


@settings(max_examples=150, deadline=None)
@given(ops)
def test_lockset_matches_the_byte_model(operations):
    real, model = LockSet(), Model()
    for op, owner, kind, start, length in operations:
        end = min(SIZE, start + length)
        if op == "lock":
            assert real.try_lock(owner, owner * 10, kind, start, end) == model.lock(
                owner, kind, start, end
            )
        else:
            real.unlock(owner, start, end)
            model.unlock(owner, start, end)
        for who in (1, 2, 3):
            assert real.held_by(who) == model.held_by(who)
        # Segments stay sorted, disjoint, non-empty and maximally merged.
        segs = real.segments
        assert all(a.end <= b.start for a, b in itertools.pairwise(segs))
        assert all(not s.empty() and s.start < s.end for s in segs)
        assert all(
            not (a.end == b.start and a.same_holders(b)) for a, b in itertools.pairwise(segs)
        )
