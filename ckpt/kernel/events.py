"""What can happen next: armed timers by expiry and tasks that may take a signal.

The step loop used to find the next timer by walking every timer of every thread group,
and to deliver signals by walking every task, at every step: a sandbox with thousands of
timers spent its time looking, not firing.  ``EventIndex`` keeps

- two heaps of armed timers keyed by expiry, one per clock (a realtime timer's
  monotonic due time moves when realtime is stepped on resume; its realtime expiry does
  not), and the few thread groups with a CPU-time itimer, checked at every step;
- the tasks whose signal queues changed since they last had nothing to take.

It is a cache beside the graph (the kernel keeps it in a ``nosave`` field and rebuilds it
from the graph after a restore), so entries go stale instead of being removed: an entry
counts only while its timer still has that expiry and still belongs to a live group.
The order in which due timers fire and tasks take signals is the order the walks had
(thread groups by id; ITIMER_REAL, VIRTUAL, PROF, then POSIX timers by id; timerfds
last, by id; tasks by tid), so a run is the same run, step for step.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from ckpt.kernel.clock import CLOCK_REALTIME
from ckpt.kernel.task import TaskState
from ckpt.kernel.timers import ITIMER_PROF, ITIMER_REAL, ITIMER_VIRTUAL, PosixTimer, TimerFD

if TYPE_CHECKING:
    from ckpt.kernel.kernel import Kernel
    from ckpt.kernel.task import Task, ThreadGroup

# Entry kinds; their order is the firing order within one thread group.
K_REAL, K_VIRTUAL, K_PROF, K_POSIX, K_TIMERFD = ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF, 3, 4
NEVER = 1 << 62


class EventIndex:
    """Timers by expiry and tasks that may have a deliverable signal (see module doc)."""

    __slots__ = ("_mono", "_real", "_seq", "cpu_groups", "groups", "ready", "round", "tfds")

    def __init__(self) -> None:
        self._mono: list[tuple[int, int, int, Any, Any]] = []
        self._real: list[tuple[int, int, int, Any, Any]] = []
        self._seq = 0
        self.cpu_groups: dict[int, ThreadGroup] = {}  # tgid -> group with a CPU itimer
        self.tfds: dict[int, TimerFD] = {}  # id(timerfd) -> timerfd still open
        self.ready: dict[int, Task] = {}  # tid -> task that may take a signal
        self.groups: dict[int, ThreadGroup] = {}  # tgid -> group with a new shared signal
        # While signals are being delivered: [heap of tids still to visit this round,
        # tid being visited, first tid allocated after the round began].
        self.round: list[Any] | None = None

    @classmethod
    def build(cls, k: Kernel) -> EventIndex:
        """Index a kernel from its graph (after construction or a restore)."""
        idx = cls()
        for tg in k.pidns.thread_groups():
            if tg.exit_code is not None:
                continue
            idx.itimer_armed(tg, ITIMER_REAL)
            idx.itimer_armed(tg, ITIMER_VIRTUAL)
            for timer in tg.posix_timers.values():
                idx.posix_armed(tg, timer)
        for tfd in k.timerfds:
            idx.timerfd_opened(tfd)
            idx.timerfd_armed(tfd)
        idx.ready = dict(k.pidns.tasks)
        return idx

    # -- timers: what arms them tells the index ------------------------------------------
    def _push(self, heap: list[Any], at: int, kind: int, obj: Any, tg: Any) -> None:
        self._seq += 1
        heapq.heappush(heap, (at, self._seq, kind, obj, tg))

    def itimer_armed(self, tg: ThreadGroup, which: int) -> None:
        if which == ITIMER_REAL:
            it = tg.itimers[ITIMER_REAL]
            if it.expiry_ns:
                self._push(self._mono, it.expiry_ns, K_REAL, it, tg)
        elif any(tg.itimers[w].expiry_ns for w in (ITIMER_VIRTUAL, ITIMER_PROF)):
            self.cpu_groups[tg.tgid] = tg

    def posix_armed(self, tg: ThreadGroup, timer: PosixTimer) -> None:
        if timer.expiry_ns:
            heap = self._real if timer.clock == CLOCK_REALTIME else self._mono
            self._push(heap, timer.expiry_ns, K_POSIX, timer, tg)

    def timerfd_opened(self, tfd: TimerFD) -> None:
        self.tfds[id(tfd)] = tfd

    def timerfd_closed(self, tfd: TimerFD) -> None:
        self.tfds.pop(id(tfd), None)

    def timerfd_armed(self, tfd: TimerFD) -> None:
        if tfd.expiry_ns and id(tfd) in self.tfds:
            heap = self._real if tfd.clock == CLOCK_REALTIME else self._mono
            self._push(heap, tfd.expiry_ns, K_TIMERFD, tfd, None)

    def _valid(self, entry: tuple[int, int, int, Any, Any]) -> bool:
        at, _, kind, obj, tg = entry
        if obj.expiry_ns != at:
            return False
        if kind == K_TIMERFD:
            return self.tfds.get(id(obj)) is obj
        if tg.exit_code is not None:
            return False
        return kind != K_POSIX or tg.posix_timers.get(obj.id) is obj

    def _top(self, heap: list[Any]) -> int:
        while heap:
            if self._valid(heap[0]):
                return heap[0][0]
            heapq.heappop(heap)
        return NEVER

    def next_expiry(self, now: int, realtime: int) -> int:
        """The monotonic time of the next monotonic or realtime timer expiry."""
        best = self._top(self._mono)
        real_at = self._top(self._real)
        if real_at != NEVER:
            best = min(best, real_at - realtime + now)
        return best

    def _pop_due(self, heap: list[Any], now: int, out: dict[int, Any]) -> None:
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if self._valid(entry):
                out[id(entry[3])] = entry

    def due(self, now: int, realtime: int) -> list[tuple[int, Any, Any]]:
        """Every armed timer that has expired, as (kind, timer, group), in firing order.

        Popped from the index: the caller re-arms what is still armed after firing.
        """
        found: dict[int, Any] = {}
        self._pop_due(self._mono, now, found)
        self._pop_due(self._real, realtime, found)
        out = [(e[2], e[3], e[4]) for e in found.values()]
        for tgid, tg in list(self.cpu_groups.items()):
            its = tg.itimers
            if tg.exit_code is not None or not (
                its[ITIMER_VIRTUAL].expiry_ns or its[ITIMER_PROF].expiry_ns
            ):
                del self.cpu_groups[tgid]
                continue
            bases = (0, tg.utime_ns, tg.cpu_ns)
            for which in (ITIMER_VIRTUAL, ITIMER_PROF):
                it = its[which]
                if it.expiry_ns and it.expiry_ns <= bases[which]:
                    out.append((which, it, tg))
        if len(out) > 1:
            out.sort(key=_firing_order)
        return out

    # -- signals --------------------------------------------------------------------
    def mark(self, task: Task) -> None:
        """``task`` may have a signal to take (queued, unmasked, or continued)."""
        tid = task.tid
        self.ready[tid] = task
        r = self.round
        if r is not None and r[1] < tid < r[2]:
            heapq.heappush(r[0], tid)  # still ahead in this round: visit it in this round

    def mark_group(self, tg: ThreadGroup) -> None:
        """A signal was queued for the whole group: any thread may take it.  Between
        rounds the group is noted once however many signals it gets; ``take_ready``
        marks its threads when the next round starts."""
        if self.round is None:
            self.groups[tg.tgid] = tg
            return
        for task in tg.tasks:
            self.mark(task)

    def take_ready(self) -> dict[int, Task]:
        """The ready set for a new round, with the noted groups' threads added.

        A stopped thread is left out: only SIGKILL reaches it, and sending SIGKILL
        continues the group, which marks its threads one by one.
        """
        ready = self.ready
        if self.groups:
            for tg in self.groups.values():
                for task in tg.tasks:
                    if task.state is not TaskState.STOPPED:
                        ready[task.tid] = task
            self.groups.clear()
        return ready


def _firing_order(item: tuple[int, Any, Any]) -> tuple[int, int, int, int]:
    kind, obj, tg = item
    if kind == K_TIMERFD:
        return (1, 0, kind, obj.id)
    return (0, tg.tgid, kind, obj.id if kind == K_POSIX else 0)
