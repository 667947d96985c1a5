"""Tasks and what they own: thread groups, signals, credentials, registers, PID namespace.

Shapes follow Linux/gVisor: a ``Task`` is a thread (tid, registers, signal mask, its own
pending signals); a ``ThreadGroup`` is a process (tgid, shared pending signals, the
signal handler table of 64 ``SigAction``s, rlimits, interval and POSIX timers, the
address space, process group and session).  Parent/child links are between tasks, as
in gVisor (the child's leader points at the parent task that forked it).  What tasks
*do* between steps is a ``Program`` (workloads subclass it), saved with the task.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckpt import state
from ckpt.kernel.locks import LockWaiter
from ckpt.kernel.mm import MemoryManager
from ckpt.kernel.timers import ITIMER_PROF, ITIMER_REAL, ITIMER_VIRTUAL, ITimer, PosixTimer
from ckpt.kernel.vfs import FDTable, FSContext, Inode

if TYPE_CHECKING:
    from ckpt.kernel.kernel import Kernel

NSIG = 64
SIGHUP, SIGINT, SIGQUIT, SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGKILL = range(1, 10)
SIGUSR1, SIGSEGV, SIGUSR2, SIGPIPE, SIGALRM, SIGTERM, SIGSTKFLT, SIGCHLD = range(10, 18)
SIGCONT, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU, SIGURG, SIGXCPU, SIGXFSZ = range(18, 26)
SIGVTALRM, SIGPROF, SIGWINCH, SIGIO, SIGPWR, SIGSYS = range(26, 32)
SIGRTMIN = 34

SIG_DFL = 0
SIG_IGN = 1

STOP_SIGNALS = frozenset({SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU})
IGNORED_BY_DEFAULT = frozenset({SIGCHLD, SIGURG, SIGWINCH, SIGCONT})
UNCATCHABLE = frozenset({SIGKILL, SIGSTOP})
ITIMER_SIGNALS = {ITIMER_REAL: SIGALRM, ITIMER_VIRTUAL: SIGVTALRM, ITIMER_PROF: SIGPROF}

RLIM_INFINITY = (1 << 64) - 1
RLIMIT_NAMES = [
    "CPU",
    "FSIZE",
    "DATA",
    "STACK",
    "CORE",
    "RSS",
    "NPROC",
    "NOFILE",
    "MEMLOCK",
    "AS",
    "LOCKS",
    "SIGPENDING",
    "MSGQUEUE",
    "NICE",
    "RTPRIO",
    "RTTIME",
]


def default_fpstate() -> bytes:
    """An XSAVE area as a fresh thread has it: x87 control word and MXCSR set, rest zero."""
    legacy = bytearray(512)
    legacy[0:2] = (0x037F).to_bytes(2, "little")  # FCW
    legacy[24:28] = (0x1F80).to_bytes(4, "little")  # MXCSR
    legacy[28:32] = (0xFFFF).to_bytes(4, "little")  # MXCSR mask
    header = bytearray(64)
    header[0] = 0b111  # XSTATE_BV: x87, SSE, AVX
    return bytes(legacy + header + bytes(256))


def sigbit(signo: int) -> int:
    return 1 << (signo - 1)


class TaskState(enum.Enum):
    RUNNING = "R"
    SLEEPING = "S"  # blocked: waiting for a lock, an event, or simply idle
    STOPPED = "T"
    ZOMBIE = "Z"


class SignalAction(enum.Enum):
    """What delivering a signal does, given its disposition."""

    IGNORE = 0
    TERMINATE = 1
    STOP = 2
    CONTINUE = 3
    HANDLE = 4


@state.savable
@dataclass(eq=False, slots=True)
class SigAction:
    """One signal's disposition (sa_handler address, SIG_DFL or SIG_IGN)."""

    handler: int = SIG_DFL
    flags: int = 0
    mask: int = 0
    restorer: int = 0


@state.savable
@dataclass(eq=False)
class SignalHandlers:
    """The 64-entry handler table, shared by the threads of a process."""

    actions: list[SigAction] = field(default_factory=lambda: [SigAction() for _ in range(NSIG)])

    def get(self, signo: int) -> SigAction:
        return self.actions[signo - 1]

    def copy(self) -> SignalHandlers:
        return SignalHandlers(
            [SigAction(a.handler, a.flags, a.mask, a.restorer) for a in self.actions]
        )

    def action_for(self, signo: int) -> SignalAction:
        if signo == SIGKILL:
            return SignalAction.TERMINATE
        if signo == SIGSTOP:
            return SignalAction.STOP
        handler = self.get(signo).handler
        if handler == SIG_IGN:
            return SignalAction.IGNORE
        if handler != SIG_DFL:
            return SignalAction.HANDLE
        if signo == SIGCONT:
            return SignalAction.CONTINUE
        if signo in IGNORED_BY_DEFAULT:
            return SignalAction.IGNORE
        if signo in STOP_SIGNALS:
            return SignalAction.STOP
        return SignalAction.TERMINATE


