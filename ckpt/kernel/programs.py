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
