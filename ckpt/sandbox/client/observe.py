"""Watching a sandbox from the CLI side: its tasks (``ckpt ps``), a stream of CPU,
memory and kernel figures (``ckpt events``), and waiting for it to end (``ckpt wait``).

Everything here reads: nothing is signalled or written.  A request goes to the
sandbox's own socket (this root's path for the ID) and must be answered by its recorded
pid; a paused sandbox whose cgroup is frozen cannot answer at all, so it is not asked
(``ps`` says so, ``events`` reports its cgroup's figures alone).  Every wait has a
deadline: the RPCs' ``RPC_TIMEOUT_S``, a sample's interval, ``wait``'s ``--timeout``
(and without one, slices of at most ``WAIT_SLICE_S`` between looks at the record).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ckpt.errors import CkptError, SandboxError, WaitTimeout
from ckpt.sandbox.client.group import freezable, open_cgroup, own_group
from ckpt.sandbox.client.pids import alive, wait_dead
from ckpt.sandbox.client.status import live, refresh, status_text, stop_reason
from ckpt.sandbox.wire import rpc
from ckpt.sandbox.wire.paths import PAUSED, RUNNING, STOPPED, UNREADABLE, Root, SandboxState

if TYPE_CHECKING:
    from ckpt.cgroups.base import BaseManager
    from ckpt.sandbox.wire import protocol as p

RPC_TIMEOUT_S = 10.0
WAIT_SLICE_S = 1.0
MIN_INTERVAL_S = 0.05


def _frozen(root: Root, st: SandboxState) -> bool:
    """Is the sandbox's process frozen by its cgroup (so it cannot answer)?"""
    if st.status != PAUSED or st.cgroup is None:
        return False
    return freezable(open_cgroup(own_group(root, st, strict=True))) is not None


def _ask(root: Root, st: SandboxState, request: p.Request) -> Any:
    return rpc.call(
        root.socket_path(st.id),
        request,
        what=f"sandbox {st.id}",
        peer_pid=st.pid,
        timeout=RPC_TIMEOUT_S,
    )


# -- ps --------------------------------------------------------------------------------


def tasks(root: Root, sandbox_id: str) -> p.TasksReply:
    """The tasks of the sandbox's kernel, by tid."""
    from ckpt.sandbox.wire.protocol import TasksRequest

    st = live(root, sandbox_id, "list the tasks of", say_why=True)
    if _frozen(root, st):
        raise SandboxError(
            f"sandbox {sandbox_id} is paused (its process is frozen and cannot answer); "
            f"`ckpt resume {sandbox_id}` first"
        )
    return _ask(root, st, TasksRequest())


def _fields(message: Any) -> dict[str, Any]:
    """Every field of a protocol message, defaults included (the wire omits them, a
    document for people and scripts keeps its keys whatever the values)."""
    return {name: getattr(message, name) for name in message.__struct_fields__}


def task_json(reply: p.TasksReply) -> dict[str, Any]:
    """``ckpt ps --json``: one document."""
    return {"tasks": [_fields(t) for t in reply.tasks], "omitted": reply.omitted}


# -- events ----------------------------------------------------------------------------


def _iso_now() -> str:
    now = time.time()
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    return f"{whole}.{int(now % 1 * 1000):03d}Z"