@state.savable
@dataclass(eq=False, slots=True)
class SigInfo:
    """A queued signal: number, origin (sender pid/uid), and timer details if any."""

    signo: int
    code: int = 0
    pid: int = 0
    uid: int = 0
    timer_id: int = 0
    value: int = 0


@state.savable
@dataclass(eq=False, slots=True)
class Registers:
    """x86-64 user registers, as ptrace's user_regs_struct lays them out."""

    r15: int = 0
    r14: int = 0
    r13: int = 0
    r12: int = 0
    rbp: int = 0
    rbx: int = 0
    r11: int = 0
    r10: int = 0
    r9: int = 0
    r8: int = 0
    rax: int = 0
    rcx: int = 0
    rdx: int = 0
    rsi: int = 0
    rdi: int = 0
    orig_rax: int = 0
    rip: int = 0
    cs: int = 0x33
    eflags: int = 0x246
    rsp: int = 0
    ss: int = 0x2B
    fs_base: int = 0
    gs_base: int = 0
    ds: int = 0
    es: int = 0
    fs: int = 0
    gs: int = 0

    def copy(self) -> Registers:
        return Registers(*(getattr(self, f) for f in self.__slots__))  # type: ignore[attr-defined]

    def as_tuple(self) -> tuple[int, ...]:
        return tuple(getattr(self, f) for f in self.__slots__)  # type: ignore[attr-defined]


@state.savable
@dataclass(eq=False, slots=True)
class Credentials:
    """User and group ids, supplementary groups and capability sets."""

    uid: int = 0
    gid: int = 0
    euid: int = 0
    egid: int = 0
    suid: int = 0
    sgid: int = 0
    fsuid: int = 0
    fsgid: int = 0
    groups: tuple[int, ...] = ()
    cap_effective: int = 0x1FF_FFFF_FFFF
    cap_permitted: int = 0x1FF_FFFF_FFFF
    cap_inheritable: int = 0
    cap_bounding: int = 0x1FF_FFFF_FFFF

    def copy(self) -> Credentials:
        return Credentials(*(getattr(self, f) for f in self.__slots__))  # type: ignore[attr-defined]


@state.savable
@dataclass(eq=False, slots=True)
class RLimit:
    cur: int = RLIM_INFINITY
    max: int = RLIM_INFINITY


def default_rlimits() -> list[RLimit]:
    limits = [RLimit() for _ in RLIMIT_NAMES]
    limits[RLIMIT_NAMES.index("STACK")] = RLimit(8 << 20, RLIM_INFINITY)
    limits[RLIMIT_NAMES.index("CORE")] = RLimit(0, RLIM_INFINITY)
    limits[RLIMIT_NAMES.index("NOFILE")] = RLimit(1024, 1 << 20)
    limits[RLIMIT_NAMES.index("NPROC")] = RLimit(63_704, 63_704)
    limits[RLIMIT_NAMES.index("MEMLOCK")] = RLimit(8 << 20, 8 << 20)
    limits[RLIMIT_NAMES.index("SIGPENDING")] = RLimit(63_704, 63_704)
    limits[RLIMIT_NAMES.index("MSGQUEUE")] = RLimit(819_200, 819_200)
    limits[RLIMIT_NAMES.index("NICE")] = RLimit(0, 0)
    limits[RLIMIT_NAMES.index("RTPRIO")] = RLimit(0, 0)
    return limits


@state.savable
@dataclass(eq=False)
class Program:
    """What a task does when the step loop runs it.  Workloads subclass this.

    ``wake_ns`` is the monotonic time of the next step (None: only events wake it);
    ``busy`` programs use CPU whenever they are runnable (for ITIMER_VIRTUAL/PROF).
    """

    wake_ns: int | None = None
    busy: bool = False

    def step(self, kernel: Kernel, task: Task) -> None:
        """Act once; set ``wake_ns`` for the next step.  The base program sleeps forever."""
        self.wake_ns = None

    def pace_ns(self) -> int:
        """How often a host running the kernel in real time should run it for this
        program (one paced by elapsed time, as ``memwriter.PageWriter``), so that each
        run's work stays small; 0: whenever its events fall due."""
        return 0

    def on_signal(self, kernel: Kernel, task: Task, info: SigInfo) -> None:
        """A signal with a handler was delivered to ``task`` (the handler "ran")."""

    def http_body(self, kernel: Kernel, task: Task, path: str) -> dict[str, object]:
        """What the HTTP server program adds to a response for ``path`` (nothing here)."""
        return {}

    def http_route(
        self, kernel: Kernel, task: Task, method: str, path: str, body: bytes
    ) -> tuple[int, dict[str, object] | bytes] | None:
        """The whole answer to a request this program serves itself (status, JSON object
        or raw bytes), or None to answer as every server does (see ``http_body``)."""
        return None


