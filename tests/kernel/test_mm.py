"""Memory: mappings of every kind, copy-on-write after fork, mprotect, the page file."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.errors import KernelError
from ckpt.kernel import MemoryFault, mm
from ckpt.kernel.mm import PROT_READ, PROT_WRITE, MapKind, MemoryFile
from ckpt.kernel.runs import RunMap
from ckpt.kernel.vfs import O_CREAT, O_RDONLY, O_RDWR

from .conftest import MemoryPages, blank_kernel, checkpoint, open_rw, resume_same_instant

RW = PROT_READ | PROT_WRITE


def test_anonymous_private_memory_is_copied_on_write_after_fork():
    k, init = blank_kernel()
    addr = k.mmap(init, 8192)
    k.mem_write(init, addr, b"parent")
    child = k.fork(init)
    pte = init.tg.mm.ptes[addr // 4096]
    assert child.tg.mm.ptes[addr // 4096] == pte and k.memory_file.refs[pte] == 2
    k.mem_write(child, addr, b"child!")
    assert k.mem_read(init, addr, 6) == b"parent"
    assert k.mem_read(child, addr, 6) == b"child!"
    assert k.memory_file.refs[pte] == 1


def test_shared_anonymous_memory_is_shared_after_fork():
    k, init = blank_kernel()
    addr = k.mmap(init, 4096 * 4, RW, MapKind.ANON_SHARED)
    child = k.fork(init)
    k.mem_write(child, addr + 4096 * 3, b"seen by both")  # a page nobody touched before
    assert k.mem_read(init, addr + 4096 * 3, 12) == b"seen by both"


def test_file_mappings_private_and_shared():
    k, init = blank_kernel()
    fd = open_rw(k, init, "/tmp/mapped")
    k.write(init, fd, b"A" * 5000)
    shared = k.mmap(init, 8192, RW, MapKind.FILE_SHARED, fd=fd)
    private = k.mmap(init, 8192, RW, MapKind.FILE_PRIVATE, fd=fd)
    k.mem_write(init, shared, b"S")
    assert k.mem_read(init, private, 2) == b"SA"  # private sees the file until it writes
    k.mem_write(init, private + 1, b"P")
    k.lseek(init, fd, 0)
    assert k.read(init, fd, 3) == b"SAA"  # the private write never reached the file
    assert k.mem_read(init, private, 3) == b"SPA"


def test_read_only_file_cannot_be_mapped_shared_writable():
    k, init = blank_kernel()
    fd = k.open(init, "/etc/hostname", O_RDONLY)
    with pytest.raises(Exception, match="EACCES"):
        k.mmap(init, 4096, RW, MapKind.FILE_SHARED, fd=fd)


def test_mprotect_splits_and_merges_vmas_and_faults_on_violation():
    k, init = blank_kernel()
    addr = k.mmap(init, 4096 * 3)
    mm = init.tg.mm
    before = len(mm.vmas)
    k.mprotect(init, addr + 4096, 4096, PROT_READ)
    assert len(mm.vmas) == before + 2
    with pytest.raises(MemoryFault):
        k.mem_write(init, addr + 4096, b"x")
    k.mem_write(init, addr, b"ok")
    k.mprotect(init, addr + 4096, 4096, RW)
    assert len(mm.vmas) == before
    with pytest.raises(MemoryFault):
        k.mem_read(init, 0x10, 1)


def test_munmap_releases_frames():
    k, init = blank_kernel()
    addr = k.mmap(init, 4096 * 4)
    for i in range(4):
        k.mem_write(init, addr + i * 4096, b"z")
    frames = len(k.memory_file.refs)
    k.munmap(init, addr + 4096, 4096 * 2)
    assert len(k.memory_file.refs) == frames - 2
    with pytest.raises(MemoryFault):
        k.mem_read(init, addr + 4096, 1)
    assert k.mem_read(init, addr + 3 * 4096, 1) == b"z"


def test_mappings_cow_pages_and_protections_survive_restore(engine):
    k, init = blank_kernel()
    anon = k.mmap(init, 4096 * 2)
    k.mem_write(init, anon, b"cow page")
    shared = k.mmap(init, 4096, RW, MapKind.ANON_SHARED)
    k.mem_write(init, shared, b"shm")
    fd = open_rw(k, init, "/tmp/m")
    k.write(init, fd, b"F" * 100)
    fmap = k.mmap(init, 4096, RW, MapKind.FILE_SHARED, fd=fd)
    ro = k.mmap(init, 4096, PROT_READ)
    child = k.fork(init)
    rk, _ = checkpoint(k, engine)
    resume_same_instant(rk)
    ri, rc = rk.task(init.tid), rk.task(child.tid)
    vpn = anon // 4096
    assert ri.tg.mm.ptes[vpn] == rc.tg.mm.ptes[vpn]  # still shared copy-on-write
    rk.mem_write(rc, anon, b"CHILD")
    assert rk.mem_read(ri, anon, 8) == b"cow page" and rk.mem_read(rc, anon, 8) == b"CHILDage"
    rk.mem_write(rc, shared, b"SHM")
    assert rk.mem_read(ri, shared, 3) == b"SHM"
    rk.mem_write(ri, fmap, b"mapped")
    rk.lseek(ri, fd, 0)
    assert rk.read(ri, fd, 8) == b"mappedFF"
    with pytest.raises(MemoryFault):
        rk.mem_write(ri, ro, b"x")


def test_restore_pages_is_lazy_and_reads_each_page_once():
    k, init = blank_kernel()
    addr = k.mmap(init, 4096 * 3)
    k.mem_write(init, addr, b"one")
    k.mem_write(init, addr + 8192, b"three")
    rk, pages = checkpoint(k, "typed")
    pages.reads.clear()
    rk.memory_file.restore_pages(pages)
    assert pages.reads == []
    ri = rk.task(init.tid)
    assert rk.mem_read(ri, addr + 8192, 5) == b"three"
    assert rk.mem_read(ri, addr + 8192, 5) == b"three"
    assert pages.reads == [ri.tg.mm.ptes[(addr + 8192) // 4096]]
    fetched = rk.memory_file.materialize()
    assert fetched == len(k.memory_file.refs) - 1 and rk.memory_file.unfetched == 0


def test_a_restored_frame_freed_unread_is_no_longer_fetched_when_reused():
    """A frame freed before it was fetched leaves the unfetched ones: reused by
    ``alloc``, it is a new zero frame, not the page file's old contents."""
    mf = MemoryFile()
    frames = [mf.alloc() for _ in range(3)]
    for f in frames:
        mf.write(f, 0, b"old %d" % f)
    pages = MemoryPages(dict(mf.pages()))
    mf.restore_pages(pages)
    assert mf.unfetched == 3
    mf.decref(frames[1])
    assert mf.unfetched == 2
    assert mf.alloc() == frames[1] and mf.read(frames[1]) == bytes(4096)
    assert mf.read(frames[2])[:5] == b"old 2" and pages.reads == [frames[2]]


