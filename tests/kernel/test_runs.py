"""Run tables (``RunMap``) against per-page models.

``RunMap`` alone is checked against a dict under random assigns, deletes, range pops and
range adds.  The memory file's reference counts and each process's page table are
checked against a per-page model of the memory manager (one dict entry per page, frames
allocated and freed as a stack of frames) under random map, unmap, write, fork, exit and
dump sequences: the same frames, counts, dirty set and contents, and run tables that
stay maximal and survive every state engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.errors import StateError
from ckpt.kernel import build_workload
from ckpt.kernel.mm import PROT_READ, PROT_WRITE, MemoryFile, MemoryManager
from ckpt.kernel.runs import RunMap

from .conftest import MemoryPages

PAGE = 4096
RW = PROT_READ | PROT_WRITE
SPAN = 48  # pages of the address space the model exercises
BASE = 0x1000_0000
ENGINES = ["reflect", "typed", "native"]


# -- RunMap against a dict ------------------------------------------------------------------
keys = st.integers(0, 40)
run_ops = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), keys, st.integers(1, 12), st.integers(0, 6)),
        st.tuples(st.just("set"), keys, st.just(1), st.integers(0, 6)),
        st.tuples(st.just("pop"), keys, st.integers(1, 12), st.just(0)),
        st.tuples(st.just("add"), keys, st.integers(1, 12), st.integers(-2, 2)),
    ),
    max_size=40,
)


@settings(max_examples=300)
@given(step=st.sampled_from([0, 1]), ops=run_ops)
def test_run_map_matches_a_dict(
    watchdog: None, step: int, ops: list[tuple[str, int, int, int]]
) -> None:
    m, model = RunMap(step), {}
    for op, first, n, value in ops:
        if op == "assign":
            m.assign(first, n, value)
            model.update({first + i: value + step * i for i in range(n)})
        elif op == "set":
            m[first] = value
            model[first] = value
        elif op == "pop":
            gone = m.pop_range(first, n)
            want = {k: model.pop(k) for k in range(first, first + n) if k in model}
            assert {s + i: v + step * i for s, ln, v in gone for i in range(ln)} == want
        else:
            m.add(first, n, value)
            for k in range(first, first + n):
                if k in model:
                    model[k] += value
        m.check()
        assert dict(m.items()) == model and len(m) == len(model)
        assert all(m.get(k) == model.get(k) and (k in m) == (k in model) for k in range(60))
    assert list(m.keys()) == sorted(model)
    for probe in (list(range(-2, 60)), [30, 2, 2, 45, 0, 17, 16]):
        assert list(m.held(probe)) == [k for k in probe if k in model]
    lo, n = 5, 20
    assert {s + i: v + step * i for s, ln, v in m.runs_in(lo, n) for i in range(ln)} == {
        k: v for k, v in model.items() if lo <= k < lo + n
    }


def test_a_filled_page_table_is_one_run() -> None:
    m = RunMap(1)
    for vpn in range(1000):
        m[100 + vpn] = 7 + vpn
    assert m.runs() == [(100, 1000, 7)] and len(m) == 1000
    m[600] = 99  # copy-on-write of one page splits the run in three
    assert m.runs() == [(100, 500, 7), (600, 1, 99), (601, 499, 508)]
    m[600] = 507  # and putting the frame back makes it one again
    assert m.runs() == [(100, 1000, 7)]


@pytest.mark.parametrize("engine", ENGINES)
def test_saved_kernel_state_does_not_grow_with_memory(engine: str) -> None:
    """kv:16 holds 16x kv:1's pages in as many runs: its state is the same size to a few
    bytes (one dict entry per page made it 61 KB larger)."""
    small, large = (len(state.dumps(build_workload(f"kv:{n}"), engine=engine)) for n in (1, 16))
    assert large - small < 256, (small, large)


@pytest.mark.parametrize(
    ("starts", "lens", "values", "count"),
    [
        ([0, 2], [2, 2], [1, 1], 4),  # should be one run
        ([0, 1], [2, 2], [1, 2], 4),  # overlap
        ([3, 0], [1, 1], [1, 2], 2),  # unsorted
        ([0], [0], [1], 0),  # empty run
        ([0], [2], [1], 3),  # count disagrees
        ([0], [2], [1, 2], 2),  # columns differ
        ([0], ["2"], [1], 2),  # not an int
    ],
)
def test_a_broken_run_map_is_refused_on_load(starts, lens, values, count) -> None:
    for engine in ENGINES:
        data = state.dumps(RunMap(0, starts, lens, values, count), engine=engine)
        with pytest.raises(StateError, match="RunMap"):
            state.loads(data, engine=engine)


# -- the memory manager against a per-page model --------------------------------------------
@dataclass
class Model:
    """The memory file and page tables as one dict entry per page (the old layout)."""

    ptes: list[dict[int, int]] = field(default_factory=lambda: [{}])
    mapped: list[set[int]] = field(default_factory=lambda: [set()])
    refs: dict[int, int] = field(default_factory=dict)
    free: list[int] = field(default_factory=list)
    next_frame: int = 0
    dirty: set[int] = field(default_factory=set)
    data: dict[int, bytes] = field(default_factory=dict)

    def alloc(self) -> int:
        frame = self.free.pop() if self.free else self.next_frame
        self.next_frame = max(self.next_frame, frame + 1)
        self.refs[frame] = 1
        self.dirty.add(frame)
        return frame

    def decref(self, frame: int) -> None:
        self.refs[frame] -= 1
        if not self.refs[frame]:
            del self.refs[frame]
            event("a frame freed")
            self.data.pop(frame, None)
            self.free.append(frame)
            self.dirty.discard(frame)

    def write(self, m: int, vpn: int, byte: int) -> None:
        ptes = self.ptes[m]
        frame = ptes.get(vpn)
        if frame is None:
            frame = ptes[vpn] = self.alloc()
        elif self.refs[frame] > 1:  # copy-on-write
            event("copy-on-write")
            new = self.alloc()
            self.data[new] = self.data.get(frame, bytes(PAGE))
            self.decref(frame)
            frame = ptes[vpn] = new
        old = self.data.get(frame, bytes(PAGE))
        self.data[frame] = bytes([byte]) + old[1:]
        self.dirty.add(frame)

    def unmap(self, m: int, first: int, n: int) -> None:
        for vpn in range(first, first + n):
            self.mapped[m].discard(vpn)
            if vpn in self.ptes[m]:
                self.decref(self.ptes[m].pop(vpn))

    def fork(self, m: int) -> None:
        self.ptes.append(dict(self.ptes[m]))
        self.mapped.append(set(self.mapped[m]))
        for frame in self.ptes[m].values():
            self.refs[frame] += 1


OPS = ["write", "write", "write", "map", "unmap", "fork", "fork", "exit", "take"]
mm_ops = st.lists(
    st.tuples(st.sampled_from(OPS), st.integers(0, 5), st.integers(0, SPAN - 1), st.integers(1, 9)),
    min_size=15,
    max_size=60,
)


def _check(mf: MemoryFile, mms: list[MemoryManager | None], model: Model) -> None:
    mf.refs.check()
    assert dict(mf.refs.items()) == model.refs
    assert mf.next_frame == model.next_frame
    assert [f for s, n in mf.free_runs for f in range(s, s + n)] == model.free
    for mm, ptes in zip(mms, model.ptes, strict=True):
        if mm is None:
            continue
        mm.ptes.check()
        assert {vpn - BASE // PAGE: f for vpn, f in mm.ptes.items()} == ptes
    assert mf.dirty_pages() == sorted(model.dirty)
    assert {f: mf.read(f) for f in model.data} == model.data


@settings(max_examples=200)
@given(ops=mm_ops, engine=st.sampled_from(ENGINES))
def test_page_tables_and_counts_match_a_per_page_model(
    watchdog: None, ops: list[tuple[str, int, int, int]], engine: str
) -> None:
    mf = MemoryFile()
    mms: list[MemoryManager | None] = [MemoryManager(1, mf)]
    mms[0].mmap(SPAN * PAGE, RW, addr=BASE)  # type: ignore[union-attr]
    model = Model(mapped=[set(range(SPAN))])
    for step, (op, m, first, n) in enumerate(ops):
        m = m % len(mms)
        mm = mms[m]
        if mm is None:
            continue
        n = min(n, SPAN - first)
        if op == "write":
            # the first byte of n pages, each written if mapped (else it would fault)
            for vpn in range(first, first + n):
                if vpn in model.mapped[m]:
                    mm.write(BASE + vpn * PAGE, bytes([step % 251]))
                    model.write(m, vpn, step % 251)
        elif op == "map":
            mm.mmap(n * PAGE, RW, addr=BASE + first * PAGE)
            model.unmap(m, first, n)  # MAP_FIXED replaces what was there
            model.mapped[m].update(range(first, first + n))
        elif op == "unmap":
            mm.munmap(BASE + first * PAGE, n * PAGE)
            model.unmap(m, first, n)
        elif op == "fork":
            mms.append(mm.fork(len(mms) + 1))
            model.fork(m)
        elif op == "exit" and m:  # init stays
            mm.release()
            model.unmap(m, 0, SPAN)
            mms[m] = None
        elif op == "take":
            assert mf.take_dirty() == sorted(model.dirty)
            model.dirty.clear()
        _check(mf, mms, model)
    # the run tables go through every engine as they are, and come back clean
    live = [mm for mm in mms if mm is not None]
    loaded_mf, *loaded = state.loads(state.dumps([mf, *live], engine=engine), engine=engine)
    assert loaded_mf.refs.runs() == mf.refs.runs()
    assert [mm.ptes.runs() for mm in loaded] == [mm.ptes.runs() for mm in live]
    assert all(mm.mf is loaded_mf for mm in loaded)
    assert loaded_mf.free_runs == mf.free_runs
    loaded_mf.restore_pages(MemoryPages(dict(mf.pages())))
    assert loaded_mf.dirty_pages() == []
    assert {f: loaded_mf.read(f) for f in model.data} == model.data
