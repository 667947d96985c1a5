"""Operations on one group of the unified (cgroup2) tree.

Facts from the kernel's cgroup-v2 documentation, as containerd's ``cgroup2`` manager
uses them: a controller must be enabled in every ancestor's ``cgroup.subtree_control``
before a group can use it; ``cgroup.freeze`` freezes and ``cgroup.events`` reports
``frozen 1`` once every task has stopped; ``cgroup.kill`` (Linux 5.14+) kills every
task, and without it we SIGKILL each pid until the group is empty.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

from ckpt.cgroups import fs
from ckpt.cgroups.cpu import DEFAULT_PERIOD_US, format_cpu_max, parse_cpu_max
from ckpt.errors import CgroupError

POLL_START_S = 0.001
POLL_MAX_S = 0.02


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``check()`` with a growing sleep until it is true or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    delay = POLL_START_S
    while not check():
        if time.monotonic() >= deadline:
            raise CgroupError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, POLL_MAX_S)


def controllers(fsys: fs.CgroupFS, group: Path) -> set[str]:
    """Controllers available to a group (its ``cgroup.controllers``)."""
    return set(fsys.read(group / fs.CGROUP_CONTROLLERS).split())


def create(
    fsys: fs.CgroupFS, mount: Path, rel: PurePosixPath, wanted: Iterable[str]
) -> tuple[list[Path], set[str]]:
    """mkdir ``mount/rel`` (and missing parents), enabling ``wanted`` controllers on the way.

    Returns the directories this call created (parents first) and the controllers the
    new group can use.  On failure the caller removes the returned directories, so we
    hand them over through the exception's ``made`` attribute.
    """
    made: list[Path] = []
    enabled = set(wanted)
    current = mount
    try:
        for part in rel.parts:
            enabled = _enable(fsys, current, enabled)
            current = current / part
            if fsys.mkdir(current):
                made.append(current)
    except CgroupError as exc:
        exc.made = made  # type: ignore[attr-defined]
        raise
    return made, enabled


def _enable(fsys: fs.CgroupFS, parent: Path, wanted: set[str]) -> set[str]:
    """Enable the available subset of ``wanted`` for ``parent``'s children."""
    available = wanted & controllers(fsys, parent)
    active = set(fsys.read(parent / fs.CGROUP_SUBTREE_CONTROL).split())
    missing = sorted(available - active)
    if missing:
        fsys.write(parent / fs.CGROUP_SUBTREE_CONTROL, " ".join("+" + c for c in missing))
    return available


def set_cpu_max(
    fsys: fs.CgroupFS, group: Path, cpus: float | None, period_us: int = DEFAULT_PERIOD_US
) -> None:
    """``cpu.max`` = ``"<quota> <period>"`` (or ``"max <period>"`` for no cap)."""
    fsys.write(group / fs.CPU_MAX, format_cpu_max(cpus, period_us))


def cpu_max(fsys: fs.CgroupFS, group: Path) -> tuple[int | None, int]:
    """The group's (quota_us or None, period_us)."""
    path = group / fs.CPU_MAX
    return parse_cpu_max(fsys.read(path), path)


def events(fsys: fs.CgroupFS, group: Path) -> dict[str, str]:
    path = group / fs.CGROUP_EVENTS
    return fs.parse_keyed(fsys.read(path), path)


def freeze(fsys: fs.CgroupFS, group: Path, timeout: float) -> None:
    """Write 1 to ``cgroup.freeze`` and wait for ``frozen 1``; on timeout, thaw again."""
    fsys.write(group / fs.CGROUP_FREEZE, "1")
    try:
        wait_until(
            lambda: events(fsys, group).get("frozen") == "1",
            timeout,
            f"{group / fs.CGROUP_EVENTS} to say 'frozen 1'",
        )
    except CgroupError:
        fsys.write(group / fs.CGROUP_FREEZE, "0")
        raise


def thaw(fsys: fs.CgroupFS, group: Path, timeout: float = 5.0) -> None:
    fsys.write(group / fs.CGROUP_FREEZE, "0")
    wait_until(
        lambda: events(fsys, group).get("frozen") != "1",
        timeout,
        f"{group / fs.CGROUP_EVENTS} to say 'frozen 0'",
    )


def procs(fsys: fs.CgroupFS, group: Path) -> list[int]:
    path = group / fs.CGROUP_PROCS
    return fs.parse_pids(fsys.read(path), path)


def kill(fsys: fs.CgroupFS, group: Path, timeout: float = 5.0) -> None:
    """Kill every task: ``cgroup.kill`` when the kernel has it, else SIGKILL each pid."""
    if fsys.exists(group / fs.CGROUP_KILL):
        fsys.write(group / fs.CGROUP_KILL, "1")
    else:
        signal_each(lambda: procs(fsys, group), signal.SIGKILL)
    wait_until(lambda: not _kill_pending(fsys, group), timeout, f"the processes of {group} to exit")


def _kill_pending(fsys: fs.CgroupFS, group: Path) -> bool:
    """Still tasks left?  Repeat the fallback's SIGKILL for any that joined meanwhile."""
    left = procs(fsys, group)
    if left and not fsys.exists(group / fs.CGROUP_KILL):
        signal_each(lambda: left, signal.SIGKILL)
    return bool(left)


def signal_each(pids: Callable[[], Iterable[int]], sig: int) -> None:
    """Send ``sig`` to every pid; ones that already exited are fine."""
    for pid in pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
