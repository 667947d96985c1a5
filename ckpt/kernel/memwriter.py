"""``memory:N@RATE``: a thread of the memory server that rewrites RATE bytes a second.

Post-copy migration needs a sandbox that dirties its memory faster than a link can
send it.  ``PageWriter`` is the program of a ``memwriter`` thread in the ``memory:N``
server: each time the step loop runs it, it writes the pages owed for the kernel time
passed since its last step, whole 4 KiB pages chosen at random from the server's
mapping, through the task's memory (``MemoryManager.write_pages``, ``write`` for each),
so they are copied on write and marked dirty as any program's writes are.

Paced by the kernel's clock, which the sandbox advances in real time: after a freeze
(a checkpoint, a restore) the clock jumps, and at most ``CATCHUP_NS`` of writes are
owed.  A step writes at most ``BATCH_PAGES`` (about a millisecond of Python), and the
writer asks to run every ``pace_ns()`` (the time ``PERIOD_PAGES`` take at its rate), so
a host that honours ``Kernel.pace_ns`` serves requests between batches.

Its state (seed, rate, batches and pages written, the time accounted and the bytes
owed) is program state, saved with the kernel, so writing goes on after a restore
exactly where it stopped.  Batch ``g`` draws its pages and their contents from a
``random.Random`` seeded with ``(seed, g)``; each page is stamped with its page number
and the writer's count of pages written, so a lost or repeated write changes the digest.
Contents are slices of a text corpus and of noise (two to one, as ``memfill``'s
non-zero pages), so written pages compress as the fill's do.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from ckpt import state
from ckpt.errors import KernelError
from ckpt.kernel import memfill
from ckpt.kernel.kernel import Kernel
from ckpt.kernel.task import Program, Task

PAGE = 4096
NS = 1_000_000_000
PAGE_UNITS = PAGE * NS  # one page owed, in bytes x ns / s (rate x elapsed ns)
RATE_MAX = 16 << 30  # bytes a second: far more than Python can write
CATCHUP_NS = 100_000_000  # at most this much elapsed time is owed at once
BATCH_PAGES = 256  # at most this many pages a step (about 2 ms at ~8 us a page)
PERIOD_PAGES = 128  # a step is due when about this many pages are owed
MIN_PERIOD_NS = 2_000_000
MAX_PERIOD_NS = 50_000_000
TEXT_BYTES = 1 << 20  # measured: zstd -1 shrinks these pages 4x, the fill's text 3.3x
NOISE_BYTES = 4 << 20
NOISE_EVERY = 3  # one page in three is noise: the fill's non-zero mix (1.9x overall)
# Heads every page written: its page number in the mapping and the writer's count of
# pages written before it (unlike memfill's stamp, which is 16 hex digits).
STAMP = b"page%010x write%012x\n"
STAMP_BYTES = len(STAMP % (0, 0))
_RATE = re.compile(r"([0-9]{1,12})([KkMmGg]?)")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
RATE_FORM = (
    "RATE is bytes a second: a whole number, optionally with K, M or G "
    f"(KiB, MiB, GiB), from 1 to {RATE_MAX >> 30}G, as in memory:256@200M"
)


def parse_rate(text: str) -> int:
    """Bytes a second from ``text`` (``200M``, ``64k``, ``1G``, ``4096``)."""
    m = _RATE.fullmatch(text)
    rate = int(m[1]) * _UNITS[m[2].lower()] if m else 0
    if not 1 <= rate <= RATE_MAX:
        raise KernelError(f"bad RATE {text!r}: {RATE_FORM}")
    return rate


def format_rate(rate: int) -> str:
    """The shortest spelling ``parse_rate`` reads back as ``rate``."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if rate % unit == 0:
            return f"{rate // unit}{suffix}"
    return str(rate)


@state.savable
@dataclass(eq=False)
class PageWriter(Program):
    """Rewrites ``rate`` bytes a second of the ``npages`` pages at ``addr``."""

    addr: int = 0
    npages: int = 0
    rate: int = 0
    seed: int = 0
    generation: int = 0  # batches written: batch g draws from Random((seed, g))
    written: int = 0  # pages written
    last_ns: int = 0  # the kernel time written up to
    owed: int = 0  # bytes x ns / s not written yet (PAGE_UNITS a page)
    # The corpus and noise the pages are cut from: built from ``seed`` on first use.
    _pools: tuple[bytes, bytes] | None = state.field(nosave=True, default=None)

    def pace_ns(self) -> int:
        """How often to run: the time ``PERIOD_PAGES`` take at ``rate``, bounded."""
        period = PERIOD_PAGES * PAGE_UNITS // max(1, self.rate)
        return max(MIN_PERIOD_NS, min(MAX_PERIOD_NS, period))

    def step(self, kernel: Kernel, task: Task) -> None:
        now = kernel.now
        elapsed, self.last_ns = max(0, now - self.last_ns), now
        cap = max(self.rate * CATCHUP_NS, 2 * PAGE_UNITS)
        self.owed = min(self.owed + self.rate * elapsed, cap)
        n = min(self.owed // PAGE_UNITS, BATCH_PAGES)
        if n:
            self.write_batch(kernel, task, n)
            self.owed -= n * PAGE_UNITS
        self.wake_ns = now + self.pace_ns()

    def write_batch(self, kernel: Kernel, task: Task, n: int) -> None:
        """Write ``n`` pages: batch ``generation``'s, through the task's memory."""
        text, noise = self.pools()
        tv, nv = memoryview(text), memoryview(noise)
        tlimit, nlimit = len(text) - PAGE, len(noise) - PAGE
        bits = random.Random((self.seed << 64) | self.generation).getrandbits
        base, npages, done = self.addr, self.npages, self.written
        join, writes = b"".join, []
        for i in range(n):
            r = bits(96)
            page = (r & 0xFFFF_FFFF) % npages
            at = r >> 32 & 0xFFFF_FFFF
            if (r >> 64) % NOISE_EVERY:
                at = at % tlimit + STAMP_BYTES
                body = tv[at : at + PAGE - STAMP_BYTES]
            else:
                at = at % nlimit + STAMP_BYTES
                body = nv[at : at + PAGE - STAMP_BYTES]
            # one copy: the page is ``bytes``, which the memory file keeps as it is
            writes.append((base + page * PAGE, join((STAMP % (page, done + i), body))))
        mm = task.tg.mm
        assert mm is not None
        mm.write_pages(writes)  # as the task's writes: copy-on-write, marked dirty
        self.written = done + n
        self.generation += 1

    def pools(self) -> tuple[bytes, bytes]:
        """The text corpus and the noise pages are cut from (~0.1 s to build once)."""
        if self._pools is None:
            rng = random.Random(self.seed)
            self._pools = (memfill.corpus(rng, TEXT_BYTES), rng.randbytes(NOISE_BYTES))
        return self._pools


def writer_of(task: Task) -> PageWriter | None:
    """The ``PageWriter`` among ``task``'s threads, if its group has one."""
    for thread in task.tg.tasks:
        if isinstance(thread.program, PageWriter):
            return thread.program
    return None
