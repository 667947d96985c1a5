"""Operations on one group of a cgroup v1 hierarchy (hybrid and legacy hosts).

CPU quota is split over ``cpu.cfs_period_us`` and ``cpu.cfs_quota_us`` (``-1`` means
unlimited); usage is ``cpuacct.usage`` in nanoseconds; the freezer is
``freezer.state`` (``FROZEN`` / ``THAWED``, passing through ``FREEZING``).  A v1 freezer
keeps even SIGKILLed tasks stopped, so killing a frozen group thaws it afterwards.
"""

from __future__ import annotations

import signal
from pathlib import Path

from ckpt.cgroups import fs
from ckpt.cgroups.cpu import DEFAULT_PERIOD_US, quota_us
from ckpt.cgroups.v2 import signal_each, wait_until
from ckpt.errors import CgroupError

FROZEN = "FROZEN"
THAWED = "THAWED"


def set_cfs(
    fsys: fs.CgroupFS, group: Path, cpus: float | None, period_us: int = DEFAULT_PERIOD_US
) -> None:
    """Write the period, then the quota (``-1`` for no cap)."""
    quota = -1 if cpus is None else quota_us(cpus, period_us)
    fsys.write(group / fs.CFS_PERIOD, str(period_us))
    fsys.write(group / fs.CFS_QUOTA, str(quota))


def cfs(fsys: fs.CgroupFS, group: Path) -> tuple[int | None, int]:
    """The group's (quota_us or None for unlimited, period_us)."""
    qpath, ppath = group / fs.CFS_QUOTA, group / fs.CFS_PERIOD
    quota = fs.parse_int(fsys.read(qpath), qpath)
    period = fs.parse_int(fsys.read(ppath), ppath)
    if period <= 0 or quota == 0 or quota < -1:
        raise CgroupError(f"malformed CFS settings in {group}: quota {quota}, period {period}")
    return (None if quota == -1 else quota), period


def usage_usec(fsys: fs.CgroupFS, group: Path) -> int:
    path = group / fs.CPUACCT_USAGE
    return fs.parse_int(fsys.read(path), path) // 1000


def freezer_state(fsys: fs.CgroupFS, group: Path) -> str:
    path = group / fs.FREEZER_STATE
    state = fsys.read(path).strip()
    if state not in (FROZEN, THAWED, "FREEZING"):
        raise CgroupError(f"malformed {path}: unexpected state {state[:40]!r}")
    return state


def freeze(fsys: fs.CgroupFS, group: Path, timeout: float) -> None:
    """Write FROZEN until the state reads FROZEN (as runc does); on timeout, thaw."""
    path = group / fs.FREEZER_STATE

    def frozen() -> bool:
        if freezer_state(fsys, group) == FROZEN:
            return True
        fsys.write(path, FROZEN)
        return False

    fsys.write(path, FROZEN)
    try:
        wait_until(frozen, timeout, f"{path} to say FROZEN")
    except CgroupError:
        fsys.write(path, THAWED)
        raise


def thaw(fsys: fs.CgroupFS, group: Path, timeout: float = 5.0) -> None:
    fsys.write(group / fs.FREEZER_STATE, THAWED)
    wait_until(
        lambda: freezer_state(fsys, group) == THAWED,
        timeout,
        f"{group / fs.FREEZER_STATE} to say THAWED",
    )


def procs(fsys: fs.CgroupFS, group: Path) -> list[int]:
    path = group / fs.CGROUP_PROCS
    return fs.parse_pids(fsys.read(path), path)


def kill(fsys: fs.CgroupFS, group: Path, freezer: Path | None, timeout: float = 5.0) -> None:
    """SIGKILL every pid until none is left, thawing a v1 freezer so the kills land."""

    def pending() -> bool:
        left = procs(fsys, group)
        signal_each(lambda: left, signal.SIGKILL)
        if left and freezer is not None and freezer_state(fsys, freezer) != THAWED:
            fsys.write(freezer / fs.FREEZER_STATE, THAWED)
        return bool(left)

    wait_until(lambda: not pending(), timeout, f"the processes of {group} to exit")
