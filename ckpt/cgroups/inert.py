"""The stand-in when cgroups cannot be used (no cgroupfs, no privilege).

The sandbox must still run without a CPU quota, so this tracks the processes it was
given with psutil: CPU time from the processes themselves, freeze and thaw with
SIGSTOP/SIGCONT, kill with SIGKILL.  It says it is inert, and why, so callers and
``ckpt`` output can tell the user nothing is capped.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import psutil

from ckpt.cgroups.base import BaseManager
from ckpt.cgroups.cpu import quota_us
from ckpt.cgroups.stat import CgroupStat
from ckpt.cgroups.v2 import wait_until
from ckpt.errors import CgroupError


class InertManager(BaseManager):
    """Tracks pids without a cgroup; ``reason`` says why there is none."""

    inert = True
    cpu_backend = "none"
    freezer_backend = "signal"

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        self._procs: dict[int, psutil.Process] = {}
        self._cpu_usec: dict[
            int, tuple[int, int]
        ] = {}  # last seen, so exited processes still count

    @property
    def paths(self) -> dict[str, Path]:
        return {}

    def describe(self) -> str:
        return f"no cgroup for {self.name} (inert: {self.reason})"

    def set_cpu_quota(self, cpus: float | None) -> None:
        if cpus is not None:
            quota_us(cpus)
            raise CgroupError(
                f"cannot apply a CPU quota: {self.reason}; run as root or pass --ignore-cgroups"
            )

    def add_process(self, pid: int) -> None:
        try:
            self._procs[pid] = psutil.Process(pid)
        except psutil.NoSuchProcess:
            raise CgroupError(f"cannot track process {pid}: no such process") from None

    def _alive(self) -> list[psutil.Process]:
        live = []
        for proc in self._procs.values():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    live.append(proc)
            except psutil.NoSuchProcess:
                continue
        return live

    def procs(self) -> list[int]:
        return sorted(p.pid for p in self._alive())

    def _signal(self, sig: int) -> None:
        for proc in self._alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)

    def freeze(self, timeout: float = 5.0) -> None:
        self._signal(signal.SIGSTOP)

        def stopped() -> bool:
            try:
                return all(
                    p.status() in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE)
                    for p in self._alive()
                )
            except psutil.NoSuchProcess:
                return False

        wait_until(stopped, timeout, f"the processes of {self.name} to stop")

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self, timeout: float = 5.0) -> None:
        self._signal(signal.SIGKILL)
        self._signal(signal.SIGCONT)
        wait_until(lambda: not self._alive(), timeout, f"the processes of {self.name} to exit")

    def delete(self) -> None:
        left = self.procs()
        if left:
            raise CgroupError(
                f"group {self.name} still has processes ({', '.join(map(str, left))}); kill them first"
            )
        self._procs.clear()

    def _times(self) -> tuple[int, int]:
        user = system = 0
        for pid, proc in self._procs.items():
            try:
                t = proc.cpu_times()
                self._cpu_usec[pid] = (round(t.user * 1e6), round(t.system * 1e6))
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                pass
            u, s = self._cpu_usec.get(pid, (0, 0))
            user += u
            system += s
        return user, system

    def cpu_usage_usec(self) -> int:
        """CPU of the tracked processes, from psutil (no cgroup to ask)."""
        user, system = self._times()
        return user + system

    def stat(self) -> CgroupStat:
        user, system = self._times()
        rss = 0
        live = self._alive()
        for proc in live:
            with contextlib.suppress(psutil.NoSuchProcess):
                rss += proc.memory_info().rss
        return CgroupStat.from_values(
            usage_usec=user + system,
            user_usec=user,
            system_usec=system,
            memory_current=rss,
            pids_current=len(live),
        )
