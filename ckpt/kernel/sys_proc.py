"""Processes and signals: fork, threads, exit and wait, sessions and groups, kill and delivery.

A mixin of ``Kernel`` (``ckpt/kernel/kernel.py``): the methods use the kernel's fields
(``self.pidns``, ``self.vfs``, ``self.memory_file``...) and each other across mixins.
"""

from __future__ import annotations

import errno
import heapq

from ckpt.errors import KernelError, SyscallError
from ckpt.kernel.abi import (
    CLD_CONTINUED,
    CLD_EXITED,
    CLD_KILLED,
    CLD_STOPPED,
    PROC_ENTRIES,
    SI_TIMER,
    SI_USER,
)
from ckpt.kernel.mm import MemoryManager
from ckpt.kernel.task import (
    SIG_IGN,
    SIGCHLD,
    SIGCONT,
    SIGKILL,
    SIGRTMIN,
    SIGSTOP,
    STOP_SIGNALS,
    UNCATCHABLE,
    Credentials,
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
from ckpt.kernel.vfs import FDTable, FSContext, InodeKind


class ProcessCalls:
    """Process and signal system calls, mixed into ``Kernel``."""

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
        self._events().mark(thread)  # it may take the group's shared pending signals
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
        self._events().mark(task)  # an unblocked signal may now be deliverable
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
        if action in (SignalAction.IGNORE, SignalAction.CONTINUE) and not (
            signo not in UNCATCHABLE
            and all(t.sigmask & sigbit(signo) for t in tg.tasks if t.state is not TaskState.ZOMBIE)
        ):
            return False  # discarded unless every thread blocks it
        queue = tg.shared_pending if isinstance(target, ThreadGroup) else target.pending
        if signo < SIGRTMIN and not timer and any(i.signo == signo for i in queue):
            return False  # standard signals do not queue twice
        queue.append(info)
        if isinstance(target, ThreadGroup):
            self._events().mark_group(tg)  # any of its threads may take it
        else:
            self._events().mark(target)
        return True

    def _queues(self, tg: ThreadGroup) -> list[list[SigInfo]]:
        return [tg.shared_pending, *(t.pending for t in tg.tasks)]

    def _continue_group(self, tg: ThreadGroup, *, notify: bool) -> None:
        if not tg.stopped:
            return
        tg.stopped = False
        tg.stop_unreported = False
        events = self._events()
        for task in tg.live_tasks():
            task.state = self._idle_state(task)
            events.mark(task)  # no longer stopped: what was held back can be delivered
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
        """The signal ``task`` takes next: SIGKILL first, else the lowest unblocked
        signal number (first queued among equals), own queue before the group's."""
        mask = task.sigmask
        stopped = task.state is TaskState.STOPPED
        for queue in (task.pending, task.tg.shared_pending):
            if not queue:
                continue
            best = None
            best_signo = 1 << 30
            for info in queue:
                signo = info.signo
                if signo == SIGKILL:
                    best = info
                    break
                if stopped or mask >> (signo - 1) & 1:
                    continue
                if signo < best_signo:
                    best, best_signo = info, signo
            if best is not None:
                queue.remove(best)
                return best
        return None

    def _deliver_signals(self) -> bool:
        """Deliver one pending signal to each task that can take one; True if any.

        Only tasks whose queues, mask or stop state changed are visited (the event
        index's ready set), in tid order as a walk over every task would; one marked
        during the round is visited in it if the walk had not reached it yet.
        """
        events = self._events()
        ready = events.take_ready()
        if not ready:
            return False
        order = sorted(ready)
        events.round = rnd = [order, -1, self.pidns.next_pid]
        delivered = False
        try:
            while order:
                tid = heapq.heappop(order)
                if tid <= rnd[1]:
                    continue  # marked twice
                rnd[1] = tid
                task = ready.get(tid)
                if task is None:
                    continue
                if task.state is TaskState.ZOMBIE:
                    del ready[tid]
                    continue
                info = self._dequeue(task)
                if info is None:
                    del ready[tid]  # nothing it can take until it is marked again
                    continue
                delivered = True
                self._deliver(task, info)
        finally:
            events.round = None
        return delivered

    def _deliver(self, task: Task, info: SigInfo) -> None:
        """Act on one dequeued signal: its handler, or its default action."""
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
