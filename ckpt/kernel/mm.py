"""Memory: the MemoryFile of 4 KiB frames, and per-process MemoryManagers of VMAs.

The MemoryFile is the sandbox's memory: frames with reference counts.  Its *layout*
(which frames exist, who references them) is in the object graph; its *contents* are
not: they live in a host-side buffer marked ``nosave`` and travel through the page file
(``pages()`` on checkpoint, ``restore_pages()`` on restore, read lazily on demand).

A MemoryManager maps virtual pages of one process.  Private mappings (anonymous or
file-backed) have page-table entries (``ptes``: virtual page -> frame); a fork shares
those frames and the first write by either side copies the page (copy-on-write).
Shared mappings have no ptes: their pages are the backing inode's pages (an anonymous
shared mapping gets an unlinked shmem inode, as Linux does), so writes are visible to
every process mapping them.

Dirty tracking (the soft-dirty analogue) is per *frame*, because the page file is indexed
by frame and everything else (page tables, mappings, reference counts) is kernel state
that every dump saves whole.  A frame is dirty once it is allocated (a new zero frame, a
reused free one, the copy in copy-on-write) or written, until ``clear_dirty`` or
``take_dirty``.  A fork marks nothing: it copies page tables and changes no frame; the
first write after it, by either side, allocates the copy and so marks it.  The dirty
bytes are ``nosave``: a restored kernel starts clean, its memory being the image's.
"""

from __future__ import annotations

import collections
import enum
import errno
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ckpt import state
from ckpt.errors import KernelError, SyscallError
from ckpt.kernel.framebits import FrameBits, intersect_runs, runs_of_frames
from ckpt.kernel.runs import RunMap
from ckpt.kernel.vfs import PAGE_SIZE, Inode

PROT_NONE = 0
PROT_READ = 1
PROT_WRITE = 2
PROT_EXEC = 4

ZERO_PAGE = bytes(PAGE_SIZE)
RECENT = 16384  # frames a post-copy source remembers touching last (64 MiB)
MMAP_TOP = 0x7F00_0000_0000  # mmap allocates downwards from here
STACK_TOP = 0x7FFF_F000_0000


class MemoryFault(SyscallError):
    """An access to an unmapped address or against a mapping's protection (SIGSEGV)."""

    def __init__(self, addr: int, why: str) -> None:
        super().__init__(errno.EFAULT, f"fault at {addr:#x}: {why}")
        self.addr = addr


class PageReader(Protocol):
    """What ``restore_pages`` needs from the statefile's page reader."""

    indices: Any

    def read_page(self, index: int) -> bytes: ...


def _recorded_frames(frames: Any, ranges: Iterator[tuple[int, int]]) -> FrameBits:
    """The ``frames`` (a RunMap) that the page file's ascending ``(first, count)`` runs
    record, as a FrameBits.

    Worked out over runs, never frame by frame: the page file's runs joined into spans
    (a checkpoint's stored and zero runs alternate, so usually one span holds them all),
    intersected with the map's runs, each result one slice store.  A set of every frame
    cost ~135 ms per GiB while the restored sandbox was down."""
    spans: list[list[int]] = []
    for first, n in ranges:
        if spans and spans[-1][1] == first:
            spans[-1][1] = first + n
        else:
            spans.append([first, first + n])
    held = zip(frames.starts, frames.lens, strict=True)
    return FrameBits(intersect_runs(((lo, hi - lo) for lo, hi in spans), held))


def _marked(marks: bytearray) -> list[int]:
    """The indices of the 1s in ``marks``, ascending.

    A few marks (a final dump after pre-copy) are found by ``find``, which skips the
    zeros at memchr speed: 21 of 262,144 in 0.01 ms, where ``compress`` over every
    index takes 12 ms.  Many marks are ``compress``'s (``find`` is ~150 ns a mark)."""
    if marks.count(1) * 32 > len(marks):
        return list(itertools.compress(range(len(marks)), marks))
    out: list[int] = []
    find = marks.find
    i = find(1)
    while i >= 0:
        out.append(i)
        i = find(1, i + 1)
    return out