class Sampler:
    """One sandbox's figures, sample after sample.  The cgroup is opened once, so its
    stat plan (the files to read, their buffers) is built once and every sample is the
    lean read of ``cgroups.stat``."""

    def __init__(self, root: Root, sandbox_id: str) -> None:
        self.root = root
        self.st = live(root, sandbox_id, "watch", say_why=True)
        self.mgr: BaseManager | None = open_cgroup(own_group(root, self.st, strict=True))

    def sample(self) -> dict[str, Any] | None:
        """One ``stats`` event, or None once the sandbox has stopped."""
        from ckpt.sandbox.wire.protocol import CountersRequest

        st = refresh(self.root, self.st.id)
        if st.status not in (RUNNING, PAUSED) or st.pid != self.st.pid:
            return None
        kernel: dict[str, Any] | None = None
        cpu_usec: int | None = None
        if not _frozen(self.root, st):
            try:
                reply: p.CountersReply = _ask(self.root, st, CountersRequest())
            except CkptError:
                if not alive(st.pid, st.pid_start):
                    return None  # it exited between the look at its record and the ask
                raise
            cpu_usec = reply.cpu_usec
            if reply.booted:
                kernel = _fields(reply)
                for key in ("booted", "cpu_usec"):
                    del kernel[key]
        data: dict[str, Any] = {"status": st.status, "cgroup": self.mgr is not None}
        data.update(self._cgroup(cpu_usec))
        data["kernel"] = kernel
        return {"type": "stats", "id": st.id, "time": _iso_now(), "data": data}

    def _cgroup(self, process_cpu_usec: int | None) -> dict[str, Any]:
        """CPU, memory and pids from the cgroup (one lean read), else the CPU the
        sandbox process counted itself."""
        if self.mgr is None:
            return {
                "cpu": {"usage_usec": process_cpu_usec, "source": "process"},
                "memory": None,
                "pids": None,
            }
        try:
            stat = self.mgr.stat()
        except CkptError:
            return {"cpu": None, "memory": None, "pids": None}
        return {
            "cpu": {
                "usage_usec": stat.usage_usec,
                "user_usec": stat.user_usec,
                "system_usec": stat.system_usec,
                "throttling": {
                    "periods": stat.nr_periods,
                    "throttled_periods": stat.nr_throttled,
                    "throttled_usec": stat.throttled_usec,
                },
                "source": "cgroup",
            },
            "memory": {"current": stat.memory_current, "peak": stat.memory_peak},
            "pids": {"current": stat.pids_current},
        }


def events(
    root: Root, sandbox_id: str, *, interval: float, count: int | None = None
) -> Iterator[dict[str, Any]]:
    """A ``stats`` event every ``interval`` seconds until the sandbox stops (or
    ``count`` events); the wait between two is on its process, so its exit ends the
    stream then, not an interval later."""
    interval = max(MIN_INTERVAL_S, interval)
    sampler = Sampler(root, sandbox_id)
    sent = 0
    next_at = time.monotonic()
    while count is None or sent < count:
        event = sampler.sample()
        if event is None:
            return
        yield event
        sent += 1
        if count is not None and sent >= count:
            return
        next_at += interval
        left = max(0.0, next_at - time.monotonic())
        st = sampler.st
        if st.pid and st.pid_start and alive(st.pid, st.pid_start):
            wait_dead(st.pid, st.pid_start, left)  # an exit ends the stream at once
        else:
            time.sleep(left)


# -- wait ------------------------------------------------------------------------------


def wait(root: Root, sandbox_id: str, timeout: float | None = None) -> SandboxState:
    """Block until the sandbox has stopped, and return its state (``stop_reason``
    says why).  With ``timeout``, raise ``WaitTimeout`` (exit 124) once it passes."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        st = refresh(root, sandbox_id)
        if st.status in (STOPPED, UNREADABLE):
            return st
        left = WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(
                f"sandbox {sandbox_id} is still {st.status} after {timeout:g} s "
                f"(`ckpt kill {sandbox_id}` stops it)"
            )
        step = min(left, WAIT_SLICE_S)
        if st.pid and st.pid_start and alive(st.pid, st.pid_start):
            wait_dead(st.pid, st.pid_start, step)  # a pidfd: wakes the moment it exits
        else:
            time.sleep(min(step, 0.1))  # creating, or a process found by its socket


def exit_json(st: SandboxState) -> dict[str, Any]:
    """``ckpt wait --json``: the sandbox, how it ended, and its exit status when known."""
    why = stop_reason(st)
    return {
        "id": st.id,
        "status": status_text(st),
        "reason": why.get("reason"),
        "exit_code": why.get("code"),
        "signal": why.get("signal"),
    }
