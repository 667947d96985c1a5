"""What workload tasks do when the step loop runs them: ``Program`` subclasses.

Programs are savable (they are checkpointed with their task), deterministic, and act
only through the kernel's system calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ckpt import state
from ckpt.errors import SyscallError
from ckpt.kernel.kernel import Kernel, LockCmd
from ckpt.kernel.locks import LockType
from ckpt.kernel.memwriter import writer_of
from ckpt.kernel.task import (
    SIGALRM,
    SIGCHLD,
    SIGHUP,
    Program,
    SigInfo,
    Task,
)

MS = 1_000_000


@state.savable
@dataclass(eq=False)
class NginxMaster(Program):
    """Waits for signals; reaps workers on SIGCHLD, counts reloads on SIGHUP."""

    reloads: int = 0
    reaped: int = 0

    def on_signal(self, kernel: Kernel, task: Task, info: SigInfo) -> None:
        if info.signo == SIGCHLD:
            try:
                while kernel.wait(task) is not None:
                    self.reaped += 1
            except SyscallError:
                pass
        elif info.signo == SIGHUP:
            self.reloads += 1


@state.savable
@dataclass(eq=False)
class NginxWorker(Program):
    """An idle worker: every accept_mutex_delay it takes the accept mutex if it is free."""

    lock_fd: int = -1
    delay_ns: int = 500 * MS
    holds_mutex: bool = False
    attempts: int = 0
    timer_ticks: int = 0

    def step(self, kernel: Kernel, task: Task) -> None:
        if not self.holds_mutex:
            self.attempts += 1
            self.holds_mutex = bool(
                kernel.fcntl_lock(task, self.lock_fd, LockCmd.SETLK, LockType.WRITE)
            )
        self.wake_ns = kernel.now + self.delay_ns

    def on_signal(self, kernel: Kernel, task: Task, info: SigInfo) -> None:
        if info.signo == SIGALRM:
            self.timer_ticks += 1


@state.savable
@dataclass(eq=False)
class LogWriter(Program):
    """Appends a numbered line to ``fd`` every ``period_ns``."""

    fd: int = -1
    period_ns: int = 100 * MS
    lines: int = 0

    def step(self, kernel: Kernel, task: Task) -> None:
        self.lines += 1
        kernel.write(task, self.fd, b"line %d at %d\n" % (self.lines, kernel.now))
        self.wake_ns = kernel.now + self.period_ns


@state.savable
@dataclass(eq=False)
class Spinner(Program):
    """Burns CPU whenever it may run (drives ITIMER_VIRTUAL and ITIMER_PROF)."""

    busy: bool = True


@state.savable
@dataclass(eq=False)
class SignalCounter(Program):
    """Sleeps; remembers the order of the signals its handlers saw."""

    seen: list[int] = state.field(default_factory=list)  # noqa: RUF009

    def on_signal(self, kernel: Kernel, task: Task, info: SigInfo) -> None:
        self.seen.append(info.signo)


@state.savable
@dataclass(eq=False)
class MemoryServer(Program):
    """The ``memory:N`` server: holds ``npages`` dirty anonymous pages at ``addr`` and
    answers ``GET /memory`` with their digest, so a restore can be checked page by page."""

    addr: int = 0
    npages: int = 0

    def http_body(self, kernel: Kernel, task: Task, path: str) -> dict[str, object]:
        body: dict[str, object] = {
            "memory_mib": self.npages * 4096 >> 20,
            "pages_loading": kernel.memory_file.loading,  # before the digest touches any
        }
        writer = writer_of(task)
        if writer is not None:  # memory:N@RATE: what its writer thread has done so far
            body["write_rate"] = writer.rate
            body["pages_written"] = writer.written
        if path.split("?", 1)[0] == "/memory":
            body["memory_sha256"] = memory_digest(kernel, task, self.addr, self.npages)
        return body


KV_MAX_VALUE = 64 * 1024
KV_MIN_SLOT = 64
KV_CLASSES = (KV_MAX_VALUE // KV_MIN_SLOT).bit_length()  # slots of 64 B, 128 B, ... 64 KiB
KV_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")
HttpReply = tuple[int, "dict[str, object] | bytes"]


def kv_slot_class(n: int) -> int:
    """The size class of a value of ``n`` bytes: slots of ``KV_MIN_SLOT << class`` bytes."""
    return max(0, (n - 1) // KV_MIN_SLOT).bit_length()


@state.savable
@dataclass(eq=False)
class KvServer(MemoryServer):
    """The ``kv:N`` server: values live in its ``npages`` pages at ``addr`` (the arena).

    Each value takes a slot of a power-of-two size class (64 B to 64 KiB), from that
    class's free list or else from the never-used space above ``top``; a slot freed by
    an overwrite serves only its own class (no splitting or merging: simple, and enough
    for a load whose value sizes stay alike).  The index (key ->
    (offset, length)) and the free lists are program state, so a checkpoint saves them
    with the kernel and a restore finds every value the index names in the restored
    pages.  A PUT writes the value through the task's memory, then updates the index,
    and only then answers; the sandbox serves requests under its kernel lock and freezes
    under it, so an image holds every acknowledged value or the request was not answered.
    """

    index: dict[str, tuple[int, int]] = field(default_factory=dict)
    free: list[list[int]] = field(default_factory=lambda: [[] for _ in range(KV_CLASSES)])
    top: int = 0

    def http_route(
        self, kernel: Kernel, task: Task, method: str, path: str, body: bytes
    ) -> HttpReply | None:
        path = path.split("?", 1)[0]
        if not path.startswith("/kv/"):
            return None
        key = path[4:]
        if not KV_KEY.fullmatch(key):
            return 400, {"error": "a key is 1-128 characters of A-Z a-z 0-9 _ . -"}
        if method == "GET":
            where = self.index.get(key)
            if where is None:
                return 404, {"error": f"no key {key!r}"}
            return 200, self._read(task, *where)
        if method == "PUT":
            return self._put(task, key, body)
        return 405, {"error": f"{method} /kv/KEY: use GET or PUT"}

    def _put(self, task: Task, key: str, value: bytes) -> HttpReply:
        if len(value) > KV_MAX_VALUE:
            return 413, {"error": f"a value is at most {KV_MAX_VALUE} bytes, not {len(value)}"}
        cls = kv_slot_class(len(value))
        old = self.index.get(key)
        if old is not None and kv_slot_class(old[1]) == cls:
            offset = old[0]  # same size class: rewrite the slot in place
        else:
            offset = self._alloc(cls)
            if offset is None:
                return 507, {"error": f"no room left for {len(value)} bytes; the arena is full"}
        mm = task.tg.mm
        assert mm is not None
        mm.write(self.addr + offset, value)  # through the kernel's memory, as a program's
        self.index[key] = (offset, len(value))
        if old is not None and old[0] != offset:
            self.free[kv_slot_class(old[1])].append(old[0])
        return 200, {"key": key, "bytes": len(value)}

    def _alloc(self, cls: int) -> int | None:
        if self.free[cls]:
            return self.free[cls].pop()
        size = KV_MIN_SLOT << cls
        if self.top + size > self.npages * 4096:
            return None
        offset, self.top = self.top, self.top + size
        return offset

    def _read(self, task: Task, offset: int, length: int) -> bytes:
        mm = task.tg.mm
        assert mm is not None
        return mm.read(self.addr + offset, length) if length else b""


def memory_digest(kernel: Kernel, task: Task, addr: int, npages: int) -> str:
    """SHA-256 of ``npages`` pages of ``task``'s memory from ``addr``, as the task sees
    them (a restored page not fetched yet is fetched now)."""
    import hashlib

    mm = task.tg.mm
    assert mm is not None
    h = hashlib.sha256()
    chunk = 256 * 4096
    end = addr + npages * 4096
    for at in range(addr, end, chunk):
        h.update(mm.read(at, min(chunk, end - at)))
    return h.hexdigest()