class TakenDirty:
    """The dirty marks a dump took: counted at once (C speed), listed on first use.

    Listing 262,144 marks costs ~20 ms; a post-copy freeze needs only the count while
    the kernel is frozen (its image holds no pages), so the list is made after the
    image has gone.  The marks are the ones taken: later writes do not change them."""

    __slots__ = ("_count", "_frames", "_marks")

    def __init__(self, marks: bytearray) -> None:
        self._marks: bytearray | None = marks
        self._count = marks.count(1)
        self._frames: list[int] | None = None

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        return iter(self.frames())

    def frames(self) -> list[int]:
        """The frames taken, ascending."""
        if self._frames is None:
            assert self._marks is not None
            self._frames, self._marks = _marked(self._marks), None
        return self._frames

    def held_by(self, refs: RunMap) -> list[int]:
        """Those of the frames taken that ``refs`` still holds, ascending:
        ``list(refs.held(self))`` run by run at C speed (``compress`` over each run's
        marks), not a Python step per frame (45 ms for 262,144 frames)."""
        marks = self._marks
        if marks is None:  # listed already
            return list(refs.held(self._frames or ()))
        out: list[int] = []
        size = len(marks)
        for start, n in zip(refs.starts, refs.lens, strict=True):
            end = min(start + n, size)
            if start < end:
                out.extend(itertools.compress(range(start, end), marks[start:end]))
        return out


def touched_order(recent: Iterable[int] | None) -> list[int]:
    """Frames touched (oldest first, repeats allowed) as the most recent first, each
    once: REAP's working set, from ``MemoryFile.take_recent``."""
    if not recent:
        return []
    return list(dict.fromkeys(reversed(recent)))  # type: ignore[call-overload]


class MapKind(enum.Enum):
    ANON_PRIVATE = 0
    ANON_SHARED = 1
    FILE_PRIVATE = 2
    FILE_SHARED = 3

    @property
    def shared(self) -> bool:
        return self in (MapKind.ANON_SHARED, MapKind.FILE_SHARED)


