"""Dirty-page tracking: checked against a full comparison of every frame (the shadow).

A frame must be dirty exactly when it is allocated now and was not at the last clear, or
its contents differ from what they were then.  Every write here carries fresh bytes (a
digest of a counter), so a written frame always differs and "written" means "changed".
"""

from __future__ import annotations

import hashlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.kernel import Kernel, build_workload, mm
from ckpt.kernel.mm import PROT_READ, PROT_WRITE, MapKind, MemoryFile
from ckpt.kernel.runs import RunMap

from .conftest import MemoryPages, assert_same_state, blank_kernel, open_rw

RW = PROT_READ | PROT_WRITE
PAGE = 4096
REGIONS = {  # name: (kind, pages)
    "private": (MapKind.ANON_PRIVATE, 8),
    "shared": (MapKind.ANON_SHARED, 4),
    "file_private": (MapKind.FILE_PRIVATE, 4),
    "file_shared": (MapKind.FILE_SHARED, 4),
}
MAX_TASKS = 6


class Scenario:
    """A kernel with one mapping of every kind in init, forks, exits, and the shadow."""

    def __init__(self) -> None:
        self.k, init = blank_kernel()
        self.tasks = [init]
        self.counter = 0
        self.fd = open_rw(self.k, init, "/tmp/dirty")
        self.k.write(init, self.fd, self.fresh(3 * PAGE))  # file pages: 3 of 4 exist
        self.addrs: dict[str, int] = {}
        for name, (kind, pages) in REGIONS.items():
            fd = self.fd if kind in (MapKind.FILE_PRIVATE, MapKind.FILE_SHARED) else None
            self.addrs[name] = self.k.mmap(init, pages * PAGE, RW, kind, fd=fd)
        self.clear()

    @property
    def mf(self) -> MemoryFile:
        return self.k.memory_file

    def fresh(self, n: int) -> bytes:
        self.counter += 1
        digest = hashlib.sha256(self.counter.to_bytes(8, "little")).digest()
        return (digest * (n // len(digest) + 1))[:n]

    def frames(self) -> dict[int, bytes]:
        return dict(self.mf.pages())

    def views(self) -> dict[tuple[int, int], tuple[int, bytes]]:
        """(tid, virtual page) -> (frame, contents) for every populated page of every task."""
        out = {}
        for task in self.tasks:
            mm = task.tg.mm
            for _vma, vpn, frame in mm.page_digest_items():
                out[task.tid, vpn] = (frame, self.mf.read(frame))
        return out

    def clear(self, take: bool = False) -> None:
        if take:
            assert self.mf.take_dirty() == self.expected()
        else:
            self.mf.clear_dirty()
        assert self.mf.dirty_pages() == [] and self.mf.dirty_count() == 0
        self.shadow, self.shadow_views = self.frames(), self.views()

    def expected(self) -> list[int]:
        now = self.frames()
        return sorted(f for f, data in now.items() if self.shadow.get(f) != data)

    def check(self) -> None:
        dirty = self.mf.dirty_pages()
        assert dirty == self.expected()
        assert self.mf.dirty_count() == len(dirty)
        # As a process sees it: a page whose frame or contents changed maps a dirty frame.
        # A page new to a process (a fork's child) maps a frame the last image holds
        # unless the frame itself changed, which the comparison above covers.
        for key, (frame, data) in self.views().items():
            before = self.shadow_views.get(key)
            if before is not None and before != (frame, data):
                assert frame in dirty, f"task {key[0]} page {key[1]:#x} changed, not dirty"

    # -- operations (arguments are taken modulo what exists) ----------------------------
    def write(self, who: int, region: int, page: int, offset: int, n: int) -> None:
        name = list(REGIONS)[region % len(REGIONS)]
        pages = REGIONS[name][1]
        offset %= PAGE - n
        addr = self.addrs[name] + (page % pages) * PAGE + offset
        self.k.mem_write(self.tasks[who % len(self.tasks)], addr, self.fresh(n))

    def file_write(self, page: int, offset: int, n: int) -> None:
        init = self.tasks[0]
        self.k.lseek(init, self.fd, (page % 5) * PAGE + offset % (PAGE - n))
        self.k.write(init, self.fd, self.fresh(n))

    def fork(self, who: int) -> None:
        if len(self.tasks) < MAX_TASKS:
            self.tasks.append(self.k.fork(self.tasks[who % len(self.tasks)]))

    def exit(self, who: int) -> None:
        if len(self.tasks) > 1:
            task = self.tasks.pop(1 + who % (len(self.tasks) - 1))
            self.k.exit(task, 0)
            self.k.wait(self.tasks[0])


small = st.integers(0, 1 << 16)
OPS = st.one_of(
    st.tuples(st.just("write"), small, small, small, small, st.integers(16, 300)),
    st.tuples(st.just("file_write"), small, small, st.integers(16, 300)),
    st.tuples(st.just("fork"), small),
    st.tuples(st.just("exit"), small),
    st.tuples(st.just("clear"), st.booleans()),
    st.tuples(st.just("check")),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, max_size=40))
def test_dirty_pages_are_exactly_the_frames_that_changed(ops):
    s = Scenario()
    for op, *args in ops:
        if op == "clear":
            s.clear(take=args[0])
        elif op == "check":
            s.check()
        else:
            getattr(s, op)(*args)
    s.check()


def test_cow_after_fork_dirties_only_the_writers_copy():
    s = Scenario()
    s.write(0, 0, 0, 0, 64)  # init's private page 0
    child_pid = len(s.tasks)
    s.fork(0)
    s.clear()
    s.check()  # a fork changes no frame
    assert s.mf.dirty_pages() == []
    parent_frame = s.tasks[0].tg.mm.ptes[s.addrs["private"] // PAGE]
    s.write(child_pid, 0, 0, 0, 64)  # the child breaks the sharing
    child_frame = s.tasks[child_pid].tg.mm.ptes[s.addrs["private"] // PAGE]
    assert s.mf.dirty_pages() == [child_frame] and child_frame != parent_frame
    s.clear()
    s.write(0, 0, 0, 0, 64)  # the parent's frame is its own again: written in place
    assert s.mf.dirty_pages() == [parent_frame]
    s.check()


def test_a_frame_allocated_or_copied_is_dirty_before_any_write():
    mf = MemoryFile()
    a = mf.alloc()
    mf.write(a, 0, b"x" * 10)
    mf.incref(a)
    mf.clear_dirty()
    copy = mf.copy(a)  # the copy in copy-on-write, before the write that follows it
    assert mf.dirty_pages() == [copy]
    mf.decref(copy)  # freed: no longer dirty (nothing of it goes into an image)
    assert mf.dirty_pages() == []
    again = mf.alloc()  # reused, zero: a dump must write it, whatever it held before
    assert again == copy and mf.dirty_pages() == [again]


def test_frames_far_past_the_dirty_bytes_grow_them():
    mf = MemoryFile()
    mf.next_frame = 100_000  # as in a restored kernel: its dirty bytes start empty
    far = mf.alloc()
    mf.write(far, 0, b"x")
    further = mf.alloc()
    assert mf.dirty_pages() == [far, further] == [100_000, 100_001]
    mf.clear_dirty()
    mf.write(far, 1, b"y")
    assert mf.dirty_pages() == [far]


def test_boot_marks_every_frame_the_workload_filled():
    k = build_workload("memory:1")
    mf = k.memory_file
    assert mf.dirty_pages() == sorted(mf.refs)
    assert len(mf.dirty_pages()) >= 256


def test_a_restored_kernel_starts_clean_and_tracks_its_writes(engine):
    s = Scenario()
    s.write(0, 0, 1, 0, 100)
    s.fork(0)
    s.k.pause()
    saved = state.dumps(s.k, engine=engine)
    assert s.mf.dirty_count() > 0
    s.mf.clear_dirty()
    assert state.dumps(s.k, engine=engine) == saved  # the dirty set is not saved
    k = state.loads(saved, engine=engine)
    assert isinstance(k, Kernel)
    mf = k.memory_file
    assert mf.dirty_pages() == []
    mf.restore_pages(MemoryPages(dict(s.mf.pages())))
    assert mf.dirty_pages() == [] and mf.dirty_count() == 0
    assert mf.materialize() > 0  # fetching pages from the image dirties nothing
    assert mf.dirty_pages() == []
    assert_same_state(s.k, k)
    k.resume()
    init = k.init
    assert init is not None
    k.mem_write(init, s.addrs["private"] + PAGE, b"after restore")
    assert mf.dirty_pages() == [init.tg.mm.ptes[s.addrs["private"] // PAGE + 1]]


def test_take_dirty_hands_over_the_set_and_the_pages_of_those_still_allocated():
    s = Scenario()
    s.write(0, 0, 2, 0, 50)
    s.write(0, 1, 0, 0, 50)
    taken = s.mf.take_dirty()
    assert len(taken) == 2 and s.mf.dirty_pages() == []
    assert [f for f, _ in s.mf.pages(taken)] == taken
    pages = dict(s.mf.pages(taken))
    assert all(pages[f] == s.mf.read(f) for f in taken)


def test_pages_of_a_taken_set_skip_frames_freed_since():
    mf = MemoryFile()
    kept, freed = mf.alloc(), mf.alloc()
    mf.write(kept, 0, b"kept")
    taken = mf.take_dirty()
    assert taken == [kept, freed]
    mf.decref(freed)  # between two batches of a pre-dump round
    assert [(f, data[:4]) for f, data in mf.pages(taken)] == [(kept, b"kept")]


def test_taken_marks_are_the_frames_dirty_at_the_take_listed_later():
    """A dump takes the marks while frozen and lists them after: the count is there at
    once, and writes after the take count in the next set, not in the taken one."""
    mf = MemoryFile()
    frames = [mf.alloc() for _ in range(5)]
    mf.clear_dirty()
    for f in (frames[1], frames[3], frames[4]):
        mf.write(f, 0, b"before")
    marks = mf.take_dirty_marks()
    assert len(marks) == 3 and mf.dirty_pages() == []
    mf.write(frames[0], 0, b"after the take")  # the sandbox runs on
    assert list(marks) == [frames[1], frames[3], frames[4]] == marks.frames()
    assert len(marks) == 3 and list(marks) == marks.frames()  # listed once, kept
    assert mf.dirty_pages() == [frames[0]]


def test_touched_frames_are_taken_frozen_and_ordered_after():
    mf = MemoryFile()
    frames = [mf.alloc() for _ in range(4)]
    mf.take_dirty(record=True)
    for f in (frames[2], frames[0], frames[2], frames[3]):
        mf.read(f)
    recent = mf.take_recent()
    mf.read(frames[1])  # after the take: not in it, and nothing is recorded any more
    assert mm.touched_order(recent) == [frames[3], frames[2], frames[0]]
    assert mf.take_touched() == [] and mm.touched_order(None) == []


@given(
    st.sets(st.integers(0, 120), max_size=60),
    st.lists(st.tuples(st.integers(0, 130), st.integers(1, 20)), max_size=6),
    st.booleans(),
)
def test_taken_marks_held_by_are_those_the_map_still_holds(
    dirty: set[int], held: list[tuple[int, int]], listed_first: bool
) -> None:
    """``held_by`` (run by run) gives what ``RunMap.held`` gives frame by frame."""
    mf = MemoryFile()
    for f in dirty:
        mf._mark(f)
    refs = RunMap()
    for first, n in held:
        refs.assign(first, n, 1)
    marks = mf.take_dirty_marks()
    if listed_first:  # a dump that wrote the pages listed them already
        marks.frames()
    assert marks.held_by(refs) == list(refs.held(sorted(dirty)))
