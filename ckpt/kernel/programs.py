"""What workload tasks do when the step loop runs them: ``Program`` subclasses.

Programs are savable (they are checkpointed with their task), deterministic, and act
only through the kernel's system calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from ckpt import state
from ckpt.errors import SyscallError
from ckpt.kernel.kernel import Kernel, LockCmd
from ckpt.kernel.locks import LockType
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
        if path.split("?", 1)[0] == "/memory":
            body["memory_sha256"] = memory_digest(kernel, task, self.addr, self.npages)
        return body


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