@state.savable
@dataclass(eq=False)
class MemoryFile:
    """Frames of 4 KiB with reference counts; contents kept host-side, not in the graph."""

    # frame -> reference count, in runs of frames sharing a count (step 0)
    refs: RunMap = field(default_factory=RunMap)
    next_frame: int = 0
    # Freed frames, a stack of ascending runs ``(first, count)``: the next ``alloc``
    # takes the top run's last frame.  Runs, not frames, so unmapping a large region
    # adds one entry, not one per page.
    free_runs: list[tuple[int, int]] = field(default_factory=list)
    # Host-side contents: frame -> data.  Absent frames are zero (or not fetched yet).
    # A frame fetched from a restored page file is a read-only view into the loaded run
    # (no copy: restored memory is held once); its first write makes it a bytearray.
    # A whole page written as ``bytes`` is kept as that object (immutable, so no copy).
    _data: dict[int, bytearray | memoryview] = state.field(nosave=True, default_factory=dict)  # noqa: RUF009
    # After a restore: where unfetched frames come from, and which are still unfetched
    # (a byte per frame, not a set: built from runs at C speed while the sandbox is down).
    _source: Any = state.field(nosave=True, default=None)  # noqa: RUF009
    _unfetched: FrameBits = state.field(nosave=True, default_factory=FrameBits)  # noqa: RUF009
    # Dirty frames since the last clear: one byte per frame (0 or 1), grown on demand.
    # A bytearray, not a set: 256 KiB per GiB of frames whatever is dirty, and marking
    # a frame is one store, with no hashing and no allocation on the write path.
    _dirty: bytearray = state.field(nosave=True, default_factory=bytearray)  # noqa: RUF009
    # Once a pre-dump round has run: the frames read or written since the last one, in
    # order, the newest ``RECENT`` kept (a post-copy migration pushes them first).
    _recent: Any = state.field(nosave=True, default=None)  # noqa: RUF009

    def alloc(self) -> int:
        """A new zero frame with one reference (dirty: its contents are new)."""
        frame = self._pop_free() if self.free_runs else self._bump()
        self.refs[frame] = 1
        self._mark(frame)
        return frame

    def _pop_free(self) -> int:
        free = self.free_runs
        first, n = free[-1]
        if n == 1:
            free.pop()
        else:
            free[-1] = (first, n - 1)
        return first + n - 1

    def _push_free(self, first: int, n: int) -> None:
        free = self.free_runs
        if free and free[-1][0] + free[-1][1] == first:
            top, count = free[-1]
            free[-1] = (top, count + n)
        else:
            free.append((first, n))

    def _bump(self) -> int:
        frame = self.next_frame
        self.next_frame += 1
        return frame

    def incref(self, frame: int, n: int = 1) -> None:
        """One more reference to each of the frames ``frame .. frame + n - 1``."""
        self._held(frame, n)
        self.refs.add(frame, n, 1)

    def decref(self, frame: int, n: int = 1) -> None:
        """One reference fewer to each of ``frame .. frame + n - 1``; a frame left with
        none is freed (its contents dropped, its number reused by ``alloc``)."""
        self._held(frame, n)
        refs = self.refs
        freed = [(s, length) for s, length, count in refs.runs_in(frame, n) if count == 1]
        refs.add(frame, n, -1)
        data, unfetched, dirty = self._data, self._unfetched, self._dirty
        for first, length in freed:
            refs.pop_range(first, length)
            for f in range(first, first + length):
                data.pop(f, None)
            if unfetched:
                unfetched.discard_range(first, length)
            self._push_free(first, length)
            if first < len(dirty):  # dirty frames are allocated ones; alloc marks it again
                end = min(first + length, len(dirty))
                dirty[first:end] = bytes(end - first)

    def _held(self, frame: int, n: int) -> None:
        held = sum(length for _, length, _ in self.refs.runs_in(frame, n))
        if held != n:
            raise KernelError(f"memory file frames {frame}..{frame + n - 1} are not all allocated")

    def shared(self, frame: int) -> bool:
        return self.refs[frame] > 1

    def read(self, frame: int) -> bytes:
        """The frame's 4096 bytes (fetched from the restored page file if needed)."""
        if frame not in self.refs:
            raise KernelError(f"memory file frame {frame} is not allocated")
        unfetched = self._unfetched.bits  # ``in`` inlined: a method call costs ~150 ns
        if 0 <= frame < len(unfetched) and unfetched[frame]:
            self._fetch(frame)
        if self._recent is not None:
            self._recent.append(frame)
        data = self._data.get(frame)
        return ZERO_PAGE if data is None else bytes(data)

    def write(self, frame: int, offset: int, data: Any) -> None:
        whole = not offset and type(data) is bytes and len(data) == PAGE_SIZE
        unfetched = self._unfetched.bits  # as in ``read``
        if 0 <= frame < len(unfetched) and unfetched[frame]:
            if whole:  # all of it replaced: what the page file holds is not needed
                self._unneeded(frame)
            else:
                self._fetch(frame)
        if self._recent is not None:
            self._recent.append(frame)
        if whole:  # kept, not copied
            self._data[frame] = data  # immutable; a later partial write copies it (below)
            try:
                self._dirty[frame] = 1
            except IndexError:
                self._mark(frame)
            return
        page = self._data.get(frame)
        if page is None:
            page = self._data[frame] = bytearray(PAGE_SIZE)
        elif type(page) is not bytearray:
            page = self._data[frame] = bytearray(page)  # first write to a restored page
        page[offset : offset + len(data)] = data
        try:  # marked after the data: see take_dirty
            self._dirty[frame] = 1
        except IndexError:
            self._mark(frame)

    # -- dirty tracking -------------------------------------------------------------------
    def _mark(self, frame: int) -> None:
        dirty = self._dirty
        if frame >= len(dirty):
            dirty.extend(bytes(max(frame + 1 - len(dirty), len(dirty), 4096)))
        dirty[frame] = 1

    def dirty_pages(self) -> list[int]:
        """Frames allocated or written since the last clear, ascending."""
        return _marked(self._dirty)

    def dirty_count(self) -> int:
        return self._dirty.count(1)

    def clear_dirty(self) -> None:
        """Forget what was dirty (what a dump calls once it holds every dirty page)."""
        self._dirty = bytearray(len(self._dirty))

    def take_dirty(self, record: bool = False) -> list[int]:
        """``dirty_pages()`` and ``clear_dirty()`` in one step: what a pre-dump round calls.

        Atomic with respect to the kernel's writers because they never run beside it:
        the sandbox calls the kernel only under its kernel lock or while it is frozen
        (``Host.respond`` and the ticker take the lock; a background page load only
        fills the reader, and frames are fetched by the thread touching them), and
        this must be called under the same lock.  Read the pages under it too, a batch
        at a time so the sandbox serves between batches (a frame may be freed between
        two batches: ``pages(frames)`` skips it); a write after the take marks its frame
        in the new set, so the next round writes it again.
        """
        return self.take_dirty_marks(record).frames()

    def take_dirty_marks(self, record: bool = False) -> TakenDirty:
        """``take_dirty`` with the listing left for later: what a dump calls while the
        kernel is frozen (the marks are swapped out, not copied; see ``TakenDirty``)."""
        taken, self._dirty = self._dirty, bytearray(len(self._dirty))
        self._recent = collections.deque(maxlen=RECENT) if record else None
        return TakenDirty(taken)

    def take_touched(self) -> list[int]:
        """The frames read or written since the last ``take_dirty(record=True)`` (a
        pre-dump round), the most recent first, each once (REAP's working set)."""
        return touched_order(self.take_recent())

    def take_recent(self) -> Any:
        """What ``take_touched`` orders, taken as it is (one swap while frozen, the
        ordering after): the frames touched, oldest first, or None."""
        recent, self._recent = self._recent, None
        return recent

    def mark_dirty(self, frames: Iterable[int]) -> None:
        """Mark ``frames`` dirty again: a dump that took them failed before its image
        was committed, so the next one must write them (under the kernel lock)."""
        for frame in frames:
            self._mark(frame)

    def copy(self, frame: int) -> int:
        """A new frame holding a copy of ``frame`` (the copy in copy-on-write)."""
        new = self.alloc()
        data = self.read(frame)
        if data is not ZERO_PAGE:
            self._data[new] = bytearray(data)
        return new

    def pages(self, frames: Iterable[int] | None = None) -> Iterator[tuple[int, bytes]]:
        """Every allocated frame, ascending, as (index, 4096 bytes); zero frames too.
        ``frames`` (ascending, e.g. ``take_dirty()``) limits it to those still allocated.

        Walks the reference runs beside ``frames`` rather than looking each frame up
        (a bisection each), and reads the contents directly: every frame yielded is
        allocated, so ``read``'s check would be spent on nothing."""
        refs = self.refs
        wanted = refs.keys() if frames is None else refs.held(frames)
        unfetched, get = self._unfetched, self._data.get
        for frame in wanted:
            if unfetched and frame in unfetched:
                self._fetch(frame)
            data = get(frame)
            yield frame, ZERO_PAGE if data is None else bytes(data)

    def restore_pages(self, loaded: PageReader) -> None:
        """Adopt a restored page file; frames are read from it on first touch.

        Works with an eager or a lazy (background-filled) reader: nothing is read here,
        each frame is fetched through ``loaded.read_page`` when first needed, or all of
        them by ``materialize()``.  Frames the page file does not record stay zero.
        """
        self._data.clear()
        ranges = getattr(loaded.indices, "ranges", None)
        unfetched = (
            _recorded_frames(self.refs, ranges())
            if ranges is not None
            else FrameBits(
                runs_of_frames(sorted(set(loaded.indices).intersection(self.refs.keys())))
            )
        )
        if self.refs and not unfetched:
            raise KernelError(
                f"the page file records none of the {len(self.refs)} allocated frames; "
                "was it written for this kernel?"
            )
        self._source = loaded
        self._unfetched = unfetched

    def materialize(self) -> int:
        """Fetch every frame not read yet; returns how many were fetched."""
        todo = list(self._unfetched)  # ascending
        for frame in todo:
            self._fetch(frame)
        self._source = None
        return len(todo)

    def _fetch(self, frame: int) -> None:
        source = self._source
        read = getattr(source, "read_page_view", None) or source.read_page
        data = read(frame)
        if len(data) != PAGE_SIZE:
            raise KernelError(
                f"page file gave {len(data)} bytes for frame {frame}, want {PAGE_SIZE}"
            )
        if data != ZERO_PAGE:
            self._data[frame] = data if isinstance(data, memoryview) else bytearray(data)
        self._unfetched.discard(frame)
        if not self._unfetched:
            self._source = None

    def _unneeded(self, frame: int) -> None:
        """An unfetched frame about to be overwritten whole: never fetched (a post-copy
        page is not asked for across the network only to be replaced), and its source
        told, so it keeps nothing of it (``forget``, where the source has one)."""
        forget = getattr(self._source, "forget", None)
        if forget is not None:
            forget(frame)
        self._unfetched.discard(frame)
        if not self._unfetched:
            self._source = None

    @property
    def unfetched(self) -> int:
        return len(self._unfetched)

    @property
    def loading(self) -> bool:
        """Whether a background page load is still reading the page file."""
        source = self._source
        return source is not None and not getattr(source, "done", True)

    def usage(self) -> tuple[int, int, int]:
        """(allocated frames, frames holding non-zero data, frames not fetched yet)."""
        nonzero = sum(1 for data in self._data.values() if data != ZERO_PAGE)
        return len(self.refs), nonzero, len(self._unfetched)