@state.savable
@dataclass(eq=False, slots=True)
class IOUsage:
    """/proc/PID/io counters."""

    rchar: int = 0
    wchar: int = 0
    syscr: int = 0
    syscw: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    cancelled_write_bytes: int = 0


@state.savable
@dataclass(eq=False)
class Session:
    sid: int
    leader_tgid: int


@state.savable
@dataclass(eq=False)
class ProcessGroup:
    pgid: int
    session: Session
    members: list[ThreadGroup] = field(default_factory=list)


@state.savable
@dataclass(eq=False)
class ThreadGroup:
    """A process: what its threads share."""

    tgid: int
    lock_owner: int
    sighand: SignalHandlers
    mm: MemoryManager | None = None
    leader: Task | None = None
    tasks: list[Task] = field(default_factory=list)
    shared_pending: list[SigInfo] = field(default_factory=list)
    rlimits: list[RLimit] = field(default_factory=default_rlimits)
    itimers: list[ITimer] = field(
        default_factory=lambda: [ITimer(ITIMER_REAL), ITimer(ITIMER_VIRTUAL), ITimer(ITIMER_PROF)]
    )
    posix_timers: dict[int, PosixTimer] = field(default_factory=dict)
    next_timer_id: int = 0
    pgrp: ProcessGroup | None = None
    exit_code: int | None = None  # wait status once the group exited
    exit_signal: int = SIGCHLD
    stopped: bool = False
    stop_signal: int = 0
    stop_unreported: bool = False
    utime_ns: int = 0
    stime_ns: int = 0
    handled: dict[int, int] = field(default_factory=dict)  # signo -> handler runs
    io: IOUsage = field(default_factory=lambda: IOUsage())
    min_flt: int = 0
    maj_flt: int = 0
    children_utime_ns: int = 0
    children_stime_ns: int = 0
    oom_score_adj: int = 0
    exe: str = ""
    tty: int = 0

    @property
    def cpu_ns(self) -> int:
        return self.utime_ns + self.stime_ns

    def live_tasks(self) -> list[Task]:
        return [t for t in self.tasks if t.state is not TaskState.ZOMBIE]


@state.savable
@dataclass(eq=False)
class Task:
    """A thread."""

    tid: int
    tg: ThreadGroup
    comm: str
    creds: Credentials
    regs: Registers = field(default_factory=Registers)
    fd_table: FDTable | None = None
    fs: FSContext | None = None
    parent: Task | None = None
    children: list[Task] = field(default_factory=list)
    sigmask: int = 0
    pending: list[SigInfo] = field(default_factory=list)
    state: TaskState = TaskState.RUNNING
    program: Program | None = None
    blocked_on: LockWaiter | None = None
    blocked_inode: Inode | None = None
    blocked_flock: bool = False
    exit_code: int | None = None
    utime_ns: int = 0
    nice: int = 0
    # What gVisor also keeps per task: FPU/XSAVE area, futex and rseq registration,
    # the alternate signal stack, scheduling and accounting details.
    fpstate: bytes = b""
    robust_list: int = 0
    set_child_tid: int = 0
    clear_child_tid: int = 0
    rseq_addr: int = 0
    rseq_signature: int = 0
    altstack: tuple[int, int, int] = (0, 0, 2)  # sp, flags (SS_DISABLE), size
    cpu_affinity: int = 0b11
    sched_policy: int = 0
    io_priority: int = 0
    personality: int = 0
    start_time_ns: int = 0
    nvcsw: int = 0
    nivcsw: int = 0
    cgroup: str = "/"

    @property
    def tgid(self) -> int:
        return self.tg.tgid

    @property
    def is_leader(self) -> bool:
        return self.tg.leader is self

    def runnable(self) -> bool:
        return self.state is TaskState.RUNNING

    def runnable_or_idle(self) -> bool:
        """Able to make a system call now: not stopped, exited, or blocked on a lock."""
        return self.state in (TaskState.RUNNING, TaskState.SLEEPING) and self.blocked_on is None


@state.savable
@dataclass(eq=False)
class PIDNamespace:
    """ids -> tasks, process groups and sessions; allocates pids in order."""

    next_pid: int = 1
    tasks: dict[int, Task] = field(default_factory=dict)
    process_groups: dict[int, ProcessGroup] = field(default_factory=dict)
    sessions: dict[int, Session] = field(default_factory=dict)

    def allocate(self) -> int:
        pid = self.next_pid
        self.next_pid += 1
        return pid

    def thread_groups(self) -> list[ThreadGroup]:
        return [t.tg for _, t in sorted(self.tasks.items()) if t.tg.leader is t]
