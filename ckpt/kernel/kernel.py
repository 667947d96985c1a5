"""The kernel root: the checkpointed graph's root object and what ties it together.

``Kernel`` holds every subsystem (clocks, PID namespace, VFS, memory file, network stack,
namespaces).  Its system calls come from mixins, one module per area: ``sys_proc``
(processes and signals), ``sys_files`` (files and locks), ``sys_mm`` (memory),
``sys_timers`` (timers and the deterministic step loop ``run_for``), ``sys_net``
(sockets).  Here: helpers, pause/resume, the http workload's contract, and inspection
(``fingerprint()`` digests everything a process could observe, like zdtm's before/after
check; ``describe()`` is for humans).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import Any

from ckpt import state
from ckpt.errors import KernelError, SyscallError
from ckpt.kernel.abi import LOCK_EX, LOCK_SH, LOCK_UN, LockCmd
from ckpt.kernel.clock import Timekeeper
from ckpt.kernel.mm import MemoryFile
from ckpt.kernel.net import NetStack, TCPSocket
from ckpt.kernel.ns import BOOT_MESSAGES, CgroupNode, IPCNamespace, UTSNamespace, standard_cgroups
from ckpt.kernel.sys_files import FileCalls
from ckpt.kernel.sys_mm import MemoryCalls
from ckpt.kernel.sys_net import SocketCalls
from ckpt.kernel.sys_proc import ProcessCalls
from ckpt.kernel.sys_timers import TimerCalls
from ckpt.kernel.task import PIDNamespace, Task, TaskState, ThreadGroup
from ckpt.kernel.timers import TimerFD
from ckpt.kernel.vfs import VFS, RegularFD

__all__ = ["LOCK_EX", "LOCK_SH", "LOCK_UN", "HttpService", "Kernel", "LockCmd"]


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
class Kernel(ProcessCalls, FileCalls, MemoryCalls, TimerCalls, SocketCalls):
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
    # What is due next (timers by expiry, tasks that may take a signal): a cache of the
    # graph, rebuilt after a restore (``ckpt/kernel/events.py``).
    _event_index: Any = state.field(nosave=True, default=None)  # noqa: RUF009

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

    def http_request(
        self, method: str, path: str, body: bytes = b""
    ) -> tuple[int, dict[str, Any] | bytes]:
        """Serve one request in kernel state: count it, log it; returns (status, body).

        The server program answers the routes it owns (``Program.http_route``, a JSON
        object or raw bytes); every other request gets the counters and ``http_body``."""
        http = self._http()
        if self.paused:
            raise KernelError("the kernel is paused; it cannot serve requests")
        program = http.server.program
        routed = (
            program.http_route(self, http.server, method.upper(), path, body)
            if program is not None
            else None
        )
        if routed is not None:
            status, answer = routed
            if status < 400:
                http.requests += 1
            self._log_request(http, method, path, status)
            return status, answer
        if method.upper() not in ("GET", "HEAD", "POST"):
            status = 405
        else:
            status = 200
            http.requests += 1
        reply: dict[str, Any] = {
            "id": http.id,
            "requests": http.requests,
            "restores": http.restores,
            "method": method.upper(),
            "path": path,
            "uptime_ns": self.now,
        }
        if status == 200 and program is not None:
            reply.update(program.http_body(self, http.server, path))
        self._log_request(http, method, path, status)
        return status, reply

    def _log_request(self, http: HttpService, method: str, path: str, status: int) -> None:
        if http.access_log is not None and http.server.state is not TaskState.ZOMBIE:
            line = f'{self.timekeeper.realtime_ns} "{method.upper()} {path}" {status}\n'
            log = http.access_log
            assert log.inode is not None
            log.offset = log.inode.size
            log.offset += log.inode.write(self.memory_file, log.offset, line.encode())

    def note_restored(self) -> None:
        """Count a restore in kernel state (the http workload reports it)."""
        self.restores += 1
        if self.http is not None:
            self.http.restores += 1

    # -- inspection -----------------------------------------------------------------------
    def fingerprint(self) -> str:
        """A canonical digest of everything a process could observe."""
        # Imported here: only tests and the fingerprint RPC need them, and hashlib
        # (OpenSSL) is a measurable share of a sandbox process's start-up.
        import hashlib

        import msgspec.json

        from ckpt.kernel.fingerprint import visible_state

        blob = msgspec.json.encode(visible_state(self), order="sorted")
        return hashlib.sha256(blob).hexdigest()

    def visible_state(self) -> dict[str, Any]:
        """The data ``fingerprint`` digests, for diffing two kernels in tests."""
        from ckpt.kernel.fingerprint import visible_state

        return visible_state(self)

    def describe(self) -> str:
        from ckpt.kernel.fingerprint import describe

        return describe(self)
