"""The kernel root: system calls over the subsystems, the step loop, and fingerprints.

``Kernel`` is the root of the object graph the sandbox checkpoints.  Its methods are the
system calls the workloads and tests use (fork, open, flock, fcntl locks, mmap, timers,
kill, wait...), each taking the calling ``Task``.  ``run_for(ns)`` is the deterministic
step loop: it advances the clocks from event to event, fires timers, delivers signals,
and runs the tasks' programs.  ``fingerprint()`` digests everything a process could
observe (like zdtm's before/after check), so a restore can be compared with the
original; ``describe()`` is the same for humans.
"""

from __future__ import annotations

import errno
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ckpt import state
from ckpt.errors import KernelError, SyscallError
from ckpt.kernel.clock import CLOCK_MONOTONIC, CLOCK_REALTIME, Timekeeper
from ckpt.kernel.locks import LOCK_EOF, LockSet, LockType, LockWaiter
from ckpt.kernel.mm import PROT_READ, PROT_WRITE, MapKind, MemoryFile, MemoryManager
from ckpt.kernel.net import NetStack, Socket, SocketFD, SocketState, TCPSocket, UnixSocket
from ckpt.kernel.ns import BOOT_MESSAGES, CgroupNode, IPCNamespace, UTSNamespace, standard_cgroups
from ckpt.kernel.task import (
    ITIMER_SIGNALS,
    SIG_IGN,
    SIGCHLD,
    SIGCONT,
    SIGKILL,
    SIGRTMIN,
    SIGSTOP,
    STOP_SIGNALS,
    UNCATCHABLE,
    Credentials,
    PIDNamespace,
    ProcessGroup,
    Session,
    SigAction,
    SigInfo,
    SignalAction,
    SignalHandlers,
    Task,
    TaskState,
    ThreadGroup,
    default_fpstate,
    sigbit,
)
from ckpt.kernel.timers import ITIMER_PROF, ITIMER_REAL, ITIMER_VIRTUAL, PosixTimer, TimerFD
from ckpt.kernel.vfs import (
    O_ACCMODE,
    O_APPEND,
    O_CLOEXEC,
    O_CREAT,
    O_DIRECTORY,
    O_EXCL,
    O_RDONLY,
    O_RDWR,
    O_TRUNC,
    O_WRONLY,
    VFS,
    DirectoryFD,
    EpollFD,
    EpollItem,
    FDTable,
    FileDescription,
    FSContext,
    Inode,
    InodeKind,
    PipeFD,
    RegularFD,
)

SI_USER = 0
SI_TIMER = -2
CLD_EXITED, CLD_KILLED, CLD_STOPPED, CLD_CONTINUED = 1, 2, 5, 6
LOCK_SH, LOCK_EX, LOCK_UN = 1, 2, 8
SEEK_SET, SEEK_CUR, SEEK_END = 0, 1, 2
QUANTUM_NS = 1_000_000  # step size while some task is using CPU
PROC_ENTRIES = [
    "auxv",
    "cgroup",
    "cmdline",
    "comm",
    "cwd",
    "environ",
    "exe",
    "gid_map",
    "io",
    "limits",
    "maps",
    "mem",
    "mountinfo",
    "mounts",
    "oom_score",
    "oom_score_adj",
    "root",
    "stat",
    "statm",
    "status",
    "uid_map",
]


class LockCmd:
    """fcntl lock commands: classic POSIX (owner: the process) and OFD (owner: the file)."""

    GETLK = "F_GETLK"
    SETLK = "F_SETLK"
    SETLKW = "F_SETLKW"
    OFD_GETLK = "F_OFD_GETLK"
    OFD_SETLK = "F_OFD_SETLK"
    OFD_SETLKW = "F_OFD_SETLKW"


@state.savable
@dataclass(eq=False)
class HttpService:
    """The http workload's server state: listener, counters, access log description."""

    id: str
    listener: TCPSocket
    server: Task
    access_log: RegularFD | None = None
    requests: int = 0
    restores: int = 0