def test_pages_yields_every_frame_ascending_with_zero_pages():
    k, init = blank_kernel()
    addr = k.mmap(init, 4096 * 2)
    k.mem_write(init, addr, bytes(10))  # touched but zero
    pages = list(k.memory_file.pages())
    assert [i for i, _ in pages] == sorted(k.memory_file.refs)
    assert all(len(data) == 4096 for _, data in pages)
    assert any(data == bytes(4096) for _, data in pages)


def test_restore_pages_rejects_a_page_file_for_another_kernel():
    k, _ = blank_kernel()
    with pytest.raises(KernelError):
        k.memory_file.restore_pages(MemoryPages({10**6: bytes(4096)}))


def test_short_page_from_a_corrupt_page_file_is_an_error():
    k, init = blank_kernel()
    addr = k.mmap(init, 4096)
    k.mem_write(init, addr, b"data")
    pages = dict(k.memory_file.pages())
    frame = init.tg.mm.ptes[addr // 4096]
    pages[frame] = b"short"
    k.memory_file.restore_pages(MemoryPages(pages))
    with pytest.raises(KernelError):
        k.mem_read(init, addr, 4)


def test_fork_shares_file_mapping_counts_and_exit_releases_them():
    k, init = blank_kernel()
    fd = k.open(init, "/tmp/x", O_RDWR | O_CREAT)
    k.write(init, fd, b"x")
    k.mmap(init, 4096, PROT_READ, MapKind.FILE_PRIVATE, fd=fd)
    inode = k.vfs.lookup("/tmp/x").inode
    child = k.fork(init)
    count = inode.open_count
    k.exit(child, 0)
    # The child's mapping goes; its fd shared the parent's description, which stays.
    assert inode.open_count == count - 1
    k.exit(init, 0)
    assert inode.open_count == 0


# -- which allocated frames a page file records (restore_pages) -----------------------


@st.composite
def _runs_and_frames(draw: st.DrawFn) -> tuple[list[tuple[int, int]], set[int]]:
    """Ascending, disjoint (first, count) runs (adjacent or with gaps) and a frame set
    that may fall inside, between or outside them."""
    runs, at = [], draw(st.integers(0, 50))
    for _ in range(draw(st.integers(0, 12))):
        at += draw(st.sampled_from([0, 0, 0, 1, 7]))  # mostly adjacent, as checkpoints write
        n = draw(st.integers(1, 20))
        runs.append((at, n))
        at += n
    frames = draw(st.sets(st.integers(0, at + 30), max_size=80))
    if runs and draw(st.booleans()):  # often exactly the recorded frames
        frames = {f for first, n in runs for f in range(first, first + n)}
    return runs, frames


@given(_runs_and_frames())
def test_recorded_frames_are_the_frames_the_runs_cover(case: tuple) -> None:
    runs, frames = case
    expected = {f for f in frames if any(first <= f < first + n for first, n in runs)}
    refs = RunMap()
    for f in frames:
        refs[f] = 1
    recorded = mm._recorded_frames(refs, iter(runs))
    assert set(recorded) == expected and len(recorded) == len(expected)