@state.savable
@dataclass(eq=False, slots=True)
class VMA:
    """A mapping ``[start, end)``: protection, kind, and the backing inode if any."""

    start: int
    end: int
    prot: int
    kind: MapKind
    inode: Inode | None = None
    offset: int = 0  # file offset of ``start``
    name: str = ""
    max_prot: int = PROT_READ | PROT_WRITE | PROT_EXEC
    grows_down: bool = False
    dont_fork: bool = False
    mlock: int = 0
    numa_policy: int = 0
    numa_nodemask: int = 0

    def clone(self) -> VMA:
        return VMA(
            self.start,
            self.end,
            self.prot,
            self.kind,
            self.inode,
            self.offset,
            self.name,
            self.max_prot,
            self.grows_down,
            self.dont_fork,
            self.mlock,
            self.numa_policy,
            self.numa_nodemask,
        )

    def file_page(self, vpn: int) -> int:
        return (self.offset // PAGE_SIZE) + vpn - self.start // PAGE_SIZE

    def same_mapping(self, other: VMA) -> bool:
        """True if ``other`` continues this mapping exactly (so the two can merge)."""
        if (self.end, self.prot, self.kind, self.inode, self.name) != (
            other.start,
            other.prot,
            other.kind,
            other.inode,
            other.name,
        ):
            return False
        return self.inode is None or self.offset + (self.end - self.start) == other.offset


@state.savable
@dataclass(eq=False)
class MemoryManager:
    """One address space: VMAs in address order and the private page table."""

    id: int
    mf: MemoryFile
    vmas: list[VMA] = field(default_factory=list)
    # virtual page -> frame, in runs of pages whose frames follow each other (step 1)
    ptes: RunMap = field(default_factory=lambda: RunMap(1))
    brk_start: int = 0x0060_0000
    brk: int = 0x0060_0000
    mmap_base: int = MMAP_TOP
    users: int = 1
    auxv: list[tuple[int, int]] = field(default_factory=list)
    argv: tuple[int, int] = (0, 0)
    envp: tuple[int, int] = (0, 0)
    executable: Inode | None = None
    dumpability: int = 1
    max_rss_pages: int = 0

    # -- mappings ---------------------------------------------------------------------
    def mmap(
        self,
        length: int,
        prot: int,
        kind: MapKind = MapKind.ANON_PRIVATE,
        *,
        inode: Inode | None = None,
        offset: int = 0,
        addr: int | None = None,
        name: str = "",
        shmem: Inode | None = None,
    ) -> int:
        """Map ``length`` bytes; returns the address.  ``addr`` means MAP_FIXED."""
        if length <= 0 or offset % PAGE_SIZE:
            raise SyscallError(errno.EINVAL, f"mmap of {length} bytes at file offset {offset}")
        length = _round_up(length)
        if kind in (MapKind.FILE_PRIVATE, MapKind.FILE_SHARED) and inode is None:
            raise SyscallError(errno.EBADF, "file mapping without a file")
        if kind is MapKind.ANON_SHARED:
            if shmem is None:
                raise KernelError("an anonymous shared mapping needs its shmem inode")
            inode, offset = shmem, 0
        if addr is None:
            addr = self._find_gap(length)
        elif addr % PAGE_SIZE:
            raise SyscallError(errno.EINVAL, f"unaligned MAP_FIXED address {addr:#x}")
        else:
            self.munmap(addr, length)
        vma = VMA(addr, addr + length, prot, kind, inode, offset, name)
        if inode is not None:
            inode.open_count += 1
        self.vmas.append(vma)
        self.vmas.sort(key=lambda v: v.start)
        return addr

    def _find_gap(self, length: int) -> int:
        top = self.mmap_base
        for vma in reversed(self.vmas):
            if vma.start >= top:
                continue
            if vma.end <= top - length:
                break
            top = vma.start
        self.mmap_base = top - length
        return top - length

    def munmap(self, addr: int, length: int) -> None:
        end = addr + _round_up(length)
        for vma in self._carve(addr, end):
            self.vmas.remove(vma)
            self._drop_ptes(vma.start, vma.end)
            if vma.inode is not None:
                vma.inode.open_count -= 1
                vma.inode.release_if_unused(self.mf)

    def mprotect(self, addr: int, length: int, prot: int) -> None:
        end = addr + _round_up(length)
        if not self._covered(addr, end):
            raise SyscallError(errno.ENOMEM, f"[{addr:#x}, {end:#x}) is not fully mapped")
        for vma in self._carve(addr, end):
            vma.prot = prot
        self._merge()

    def _covered(self, start: int, end: int) -> bool:
        cursor = start
        for vma in self.vmas:
            if vma.end <= cursor:
                continue
            if vma.start > cursor:
                return False
            cursor = vma.end
            if cursor >= end:
                return True
        return cursor >= end

    def _carve(self, start: int, end: int) -> list[VMA]:
        """Split VMAs at ``start`` and ``end``; return the ones inside."""
        inside: list[VMA] = []
        for vma in list(self.vmas):
            if vma.end <= start or vma.start >= end:
                continue
            if vma.start < start:
                vma = self._split(vma, start)
            if vma.end > end:
                self._split(vma, end)
            inside.append(vma)
        return inside

    def _split(self, vma: VMA, at: int) -> VMA:
        tail = VMA(
            at, vma.end, vma.prot, vma.kind, vma.inode, vma.offset + (at - vma.start), vma.name
        )
        if vma.inode is not None:
            vma.inode.open_count += 1
        vma.end = at
        self.vmas.insert(self.vmas.index(vma) + 1, tail)
        return tail

    def _merge(self) -> None:
        merged: list[VMA] = []
        for vma in self.vmas:
            if merged and merged[-1].same_mapping(vma):
                merged[-1].end = vma.end
                if vma.inode is not None:
                    vma.inode.open_count -= 1
            else:
                merged.append(vma)
        self.vmas = merged

    def _drop_ptes(self, start: int, end: int) -> None:
        first, last = start // PAGE_SIZE, end // PAGE_SIZE
        for _, n, frame in self.ptes.pop_range(first, last - first):
            self.mf.decref(frame, n)

    def find_vma(self, addr: int) -> VMA | None:
        for vma in self.vmas:
            if vma.start <= addr < vma.end:
                return vma
        return None

    def set_brk(self, new: int) -> int:
        """Grow or shrink the heap (the "[heap]" anonymous mapping)."""
        new = _round_up(new)
        if new < self.brk_start:
            return self.brk
        if new > self.brk:
            self.mmap(new - self.brk, PROT_READ | PROT_WRITE, addr=self.brk, name="[heap]")
            self._merge()
        elif new < self.brk:
            self.munmap(new, self.brk - new)
        self.brk = new
        return self.brk

    # -- access -----------------------------------------------------------------------
    def read(self, addr: int, n: int) -> bytes:
        out = bytearray()
        for vma, vpn, skip, take in self._pages(addr, n, PROT_READ):
            out += self._frame_data(vma, vpn)[skip : skip + take]
        return bytes(out)

    def write(self, addr: int, data: bytes) -> None:
        if type(data) is bytes and len(data) == PAGE_SIZE and not addr % PAGE_SIZE:
            vma = self.find_vma(addr)  # one whole page: no walk, and the frame keeps ``data``
            if vma is not None and vma.prot & PROT_WRITE:
                self.mf.write(self._writable_frame(vma, addr // PAGE_SIZE), 0, data)
                return
        view = memoryview(data)
        for vma, vpn, skip, take in self._pages(addr, len(data), PROT_WRITE):
            frame = self._writable_frame(vma, vpn)
            self.mf.write(frame, skip, view[:take])
            view = view[take:]

    def write_pages(self, writes: Iterable[tuple[int, bytes]]) -> None:
        """``write`` for each ``(address, data)`` in turn, for many whole pages (the
        memory writer's): a page-aligned 4 KiB ``bytes`` in the mapping of the one before
        skips the mapping lookup; anything else goes through ``write`` as it is."""
        vma: VMA | None = None
        put, frame_of = self.mf.write, self._writable_frame
        for addr, data in writes:
            if (
                vma is not None
                and vma.start <= addr < vma.end
                and not addr % PAGE_SIZE
                and type(data) is bytes
                and len(data) == PAGE_SIZE
            ):
                put(frame_of(vma, addr // PAGE_SIZE), 0, data)
                continue
            self.write(addr, data)
            vma = self.find_vma(addr)
            if vma is not None and not vma.prot & PROT_WRITE:
                vma = None

    def _pages(self, addr: int, n: int, need: int) -> Iterator[tuple[VMA, int, int, int]]:
        pos, end = addr, addr + n
        while pos < end:
            vma = self.find_vma(pos)
            if vma is None:
                raise MemoryFault(pos, "no mapping")
            if not vma.prot & need:
                raise MemoryFault(pos, f"mapping {vma.name or 'anon'} lacks permission")
            vpn, skip = divmod(pos, PAGE_SIZE)
            take = min(PAGE_SIZE - skip, end - pos)
            yield vma, vpn, skip, take
            pos += take

    def _frame_data(self, vma: VMA, vpn: int) -> bytes:
        if vma.kind.shared:
            assert vma.inode is not None
            frame = vma.inode.pages.get(vma.file_page(vpn))
        else:
            frame = self.ptes.get(vpn)
            if frame is None and vma.inode is not None:
                frame = vma.inode.pages.get(vma.file_page(vpn))
        return ZERO_PAGE if frame is None else self.mf.read(frame)

    def _writable_frame(self, vma: VMA, vpn: int) -> int:
        if vma.kind.shared:
            assert vma.inode is not None
            return vma.inode.page_frame(self.mf, vma.file_page(vpn))
        frame = self.ptes.get(vpn)
        if frame is None:
            source = vma.inode.pages.get(vma.file_page(vpn)) if vma.inode is not None else None
            frame = self.mf.copy(source) if source is not None else self.mf.alloc()
            self.ptes[vpn] = frame
        elif self.mf.shared(frame):
            new = self.mf.copy(frame)  # copy-on-write
            self.mf.decref(frame)
            frame = self.ptes[vpn] = new
        return frame

    def populate(self, addr: int, data: bytes) -> None:
        """Write ``data`` (used by workloads to give a process its resident memory)."""
        self.write(addr, data)

    # -- lifetime ---------------------------------------------------------------------
    def fork(self, new_id: int) -> MemoryManager:
        """A copy sharing every private frame copy-on-write and every shared page."""
        child = MemoryManager(
            new_id,
            self.mf,
            brk_start=self.brk_start,
            brk=self.brk,
            mmap_base=self.mmap_base,
            auxv=list(self.auxv),
            argv=self.argv,
            envp=self.envp,
            executable=self.executable,
            dumpability=self.dumpability,
        )
        for vma in self.vmas:
            if vma.dont_fork:
                continue
            child.vmas.append(vma.clone())
            if vma.inode is not None:
                vma.inode.open_count += 1
        for _, n, frame in self.ptes.runs():
            self.mf.incref(frame, n)
        child.ptes = self.ptes.copy()
        return child

    def release(self) -> None:
        """Drop every mapping (process exit or exec)."""
        for vma in list(self.vmas):
            self.munmap(vma.start, vma.end - vma.start)

    def resident_pages(self) -> int:
        return len(self.ptes)

    def page_digest_items(self) -> Iterator[tuple[VMA, int, int]]:
        """(vma, virtual page, frame) for each populated page, for fingerprints."""
        for vma in self.vmas:
            first, last = vma.start // PAGE_SIZE, vma.end // PAGE_SIZE
            if vma.kind.shared:
                assert vma.inode is not None
                base = vma.file_page(first)
                for fpage, frame in sorted(vma.inode.pages.items()):
                    if base <= fpage < base + (last - first):
                        yield vma, first + fpage - base, frame
            else:
                for vpn, n, frame in self.ptes.runs_in(first, last - first):
                    for i in range(n):
                        yield vma, vpn + i, frame + i


def _round_up(n: int) -> int:
    return -(-n // PAGE_SIZE) * PAGE_SIZE