@state.savable
@dataclass(eq=False)
class Kernel:
    """The root of the checkpointed graph."""

    workload: str
    boot_id: str
    timekeeper: Timekeeper = field(default_factory=Timekeeper)
    pidns: PIDNamespace = field(default_factory=PIDNamespace)
    vfs: VFS = field(default_factory=VFS)
    memory_file: MemoryFile = field(default_factory=MemoryFile)
    init: Task | None = None
    timerfds: list[TimerFD] = field(default_factory=list)
    http: HttpService | None = None
    netstack: NetStack = field(default_factory=NetStack.standard)
    uts: UTSNamespace = field(default_factory=UTSNamespace)
    ipc: IPCNamespace = field(default_factory=IPCNamespace)
    cgroups: list[CgroupNode] = field(default_factory=standard_cgroups)
    syslog: list[str] = field(default_factory=lambda: list(BOOT_MESSAGES))
    next_uid: int = 1
    next_mm: int = 1
    next_fdtable: int = 1
    paused: bool = False
    steps: int = 0
    restores: int = 0
    rng_state: int = 0x2545F4914F6CDD1D

    # -- small helpers ------------------------------------------------------------------
    def uid(self) -> int:
        """A kernel-unique id (file descriptions, sockets, lock owners)."""
        value = self.next_uid
        self.next_uid += 1
        return value

    def random(self) -> int:
        """A deterministic 64-bit pseudo-random number whose state is checkpointed."""
        x = self.rng_state
        x ^= (x << 13) & 0xFFFF_FFFF_FFFF_FFFF
        x ^= x >> 7
        x ^= (x << 17) & 0xFFFF_FFFF_FFFF_FFFF
        self.rng_state = x
        return x

    @property
    def now(self) -> int:
        return self.timekeeper.monotonic_ns

    def task(self, tid: int) -> Task:
        task = self.pidns.tasks.get(tid)
        if task is None:
            raise SyscallError(errno.ESRCH, f"no task {tid}")
        return task

    def tasks(self) -> list[Task]:
        return [t for _, t in sorted(self.pidns.tasks.items())]

    def thread_groups(self) -> list[ThreadGroup]:
        return self.pidns.thread_groups()

    # -- processes ----------------------------------------------------------------------
    def spawn_init(self, comm: str = "init", creds: Credentials | None = None) -> Task:
        """Create pid 1 in a new session, with an empty address space and fd table."""
        if self.init is not None:
            raise KernelError("init already exists")
        tgid = self.pidns.allocate()
        tg = ThreadGroup(tgid, self.uid(), SignalHandlers())
        tg.mm = MemoryManager(self.next_mm, self.memory_file)
        self.next_mm += 1
        task = Task(tgid, tg, comm, creds or Credentials(), fpstate=default_fpstate())
        task.start_time_ns = self.now
        self._cgroup_join(tgid)
        self._procfs_add(tgid)
        task.fd_table = FDTable(self.next_fdtable)
        self.next_fdtable += 1
        task.fs = FSContext(self.vfs.root, self.vfs.root)
        task.state = TaskState.SLEEPING
        tg.leader = task
        tg.tasks.append(task)
        self.pidns.tasks[tgid] = task
        session = Session(tgid, tgid)
        self.pidns.sessions[tgid] = session
        self._join_group(tg, ProcessGroup(tgid, session))
        self.init = task
        return task

    def fork(self, parent: Task, comm: str | None = None, *, share_files: bool = False) -> Task:
        """A new process: copy-on-write memory, a copy of the fd table (shared if asked)."""
        self._check_alive(parent)
        ptg = parent.tg
        tgid = self.pidns.allocate()
        tg = ThreadGroup(tgid, self.uid(), ptg.sighand.copy())
        assert ptg.mm is not None
        tg.mm = ptg.mm.fork(self.next_mm)
        self.next_mm += 1
        tg.rlimits = [type(r)(r.cur, r.max) for r in ptg.rlimits]
        child = Task(tgid, tg, comm or parent.comm, parent.creds.copy(), parent.regs.copy())
        child.regs.rax = 0  # fork returns 0 in the child
        self._inherit_thread_state(parent, child)
        tg.exe, tg.oom_score_adj = ptg.exe, ptg.oom_score_adj
        self._procfs_add(tgid)
        child.state = TaskState.SLEEPING
        assert parent.fd_table is not None and parent.fs is not None
        if share_files:
            child.fd_table = parent.fd_table
            parent.fd_table.users += 1
        else:
            child.fd_table = self._copy_fd_table(parent.fd_table)
        child.fs = FSContext(parent.fs.root, parent.fs.cwd, parent.fs.umask)
        child.parent = parent
        parent.children.append(child)
        tg.leader = child
        tg.tasks.append(child)
        self.pidns.tasks[tgid] = child
        assert ptg.pgrp is not None
        self._join_group(tg, ptg.pgrp)
        return child

    def clone_thread(self, task: Task, comm: str | None = None) -> Task:
        """A new thread in ``task``'s group: shares memory, files, fs and handlers."""
        self._check_alive(task)
        tid = self.pidns.allocate()
        thread = Task(tid, task.tg, comm or task.comm, task.creds.copy(), task.regs.copy())
        self._inherit_thread_state(task, thread)
        thread.fd_table, thread.fs = task.fd_table, task.fs
        assert task.fd_table is not None and task.fs is not None
        task.fd_table.users += 1
        task.fs.users += 1
        thread.state = TaskState.SLEEPING
        task.tg.tasks.append(thread)
        self.pidns.tasks[tid] = thread
        return thread

    def _inherit_thread_state(self, parent: Task, child: Task) -> None:
        child.sigmask = parent.sigmask
        child.fpstate = parent.fpstate
        child.cpu_affinity, child.personality = parent.cpu_affinity, parent.personality
        child.sched_policy, child.io_priority = parent.sched_policy, parent.io_priority
        child.nice, child.cgroup = parent.nice, parent.cgroup
        child.start_time_ns = self.now
        self._cgroup_join(child.tid)

    def _procfs_add(self, tgid: int) -> None:
        """/proc/PID and its entries, as procfs shows them (gVisor saves them too)."""
        try:
            proc = self.vfs.lookup("/proc")
        except SyscallError:
            return  # no procfs mounted (a bare kernel in a test)
        if str(tgid) in proc.children:
            return
        d = self.vfs.link_new(
            proc, str(tgid), self.vfs.new_inode(InodeKind.DIRECTORY, 0o555, self.now)
        )
        for name in PROC_ENTRIES:
            self.vfs.link_new(d, name, self.vfs.new_inode(InodeKind.REGULAR, 0o444, self.now))
        for sub in ("fd", "fdinfo", "task", "net", "ns"):
            self.vfs.link_new(d, sub, self.vfs.new_inode(InodeKind.DIRECTORY, 0o555, self.now))

    def _procfs_remove(self, tgid: int) -> None:
        try:
            proc = self.vfs.lookup("/proc")
        except SyscallError:
            return
        d = proc.children.pop(str(tgid), None)
        if d is not None:
            d.dead = True

    def _cgroup_join(self, tid: int) -> None:
        for root in self.cgroups:
            (root.children[0] if root.children else root).pids.append(tid)

    def _cgroup_leave(self, tid: int) -> None:
        for root in self.cgroups:
            for node in (root, *root.children):
                if tid in node.pids:
                    node.pids.remove(tid)

    def _copy_fd_table(self, table: FDTable) -> FDTable:
        new = FDTable(self.next_fdtable, limit=table.limit)
        self.next_fdtable += 1
        for fd, entry in table.items():
            new.install_at(fd, entry.file, cloexec=entry.cloexec)
        return new

    def execve(self, task: Task, comm: str) -> None:
        """Replace the program image: close cloexec fds, reset caught signals to default."""
        self._check_alive(task)
        assert task.fd_table is not None
        for fd, entry in list(task.fd_table.items()):
            if entry.cloexec:
                self.close(task, fd)
        for action in task.tg.sighand.actions:
            if action.handler != SIG_IGN:
                action.handler, action.flags, action.mask, action.restorer = 0, 0, 0, 0
        task.comm = comm

    def exit_group(self, tg: ThreadGroup, status: int) -> None:
        """Every thread of ``tg`` exits; the leader becomes a zombie for its parent."""
        if tg.exit_code is not None:
            return
        tg.exit_code = status
        tg.stopped = False
        orphans = self._children_of(tg)  # before the threads that forked them are gone
        for task in list(tg.tasks):
            self._exit_task(task)
        self._close_group_resources(tg)
        leader = tg.leader
        assert leader is not None
        for child in orphans:
            self._reparent(child)
        parent = leader.parent
        code = CLD_KILLED if status & 0x7F else CLD_EXITED
        if parent is None or parent.tg.exit_code is not None:
            self._reap(leader)
            return
        autoreap = parent.tg.sighand.get(SIGCHLD).handler == SIG_IGN
        self.send_signal(parent.tg, SigInfo(tg.exit_signal, code, tg.tgid, leader.creds.uid))
        if autoreap:
            self._reap(leader)

    def exit(self, task: Task, code: int) -> None:
        """exit_group(code) from ``task``."""
        self.exit_group(task.tg, (code & 0xFF) << 8)

    def _exit_task(self, task: Task) -> None:
        self._cancel_wait(task)
        task.state = TaskState.ZOMBIE
        task.exit_code = task.tg.exit_code
        task.pending.clear()
        if task.program is not None:
            task.program.wake_ns = None
        if task.fd_table is not None:
            table, task.fd_table = task.fd_table, None
            table.users -= 1
            if table.users == 0:
                for fd, _ in list(table.items()):
                    self._close_in(task, table, fd)
            else:
                # Other users keep the table, but POSIX locks belong to the process.
                self._release_posix_locks_in(task.tg, table)
        if task.fs is not None:
            task.fs.users -= 1
            task.fs = None
        if not task.is_leader:
            task.tg.tasks.remove(task)
            self.pidns.tasks.pop(task.tid, None)
            self._cgroup_leave(task.tid)

    def _close_group_resources(self, tg: ThreadGroup) -> None:
        if tg.mm is not None:
            tg.mm.users -= 1
            if tg.mm.users == 0:
                tg.mm.release()
        for it in tg.itimers:
            it.expiry_ns = 0
        tg.posix_timers.clear()
        tg.shared_pending.clear()

    def _children_of(self, tg: ThreadGroup) -> list[Task]:
        return [c for t in tg.tasks for c in t.children]

    def _reparent(self, child: Task) -> None:
        """Orphans go to init (and init reaps zombies it inherits)."""
        old = child.parent
        if old is not None:
            old.children.remove(child)
        child.parent = self.init if self.init is not None and self.init is not child else None
        if child.parent is not None:
            child.parent.children.append(child)
            if child.state is TaskState.ZOMBIE:
                self.send_signal(child.parent.tg, SigInfo(SIGCHLD, CLD_EXITED, child.tid))

    def _reap(self, leader: Task) -> None:
        tg = leader.tg
        if leader.parent is not None:
            leader.parent.children.remove(leader)
            leader.parent = None
        self.pidns.tasks.pop(leader.tid, None)
        self._cgroup_leave(leader.tid)
        self._procfs_remove(leader.tid)
        if tg.pgrp is not None:
            tg.pgrp.members.remove(tg)
            if not tg.pgrp.members:
                self.pidns.process_groups.pop(tg.pgrp.pgid, None)
                sid = tg.pgrp.session.sid
                if not any(g.session.sid == sid for g in self.pidns.process_groups.values()):
                    self.pidns.sessions.pop(sid, None)
            tg.pgrp = None

    def wait(self, task: Task, pid: int = -1, *, untraced: bool = False) -> tuple[int, int] | None:
        """wait4(pid, WNOHANG | WUNTRACED?): (pid, status) of a child, or None if none ready.

        Raises ECHILD when there is no child to wait for.
        """
        candidates = [c for c in self._children_of(task.tg) if pid == -1 or c.tid == pid]
        if not candidates:
            raise SyscallError(errno.ECHILD, f"task {task.tid} has no child {pid}")
        for child in sorted(candidates, key=lambda c: c.tid):
            if child.state is TaskState.ZOMBIE and child.tg.exit_code is not None:
                status = child.tg.exit_code
                self._reap(child)
                return child.tid, status
            if untraced and child.tg.stopped and child.tg.stop_unreported:
                child.tg.stop_unreported = False
                return child.tid, (child.tg.stop_signal << 8) | 0x7F
        return None

    def getppid(self, task: Task) -> int:
        return task.parent.tgid if task.parent is not None else 0

    def setsid(self, task: Task) -> int:
        tg = task.tg
        if tg.tgid in self.pidns.process_groups:
            raise SyscallError(errno.EPERM, f"{tg.tgid} already leads a process group")
        session = Session(tg.tgid, tg.tgid)
        self.pidns.sessions[tg.tgid] = session
        self._leave_group(tg)
        self._join_group(tg, ProcessGroup(tg.tgid, session))
        return tg.tgid

    def setpgid(self, task: Task, pid: int = 0, pgid: int = 0) -> None:
        target = task.tg if pid in (0, task.tgid) else self.task(pid).tg
        pgid = pgid or target.tgid
        assert target.pgrp is not None
        session = target.pgrp.session
        if session.leader_tgid == target.tgid:
            raise SyscallError(errno.EPERM, f"{target.tgid} is a session leader")
        group = self.pidns.process_groups.get(pgid)
        if group is None:
            if pgid != target.tgid:
                raise SyscallError(errno.EPERM, f"no process group {pgid}")
            group = ProcessGroup(pgid, session)
        elif group.session is not session:
            raise SyscallError(errno.EPERM, f"process group {pgid} is in another session")
        self._leave_group(target)
        self._join_group(target, group)

    def _join_group(self, tg: ThreadGroup, group: ProcessGroup) -> None:
        tg.pgrp = group
        group.members.append(tg)
        self.pidns.process_groups[group.pgid] = group

    def _leave_group(self, tg: ThreadGroup) -> None:
        old = tg.pgrp
        if old is None:
            return
        old.members.remove(tg)
        tg.pgrp = None
        if not old.members:
            self.pidns.process_groups.pop(old.pgid, None)

    def _check_alive(self, task: Task) -> None:
        if task.state is TaskState.ZOMBIE:
            raise SyscallError(errno.ESRCH, f"task {task.tid} has exited")

    # -- signals ------------------------------------------------------------------------
    def sigaction(
        self, task: Task, signo: int, handler: int, flags: int = 0, mask: int = 0
    ) -> SigAction:
        if not 1 <= signo <= 64 or (signo in UNCATCHABLE and handler != 0):
            raise SyscallError(errno.EINVAL, f"cannot set a handler for signal {signo}")
        action = task.tg.sighand.get(signo)
        old = SigAction(action.handler, action.flags, action.mask, action.restorer)
        action.handler, action.flags, action.mask = handler, flags, mask
        if handler == SIG_IGN:  # setting SIG_IGN discards what is pending
            for queue in [task.tg.shared_pending, *(t.pending for t in task.tg.tasks)]:
                queue[:] = [i for i in queue if i.signo != signo]
        return old

    def sigprocmask(self, task: Task, mask: int) -> int:
        old = task.sigmask
        task.sigmask = mask & ~(sigbit(SIGKILL) | sigbit(SIGSTOP))  # never block KILL/STOP
        return old

    def kill(self, sender: Task | None, pid: int, signo: int) -> None:
        """kill(2): ``pid`` > 0 a process, < 0 a process group, 0 the sender's group."""
        if not 0 <= signo <= 64:
            raise SyscallError(errno.EINVAL, f"bad signal {signo}")
        info = SigInfo(
            signo, SI_USER, sender.tgid if sender else 0, sender.creds.uid if sender else 0
        )
        if pid > 0:
            targets = [self.task(pid).tg]
        else:
            pgid = -pid if pid < 0 else (sender.tg.pgrp.pgid if sender and sender.tg.pgrp else 0)
            group = self.pidns.process_groups.get(pgid)
            if group is None:
                raise SyscallError(errno.ESRCH, f"no process group {pgid}")
            targets = list(group.members)
        for tg in targets:
            if signo:
                self.send_signal(tg, SigInfo(info.signo, info.code, info.pid, info.uid))

    def tgkill(self, sender: Task | None, tid: int, signo: int) -> None:
        target = self.task(tid)
        self.send_signal(target, SigInfo(signo, SI_USER, sender.tgid if sender else 0))

    def send_signal(
        self, target: ThreadGroup | Task, info: SigInfo, *, timer: bool = False
    ) -> bool:
        """Queue a signal on a process or a thread; False if it was discarded."""
        tg = target if isinstance(target, ThreadGroup) else target.tg
        if tg.exit_code is not None:
            return False
        signo = info.signo
        if signo in (SIGCONT, SIGKILL):
            self._continue_group(tg, notify=signo == SIGCONT)
        if signo in STOP_SIGNALS:
            for queue in self._queues(tg):
                queue[:] = [i for i in queue if i.signo != SIGCONT]
        elif signo == SIGCONT:
            for queue in self._queues(tg):
                queue[:] = [i for i in queue if i.signo not in STOP_SIGNALS]
        action = tg.sighand.action_for(signo)
        blocked = (
            all(t.sigmask & sigbit(signo) for t in tg.live_tasks()) and signo not in UNCATCHABLE
        )
        if action in (SignalAction.IGNORE, SignalAction.CONTINUE) and not blocked:
            return False
        queue = tg.shared_pending if isinstance(target, ThreadGroup) else target.pending
        if signo < SIGRTMIN and not timer and any(i.signo == signo for i in queue):
            return False  # standard signals do not queue twice
        queue.append(info)
        return True

    def _queues(self, tg: ThreadGroup) -> list[list[SigInfo]]:
        return [tg.shared_pending, *(t.pending for t in tg.tasks)]

    def _continue_group(self, tg: ThreadGroup, *, notify: bool) -> None:
        if not tg.stopped:
            return
        tg.stopped = False
        tg.stop_unreported = False
        for task in tg.live_tasks():
            task.state = self._idle_state(task)
        leader = tg.leader
        if notify and leader is not None and leader.parent is not None:
            self.send_signal(leader.parent.tg, SigInfo(SIGCHLD, CLD_CONTINUED, tg.tgid))

    def _stop_group(self, tg: ThreadGroup, signo: int) -> None:
        tg.stopped = True
        tg.stop_signal = signo
        tg.stop_unreported = True
        for task in tg.live_tasks():
            task.state = TaskState.STOPPED
        leader = tg.leader
        if leader is not None and leader.parent is not None:
            ptg = leader.parent.tg
            if not ptg.sighand.get(SIGCHLD).flags & 1:  # SA_NOCLDSTOP
                self.send_signal(ptg, SigInfo(SIGCHLD, CLD_STOPPED, tg.tgid))

    def _idle_state(self, task: Task) -> TaskState:
        if task.blocked_on is not None:
            return TaskState.SLEEPING
        program = task.program
        return TaskState.RUNNING if program is not None and program.busy else TaskState.SLEEPING

    def _dequeue(self, task: Task) -> SigInfo | None:
        for queue in (task.pending, task.tg.shared_pending):
            best = None
            for info in queue:
                if info.signo == SIGKILL:
                    best = info
                    break
                if task.sigmask & sigbit(info.signo):
                    continue
                if task.state is TaskState.STOPPED:
                    continue
                if best is None or info.signo < best.signo:
                    best = info
            if best is not None:
                queue.remove(best)
                return best
        return None

    def _deliver_signals(self) -> bool:
        """Deliver one pending signal to each task that can take one; True if any."""
        delivered = False
        for task in self.tasks():
            if task.state is TaskState.ZOMBIE:
                continue
            info = self._dequeue(task)
            if info is None:
                continue
            delivered = True
            tg = task.tg
            if info.code == SI_TIMER and (timer := tg.posix_timers.get(info.timer_id)) is not None:
                timer.delivered()
            action = tg.sighand.action_for(info.signo)
            if action is SignalAction.TERMINATE:
                self.exit_group(tg, info.signo)
            elif action is SignalAction.STOP:
                self._stop_group(tg, info.signo)
            elif action is SignalAction.HANDLE:
                tg.handled[info.signo] = tg.handled.get(info.signo, 0) + 1
                if task.blocked_on is not None:  # F_SETLKW returns EINTR
                    self._cancel_wait(task)
                    task.state = self._idle_state(task)
                if task.program is not None:
                    task.program.on_signal(self, task, info)
        return delivered

    # -- files --------------------------------------------------------------------------
    def _table(self, task: Task) -> FDTable:
        self._check_alive(task)
        assert task.fd_table is not None
        return task.fd_table

    def open(self, task: Task, path: str, flags: int = O_RDONLY, mode: int = 0o644) -> int:
        table = self._table(task)
        cwd = task.fs.cwd if task.fs else None
        try:
            dentry = self.vfs.lookup(path, cwd)
            if flags & O_CREAT and flags & O_EXCL:
                raise SyscallError(errno.EEXIST, f"{path!r} exists")
        except SyscallError as exc:
            if exc.errno != errno.ENOENT or not flags & O_CREAT:
                raise
            dentry = self.vfs.create(path, mode & ~(task.fs.umask if task.fs else 0), self.now, cwd)
        inode = dentry.inode
        mount = self.vfs.mount_of(dentry)
        file: FileDescription
        if inode.kind is InodeKind.DIRECTORY:
            if flags & O_ACCMODE != O_RDONLY:
                raise SyscallError(errno.EISDIR, f"{path!r} is a directory")
            file = DirectoryFD(self.uid(), flags & ~O_CLOEXEC, dentry=dentry, mount=mount)
        elif flags & O_DIRECTORY:
            raise SyscallError(errno.ENOTDIR, f"{path!r} is not a directory")
        elif inode.kind is InodeKind.FIFO:
            assert inode.pipe is not None
            write_end = flags & O_ACCMODE != O_RDONLY
            file = PipeFD(
                self.uid(), flags & ~O_CLOEXEC, pipe=inode.pipe, inode=inode, write_end=write_end
            )
            if write_end:
                inode.pipe.writers += 1
            else:
                inode.pipe.readers += 1
        else:
            if flags & O_TRUNC and flags & O_ACCMODE != O_RDONLY:
                inode.truncate(self.memory_file, 0)
            file = RegularFD(
                self.uid(), flags & ~O_CLOEXEC, dentry=dentry, mount=mount, inode=inode
            )
        inode.open_count += 1
        return table.install(file, cloexec=bool(flags & O_CLOEXEC))

    def close(self, task: Task, fd: int) -> None:
        self._close_in(task, self._table(task), fd)

    def _close_in(self, task: Task, table: FDTable, fd: int) -> None:
        entry = table.remove(fd)
        file = entry.file
        inode = file.lock_inode()
        if inode is not None and inode.locks is not None and inode.locks.posix is not None:
            # POSIX locks: closing any fd of the inode drops all the process's locks on it.
            self._unlock(inode.locks.posix, task.tg.lock_owner, 0, LOCK_EOF)
        if file.refs == 0:
            self._release_file(file)

    def _release_posix_locks_in(self, tg: ThreadGroup, table: FDTable) -> None:
        for _, entry in table.items():
            inode = entry.file.lock_inode()
            if inode is not None and inode.locks is not None and inode.locks.posix is not None:
                self._unlock(inode.locks.posix, tg.lock_owner, 0, LOCK_EOF)

    def _release_file(self, file: FileDescription) -> None:
        """The last reference to a description went: drop its flock and OFD locks."""
        inode = file.lock_inode()
        if inode is not None and inode.locks is not None:
            for lockset in inode.locks.sets():
                self._unlock(lockset, file.id, 0, LOCK_EOF)
        if isinstance(file, PipeFD) and file.pipe is not None:
            if file.write_end:
                file.pipe.writers -= 1
            else:
                file.pipe.readers -= 1
        elif isinstance(file, SocketFD) and file.sock is not None:
            file.sock.shutdown()
        elif isinstance(file, TimerFD) and file in self.timerfds:
            self.timerfds.remove(file)
        if inode is not None:
            inode.open_count -= 1
            inode.release_if_unused(self.memory_file)

    def dup(self, task: Task, fd: int, minimum: int = 0, *, cloexec: bool = False) -> int:
        table = self._table(task)
        return table.install(table.get(fd).file, cloexec=cloexec, minimum=minimum)

    def dup2(self, task: Task, old: int, new: int) -> int:
        table = self._table(task)
        file = table.get(old).file
        if old == new:
            return new
        if new in table.entries:
            self._close_in(task, table, new)
        table.install_at(new, file)
        return new

    def set_cloexec(self, task: Task, fd: int, cloexec: bool) -> None:
        self._table(task).get(fd).cloexec = cloexec

    def _file(self, task: Task, fd: int) -> FileDescription:
        return self._table(task).get(fd).file

    def read(self, task: Task, fd: int, n: int) -> bytes:
        file = self._file(task, fd)
        if not file.readable():
            raise SyscallError(errno.EBADF, f"fd {fd} is not open for reading")
        if isinstance(file, RegularFD):
            assert file.inode is not None
            data = file.inode.read(self.memory_file, file.offset, n)
            file.offset += len(data)
            return data
        if isinstance(file, PipeFD):
            assert file.pipe is not None
            return file.pipe.read(n)
        if isinstance(file, SocketFD):
            assert file.sock is not None
            return file.sock.receive(n)
        if isinstance(file, TimerFD):
            return file.read_ticks().to_bytes(8, "little")
        raise SyscallError(errno.EINVAL, f"fd {fd} ({file.describe()}) cannot be read")

    def write(self, task: Task, fd: int, data: bytes) -> int:
        file = self._file(task, fd)
        if not file.writable():
            raise SyscallError(errno.EBADF, f"fd {fd} is not open for writing")
        if isinstance(file, RegularFD):
            assert file.inode is not None
            if file.flags & O_APPEND:
                file.offset = file.inode.size
            written = file.inode.write(self.memory_file, file.offset, data)
            file.offset += written
            file.inode.mtime_ns = self.timekeeper.realtime_ns
            return written
        if isinstance(file, PipeFD):
            assert file.pipe is not None
            return file.pipe.write(data)
        if isinstance(file, SocketFD):
            assert file.sock is not None
            return file.sock.deliver(data)
        raise SyscallError(errno.EINVAL, f"fd {fd} ({file.describe()}) cannot be written")

    def lseek(self, task: Task, fd: int, offset: int, whence: int = SEEK_SET) -> int:
        file = self._file(task, fd)
        if not isinstance(file, RegularFD | DirectoryFD):
            raise SyscallError(errno.ESPIPE, f"fd {fd} is not seekable")
        if whence == SEEK_SET:
            new = offset
        elif whence == SEEK_CUR:
            new = file.offset + offset
        elif whence == SEEK_END and isinstance(file, RegularFD) and file.inode is not None:
            new = file.inode.size + offset
        else:
            raise SyscallError(errno.EINVAL, f"bad whence {whence}")
        if new < 0:
            raise SyscallError(errno.EINVAL, f"negative offset {new}")
        file.offset = new
        return new

    def pipe(self, task: Task, *, cloexec: bool = False) -> tuple[int, int]:
        table = self._table(task)
        pipe = self.vfs.new_pipe()
        inode = self.vfs.new_inode(InodeKind.FIFO, 0o600, self.now, pipe=pipe, nlink=0, dev=0)
        read_end = PipeFD(self.uid(), O_RDONLY, pipe=pipe, inode=inode)
        write_end = PipeFD(self.uid(), O_WRONLY, pipe=pipe, inode=inode, write_end=True)
        pipe.readers, pipe.writers = 1, 1
        inode.open_count = 2
        return table.install(read_end, cloexec=cloexec), table.install(write_end, cloexec=cloexec)

    def mkfifo(self, task: Task, path: str, mode: int = 0o644) -> None:
        self.vfs.mkfifo(path, mode, self.now)

    def unlink(self, task: Task, path: str) -> None:
        self.vfs.unlink(path, self.memory_file, task.fs.cwd if task.fs else None)

    def getdents(self, task: Task, fd: int, count: int = 64) -> list[str]:
        file = self._file(task, fd)
        if not isinstance(file, DirectoryFD) or file.dentry is None:
            raise SyscallError(errno.ENOTDIR, f"fd {fd} is not a directory")
        names = sorted(file.dentry.children)[file.offset : file.offset + count]
        file.offset += len(names)
        return names

    def epoll_create(self, task: Task) -> int:
        return self._table(task).install(EpollFD(self.uid(), O_RDWR), cloexec=True)

    def epoll_ctl_add(self, task: Task, epfd: int, fd: int, events: int = 1) -> None:
        ep = self._file(task, epfd)
        if not isinstance(ep, EpollFD):
            raise SyscallError(errno.EINVAL, f"fd {epfd} is not an epoll instance")
        ep.interest[fd] = EpollItem(self._file(task, fd), events)

    # -- locks --------------------------------------------------------------------------
    def flock(self, task: Task, fd: int, op: int, *, block: bool = False) -> bool:
        """flock(2): LOCK_SH/LOCK_EX/LOCK_UN on the description; False if it would block.

        With ``block`` the task sleeps in the lock's queue instead (and True is returned
        only if the lock was taken at once).
        """
        file = self._file(task, fd)
        inode = file.lock_inode()
        if inode is None:
            raise SyscallError(errno.EINVAL, f"fd {fd} cannot be locked")
        if op == LOCK_UN:
            if inode.locks is not None and inode.locks.bsd is not None:
                self._unlock(inode.locks.bsd, file.id, 0, LOCK_EOF)
            return True
        if op not in (LOCK_SH, LOCK_EX):
            raise SyscallError(errno.EINVAL, f"bad flock operation {op}")
        kind = LockType.READ if op == LOCK_SH else LockType.WRITE
        lockset = inode.file_locks().bsd_set()
        return self._lock(task, lockset, inode, file.id, kind, 0, LOCK_EOF, block, flock=True)

    def fcntl_lock(
        self, task: Task, fd: int, cmd: str, type: LockType | None, start: int = 0, length: int = 0
    ) -> bool | tuple[LockType, int, int, int] | None:
        """fcntl F_SETLK(W)/F_GETLK and their OFD forms; ``type`` None means F_UNLCK.

        ``length`` 0 means "to end of file".  SETLK returns False if it would block (EAGAIN
        in Linux); SETLKW queues the task.  GETLK returns the blocking lock as
        ``(type, start, length, pid)`` or None.
        """
        file = self._file(task, fd)
        inode = file.lock_inode()
        if inode is None:
            raise SyscallError(errno.EINVAL, f"fd {fd} cannot be locked")
        if start < 0 or length < 0:
            raise SyscallError(errno.EINVAL, f"bad lock range start={start} length={length}")
        end = LOCK_EOF if length == 0 else start + length
        ofd = cmd.startswith("F_OFD")
        owner = file.id if ofd else task.tg.lock_owner
        if cmd in (LockCmd.GETLK, LockCmd.OFD_GETLK):
            if type is None or inode.locks is None or inode.locks.posix is None:
                return None
            found = inode.locks.posix.conflict(owner, type, start, end)
            if found is None:
                return None
            span = 0 if found.end == LOCK_EOF else found.end - found.start
            return found.type, found.start, span, found.pid
        if cmd not in (LockCmd.SETLK, LockCmd.SETLKW, LockCmd.OFD_SETLK, LockCmd.OFD_SETLKW):
            raise SyscallError(errno.EINVAL, f"bad fcntl lock command {cmd!r}")
        if type is None:
            if inode.locks is not None and inode.locks.posix is not None:
                self._unlock(inode.locks.posix, owner, start, end)
            return True
        if (type is LockType.READ and not file.readable()) or (
            type is LockType.WRITE and not file.writable()
        ):
            raise SyscallError(errno.EBADF, f"fd {fd} is not open for {type.name.lower()}ing")
        block = cmd in (LockCmd.SETLKW, LockCmd.OFD_SETLKW)
        lockset = inode.file_locks().posix_set()
        return self._lock(task, lockset, inode, owner, type, start, end, block, flock=False)

    def _lock(
        self,
        task: Task,
        lockset: LockSet,
        inode: Inode,
        owner: int,
        kind: LockType,
        start: int,
        end: int,
        block: bool,
        *,
        flock: bool,
    ) -> bool:
        if lockset.try_lock(owner, task.tgid, kind, start, end):
            return True
        if not block:
            return False
        if not flock:
            self._check_deadlock(task, lockset, owner, kind, start, end)
        waiter = LockWaiter(owner, task.tgid, kind, start, end, task.tid)
        lockset.enqueue(waiter)
        task.blocked_on, task.blocked_inode, task.blocked_flock = waiter, inode, flock
        task.state = TaskState.SLEEPING
        return False

    def _check_deadlock(
        self, task: Task, lockset: LockSet, owner: int, kind: LockType, start: int, end: int
    ) -> None:
        """EDEADLK when the holder in our way is itself waiting for a lock we hold."""
        found = lockset.conflict(owner, kind, start, end)
        if found is None or found.pid <= 0:
            return
        holder = self.pidns.tasks.get(found.pid)
        if holder is None:
            return
        for t in holder.tg.tasks:
            w = t.blocked_on
            if w is None or t.blocked_inode is None or t.blocked_inode.locks is None:
                continue
            their = t.blocked_inode.locks.posix
            if their is not None and not t.blocked_flock:
                blocker = their.conflict(w.owner, w.type, w.start, w.end)
                if blocker is not None and blocker.pid == task.tgid:
                    raise SyscallError(errno.EDEADLK, f"lock wait by {task.tid} would deadlock")

    def _unlock(self, lockset: LockSet, owner: int, start: int, end: int) -> None:
        if lockset.unlock(owner, start, end):
            for waiter in lockset.grant_waiters():
                waiting = self.pidns.tasks.get(waiter.tid)
                if waiting is not None and waiting.blocked_on is waiter:
                    waiting.blocked_on, waiting.blocked_inode = None, None
                    waiting.blocked_flock = False
                    if waiting.state is not TaskState.STOPPED:
                        waiting.state = self._idle_state(waiting)
                    if waiting.program is not None:
                        waiting.program.wake_ns = self.now

    def _cancel_wait(self, task: Task) -> None:
        if task.blocked_on is None or task.blocked_inode is None:
            return
        locks = task.blocked_inode.locks
        if locks is not None:
            for lockset in locks.sets():
                lockset.cancel(task.tid)
        task.blocked_on, task.blocked_inode, task.blocked_flock = None, None, False

    # -- memory -------------------------------------------------------------------------
    def mmap(
        self,
        task: Task,
        length: int,
        prot: int = PROT_READ | PROT_WRITE,
        kind: MapKind = MapKind.ANON_PRIVATE,
        *,
        fd: int | None = None,
        offset: int = 0,
        addr: int | None = None,
        name: str = "",
    ) -> int:
        mm = task.tg.mm
        assert mm is not None
        inode = None
        shmem = None
        if fd is not None:
            file = self._file(task, fd)
            if not isinstance(file, RegularFD) or file.inode is None:
                raise SyscallError(errno.ENODEV, f"fd {fd} cannot be mapped")
            if kind is MapKind.FILE_SHARED and prot & PROT_WRITE and not file.writable():
                raise SyscallError(errno.EACCES, f"fd {fd} is read-only; no shared writable map")
            inode = file.inode
            name = name or self.vfs.path_of(file.dentry) if file.dentry else name
        if kind is MapKind.ANON_SHARED:
            shmem = self.vfs.new_inode(InodeKind.REGULAR, 0o600, self.now, nlink=0)
            name = name or "/dev/zero (deleted)"
        return mm.mmap(
            length, prot, kind, inode=inode, offset=offset, addr=addr, name=name, shmem=shmem
        )

    def munmap(self, task: Task, addr: int, length: int) -> None:
        assert task.tg.mm is not None
        task.tg.mm.munmap(addr, length)

    def mprotect(self, task: Task, addr: int, length: int, prot: int) -> None:
        assert task.tg.mm is not None
        task.tg.mm.mprotect(addr, length, prot)

    def mem_read(self, task: Task, addr: int, n: int) -> bytes:
        assert task.tg.mm is not None
        return task.tg.mm.read(addr, n)

    def mem_write(self, task: Task, addr: int, data: bytes) -> None:
        assert task.tg.mm is not None
        task.tg.mm.write(addr, data)

    # -- timers -------------------------------------------------------------------------
    def setitimer(self, task: Task, which: int, value_ns: int, interval_ns: int = 0) -> None:
        if which not in ITIMER_SIGNALS:
            raise SyscallError(errno.EINVAL, f"bad itimer {which}")
        tg = task.tg
        base = {ITIMER_REAL: self.now, ITIMER_VIRTUAL: tg.utime_ns, ITIMER_PROF: tg.cpu_ns}[which]
        tg.itimers[which].arm(base, value_ns, interval_ns)

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
        return self._table(task).install(tfd)

    def timerfd_settime(self, task: Task, fd: int, value_ns: int, interval_ns: int = 0) -> None:
        tfd = self._file(task, fd)
        if not isinstance(tfd, TimerFD):
            raise SyscallError(errno.EINVAL, f"fd {fd} is not a timerfd")
        tfd.arm(self.timekeeper.now(tfd.clock), value_ns, interval_ns)

    def timerfd_gettime(self, task: Task, fd: int) -> tuple[int, int]:
        tfd = self._file(task, fd)
        if not isinstance(tfd, TimerFD):
            raise SyscallError(errno.EINVAL, f"fd {fd} is not a timerfd")
        return tfd.remaining(self.timekeeper.now(tfd.clock)), tfd.interval_ns

    # -- sockets ------------------------------------------------------------------------
    def _socket_fd(self, task: Task, sock: Socket) -> int:
        inode = self.vfs.new_inode(InodeKind.SOCKET, 0o777, self.now, nlink=0)
        inode.open_count = 1
        return self._table(task).install(SocketFD(self.uid(), O_RDWR, sock=sock, inode=inode))

    def socket_tcp(self, task: Task) -> int:
        return self._socket_fd(task, TCPSocket(self.uid(), options={1: 1}))

    def _tcp(self, task: Task, fd: int) -> TCPSocket:
        file = self._file(task, fd)
        if not isinstance(file, SocketFD) or not isinstance(file.sock, TCPSocket):
            raise SyscallError(errno.ENOTSOCK, f"fd {fd} is not a TCP socket")
        return file.sock

    def bind(self, task: Task, fd: int, host: str, port: int) -> None:
        sock = self._tcp(task, fd)
        if port and port in self.netstack.reserved_ports:
            raise SyscallError(errno.EADDRINUSE, f"port {port} is in use")
        sock.bind(host, port)
        if port:
            self.netstack.reserved_ports[port] = sock.id

    def listen(self, task: Task, fd: int, backlog: int = 511) -> None:
        self._tcp(task, fd).listen(backlog)

    def connect(self, task: Task, fd: int, host: str, port: int) -> None:
        """Loopback connect to a listener in this kernel bound to (host, port)."""
        client = self._tcp(task, fd)
        listener = self._find_listener(host, port)
        if listener is None:
            raise SyscallError(errno.ECONNREFUSED, f"nothing listens on {host}:{port}")
        if len(listener.accept_queue) >= listener.backlog:
            raise SyscallError(errno.EAGAIN, f"{host}:{port}: backlog full")
        local = ("127.0.0.1", 40000 + client.id % 20000)
        server = TCPSocket(self.uid(), SocketState.CONNECTED, local=listener.local, remote=local)
        client.state, client.local, client.remote = SocketState.CONNECTED, local, (host, port)
        client.peer, server.peer = server, client
        listener.accept_queue.append(server)

    def _find_listener(self, host: str, port: int) -> TCPSocket | None:
        for task in self.tasks():
            if task.fd_table is None:
                continue
            for _, entry in task.fd_table.items():
                sock = getattr(entry.file, "sock", None)
                if (
                    isinstance(sock, TCPSocket)
                    and sock.state is SocketState.LISTENING
                    and sock.local == (host, port)
                ):
                    return sock
        return None

    def accept(self, task: Task, fd: int) -> int:
        return self._socket_fd(task, self._tcp(task, fd).accept())

    def socketpair(self, task: Task) -> tuple[int, int]:
        a = UnixSocket(self.uid(), SocketState.CONNECTED)
        b = UnixSocket(self.uid(), SocketState.CONNECTED, peer=a)
        a.peer = b
        return self._socket_fd(task, a), self._socket_fd(task, b)

    # -- the step loop --------------------------------------------------------------------
    def run_for(self, ns: int) -> None:
        """Run the kernel for ``ns`` nanoseconds of simulated time, deterministically."""
        if self.paused:
            raise KernelError("the kernel is paused; resume it before running it")
        if ns < 0:
            raise KernelError(f"cannot run for a negative time ({ns} ns)")
        target = self.now + ns
        self._settle()
        while self.now < target:
            next_t = min(target, self._next_event())
            if self._busy_tasks():
                next_t = min(next_t, self.now + QUANTUM_NS)
            next_t = max(next_t, self.now + 1)
            self._account_cpu(next_t - self.now)
            self.timekeeper.advance(next_t - self.now)
            self._fire_timers()
            self._settle()
        self.steps += 1

    def _settle(self) -> None:
        for _ in range(1000):
            delivered = self._deliver_signals()
            ran = self._run_due_programs()
            if not delivered and not ran:
                return

    def _run_due_programs(self) -> bool:
        ran = False
        now = self.now
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

    def _account_cpu(self, dt: int) -> None:
        for task in self._busy_tasks():
            task.utime_ns += dt
            task.tg.utime_ns += dt
            task.tg.stime_ns += dt // 8  # the syscalls a busy task makes

    def _next_event(self) -> int:
        """The monotonic time of the next timer expiry or program wake-up."""
        now, real = self.now, self.timekeeper.realtime_ns
        best = 1 << 62
        for tg in self.thread_groups():
            if tg.exit_code is not None:
                continue
            real_it = tg.itimers[ITIMER_REAL]
            if real_it.expiry_ns:
                best = min(best, real_it.expiry_ns)
            for timer in tg.posix_timers.values():
                if timer.expiry_ns:
                    at = (
                        timer.expiry_ns
                        if timer.clock == CLOCK_MONOTONIC
                        else timer.expiry_ns - real + now
                    )
                    best = min(best, at)
        for tfd in self.timerfds:
            if tfd.expiry_ns:
                at = tfd.expiry_ns if tfd.clock == CLOCK_MONOTONIC else tfd.expiry_ns - real + now
                best = min(best, at)
        for task in self.pidns.tasks.values():
            if task.program is not None and task.program.wake_ns is not None:
                best = min(best, task.program.wake_ns)
        return best

    def _fire_timers(self) -> None:
        for tg in self.thread_groups():
            if tg.exit_code is not None:
                continue
            bases = (self.now, tg.utime_ns, tg.cpu_ns)
            for which, it in enumerate(tg.itimers):
                if it.expiry_ns and it.expire(bases[which]):
                    self.send_signal(tg, SigInfo(ITIMER_SIGNALS[which], 0x80))
            for timer in list(tg.posix_timers.values()):
                if timer.expiry_ns and timer.expire(self.timekeeper.now(timer.clock)):
                    info = SigInfo(timer.signo, SI_TIMER, timer_id=timer.id)
                    target: ThreadGroup | Task = tg
                    if timer.target_tid and timer.target_tid in self.pidns.tasks:
                        target = self.pidns.tasks[timer.target_tid]
                    if not self.send_signal(target, info, timer=True):
                        timer.delivered()  # discarded (ignored): nothing stays queued
        for tfd in self.timerfds:
            if tfd.expiry_ns:
                tfd.expire(self.timekeeper.now(tfd.clock))

    # -- pause / resume -------------------------------------------------------------------
    def pause(self) -> None:
        """Freeze: the step loop refuses to run and the host time is noted for resume."""
        if self.paused:
            return
        self.paused = True
        self.timekeeper.freeze()

    def resume(self, *, host_now_ns: int | None = None) -> None:
        """Thaw: clocks move forward by the host time spent frozen (never backwards),
        and timers that expired meanwhile fire, keeping their phase."""
        if not self.paused:
            return
        self.paused = False
        if self.timekeeper.thaw(host_now_ns):
            self._fire_timers()
            self._settle()

    # -- http workload ----------------------------------------------------------------------
    def _http(self) -> HttpService:
        if self.http is None:
            raise KernelError(f"workload {self.workload!r} serves no HTTP; use --workload http")
        return self.http

    def http_listen_address(self) -> tuple[str, int] | None:
        if self.http is None or self.http.listener.local is None:
            return None
        host, port = self.http.listener.local
        return (host, port) if port else None

    def set_http_listen_address(self, host: str, port: int) -> None:
        """Record the address the sandbox process bound on the host for this listener."""
        if not 0 < port < 65536:
            raise KernelError(f"bad port {port}: want 1-65535")
        self._http().listener.local = (host, port)

    def http_request(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        """Serve one request in kernel state: count it, log it; returns (status, body)."""
        http = self._http()
        if self.paused:
            raise KernelError("the kernel is paused; it cannot serve requests")
        if method.upper() not in ("GET", "HEAD", "POST"):
            status = 405
        else:
            status = 200
            http.requests += 1
        body = {
            "id": http.id,
            "requests": http.requests,
            "restores": http.restores,
            "method": method.upper(),
            "path": path,
            "uptime_ns": self.now,
        }
        if http.access_log is not None and http.server.state is not TaskState.ZOMBIE:
            line = f'{self.timekeeper.realtime_ns} "{method.upper()} {path}" {status}\n'
            log = http.access_log
            assert log.inode is not None
            log.offset = log.inode.size
            log.offset += log.inode.write(self.memory_file, log.offset, line.encode())
        return status, body

    def note_restored(self) -> None:
        """Count a restore in kernel state (the http workload reports it)."""
        self.restores += 1
        if self.http is not None:
            self.http.restores += 1

    # -- inspection -----------------------------------------------------------------------
    def fingerprint(self) -> str:
        """A canonical digest of everything a process could observe."""
        from ckpt.kernel.fingerprint import visible_state

        blob = json.dumps(visible_state(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def visible_state(self) -> dict[str, Any]:
        """The data ``fingerprint`` digests, for diffing two kernels in tests."""
        from ckpt.kernel.fingerprint import visible_state

        return visible_state(self)

    def describe(self) -> str:
        from ckpt.kernel.fingerprint import describe

        return describe(self)
