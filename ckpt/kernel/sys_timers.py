"""Timer system calls (setitimer, timer_create, timerfd) and the step loop that fires them.

A mixin of ``Kernel`` (``ckpt/kernel/kernel.py``): the methods use the kernel's fields
(``self.pidns``, ``self.vfs``, ``self.memory_file``...) and each other across mixins.
"""

from __future__ import annotations

import errno

from ckpt.errors import KernelError, SyscallError
from ckpt.kernel.abi import SI_TIMER
from ckpt.kernel.clock import CLOCK_MONOTONIC, CLOCK_REALTIME
from ckpt.kernel.events import K_POSIX, K_TIMERFD, NEVER, EventIndex
from ckpt.kernel.task import ITIMER_SIGNALS, SigInfo, Task, TaskState, ThreadGroup
from ckpt.kernel.timers import ITIMER_PROF, ITIMER_REAL, ITIMER_VIRTUAL, PosixTimer, TimerFD
from ckpt.kernel.vfs import O_RDONLY

QUANTUM_NS = 1_000_000  # step size while some task is using CPU


class TimerCalls:
    """Timer system calls and the step loop, mixed into ``Kernel``."""

    # -- timers -------------------------------------------------------------------------
    def setitimer(self, task: Task, which: int, value_ns: int, interval_ns: int = 0) -> None:
        if which not in ITIMER_SIGNALS:
            raise SyscallError(errno.EINVAL, f"bad itimer {which}")
        tg = task.tg
        base = {ITIMER_REAL: self.now, ITIMER_VIRTUAL: tg.utime_ns, ITIMER_PROF: tg.cpu_ns}[which]
        tg.itimers[which].arm(base, value_ns, interval_ns)
        self._events().itimer_armed(tg, which)

    def getitimer(self, task: Task, which: int) -> tuple[int, int]:
        tg = task.tg
        base = {ITIMER_REAL: self.now, ITIMER_VIRTUAL: tg.utime_ns, ITIMER_PROF: tg.cpu_ns}[which]
        it = tg.itimers[which]
        return it.remaining(base), it.interval_ns

    def timer_create(
        self, task: Task, clock: int = CLOCK_MONOTONIC, signo: int = 14, *, thread: bool = False
    ) -> int:
        if clock not in (CLOCK_MONOTONIC, CLOCK_REALTIME):
            raise SyscallError(errno.EINVAL, f"unsupported clock {clock}")
        tg = task.tg
        timer_id = tg.next_timer_id
        tg.next_timer_id += 1
        tg.posix_timers[timer_id] = PosixTimer(
            timer_id, clock, signo, target_tid=task.tid if thread else 0
        )
        return timer_id

    def _posix_timer(self, task: Task, timer_id: int) -> PosixTimer:
        timer = task.tg.posix_timers.get(timer_id)
        if timer is None:
            raise SyscallError(errno.EINVAL, f"no timer {timer_id}")
        return timer

    def timer_settime(self, task: Task, timer_id: int, value_ns: int, interval_ns: int = 0) -> None:
        timer = self._posix_timer(task, timer_id)
        timer.arm(self.timekeeper.now(timer.clock), value_ns, interval_ns)
        self._events().posix_armed(task.tg, timer)

    def timer_gettime(self, task: Task, timer_id: int) -> tuple[int, int]:
        timer = self._posix_timer(task, timer_id)
        return timer.remaining(self.timekeeper.now(timer.clock)), timer.interval_ns

    def timer_getoverrun(self, task: Task, timer_id: int) -> int:
        return self._posix_timer(task, timer_id).overrun

    def timer_delete(self, task: Task, timer_id: int) -> None:
        self._posix_timer(task, timer_id)
        del task.tg.posix_timers[timer_id]

    def timerfd_create(self, task: Task, clock: int = CLOCK_MONOTONIC) -> int:
        tfd = TimerFD(self.uid(), O_RDONLY, clock=clock)
        self.timerfds.append(tfd)
        self._events().timerfd_opened(tfd)
        return self._table(task).install(tfd)

    def timerfd_settime(self, task: Task, fd: int, value_ns: int, interval_ns: int = 0) -> None:
        tfd = self._file(task, fd)
        if not isinstance(tfd, TimerFD):
            raise SyscallError(errno.EINVAL, f"fd {fd} is not a timerfd")
        tfd.arm(self.timekeeper.now(tfd.clock), value_ns, interval_ns)
        self._events().timerfd_armed(tfd)

    def timerfd_gettime(self, task: Task, fd: int) -> tuple[int, int]:
        tfd = self._file(task, fd)
        if not isinstance(tfd, TimerFD):
            raise SyscallError(errno.EINVAL, f"fd {fd} is not a timerfd")
        return tfd.remaining(self.timekeeper.now(tfd.clock)), tfd.interval_ns

    # -- the step loop --------------------------------------------------------------------
    def _events(self) -> EventIndex:
        """The index of armed timers and signal-ready tasks (rebuilt after a restore)."""
        idx = self._event_index
        if idx is None:
            idx = self._event_index = EventIndex.build(self)
        return idx

    def run_for(self, ns: int) -> None:
        """Run the kernel for ``ns`` nanoseconds of simulated time, deterministically.

        Each step goes straight to the next timer expiry or program wake-up (or one
        quantum while a task is busy), so the cost follows events, not how many timers,
        files or tasks exist.
        """
        if self.paused:
            raise KernelError("the kernel is paused; resume it before running it")
        if ns < 0:
            raise KernelError(f"cannot run for a negative time ({ns} ns)")
        target = self.now + ns
        self._settle()
        while self.now < target:
            now = self.now
            next_t = min(target, self._next_event())
            busy = self._busy_tasks()
            if busy:
                next_t = min(next_t, now + QUANTUM_NS)
            next_t = max(next_t, now + 1)
            self._account_cpu(next_t - now, busy)
            self.timekeeper.advance(next_t - now)
            self._fire_timers()
            self._settle()
        self.steps += 1

    def next_event_ns(self) -> int | None:
        """The monotonic time at which the kernel next has work (a timer expires, a
        program wakes, or now while a task is busy), or None if nothing is due ever.

        For a host that advances the clock in real time: it can sleep until then.
        """
        if self._busy_tasks():
            return self.now
        at = self._next_event()
        return None if at >= NEVER else at

    def pace_ns(self) -> int | None:
        """The shortest ``Program.pace_ns`` of a task that can run, or None if none asks.

        For a host that advances the clock in real time: it runs the kernel at least
        this often (for the real time passed), not in whole ticks, so a program paced by
        elapsed time does a little work each run and requests are served in between.
        """
        best = None
        for task in self.pidns.tasks.values():
            program = task.program
            if (
                program is None
                or task.state in (TaskState.STOPPED, TaskState.ZOMBIE)
                or task.blocked_on is not None
            ):
                continue
            pace = program.pace_ns()
            if pace > 0 and (best is None or pace < best):
                best = pace
        return best

    def _settle(self) -> None:
        for _ in range(1000):
            delivered = self._deliver_signals()
            ran = self._run_due_programs()
            if not delivered and not ran:
                return

    def _run_due_programs(self) -> bool:
        now = self.now
        if not any(
            t.program is not None and t.program.wake_ns is not None and t.program.wake_ns <= now
            for t in self.pidns.tasks.values()
        ):
            return False
        ran = False
        for task in self.tasks():
            program = task.program
            if (
                program is None
                or program.wake_ns is None
                or program.wake_ns > now
                or task.state in (TaskState.STOPPED, TaskState.ZOMBIE)
                or task.blocked_on is not None
            ):
                continue
            program.wake_ns = None
            program.step(self, task)
            if program.wake_ns is not None and program.wake_ns <= now:
                program.wake_ns = now + 1
            ran = True
        return ran

    def _busy_tasks(self) -> list[Task]:
        return [
            t
            for t in self.tasks()
            if t.state is TaskState.RUNNING and t.program is not None and t.program.busy
        ]

    def _account_cpu(self, dt: int, busy: list[Task]) -> None:
        for task in busy:
            task.utime_ns += dt
            task.tg.utime_ns += dt
            task.tg.stime_ns += dt // 8  # the syscalls a busy task makes

    def _next_event(self) -> int:
        """The monotonic time of the next timer expiry or program wake-up.

        A program whose task cannot run (stopped, or blocked on a lock) is not a wake-up:
        ``_run_due_programs`` skips it, so its past ``wake_ns`` would make every step
        1 ns long until the task runs again.  It runs at the step that continues it.
        """
        best = self._events().next_expiry(self.now, self.timekeeper.realtime_ns)
        for task in self.pidns.tasks.values():
            program = task.program
            if (
                program is not None
                and program.wake_ns is not None
                and program.wake_ns < best
                and task.state is not TaskState.STOPPED
                and task.blocked_on is None
            ):
                best = program.wake_ns
        return best

    def _fire_timers(self) -> None:
        idx = self._events()
        now = self.now
        for kind, timer, tg in idx.due(now, self.timekeeper.realtime_ns):
            if kind == K_TIMERFD:
                timer.expire(self.timekeeper.now(timer.clock))
                idx.timerfd_armed(timer)
            elif kind == K_POSIX:
                if timer.expire(self.timekeeper.now(timer.clock)):
                    info = SigInfo(timer.signo, SI_TIMER, timer_id=timer.id)
                    target: ThreadGroup | Task = tg
                    if timer.target_tid and timer.target_tid in self.pidns.tasks:
                        target = self.pidns.tasks[timer.target_tid]
                    if not self.send_signal(target, info, timer=True):
                        timer.delivered()  # discarded (ignored): nothing stays queued
                idx.posix_armed(tg, timer)
            else:
                base = (now, tg.utime_ns, tg.cpu_ns)[kind]
                if timer.expire(base):
                    self.send_signal(tg, SigInfo(ITIMER_SIGNALS[kind], 0x80))
                if kind == ITIMER_REAL:
                    idx.itimer_armed(tg, kind)
