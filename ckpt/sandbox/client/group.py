"""A sandbox's cgroup: made with its quota, opened by name, removed with what is in it.

ckpt acts only on its own groups: a sandbox's group is always this root's name for the
ID (``Root.cgroup_name``), never the one its record names.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from ckpt.errors import CgroupError, SandboxError
from ckpt.sandbox.wire.paths import Root, SandboxState

if TYPE_CHECKING:
    from ckpt.cgroups.base import BaseManager


def make_cgroup(
    root: Root, sandbox_id: str, cpus: float | None, ignore: bool, notes: list[str]
) -> BaseManager | None:
    """The sandbox's cgroup with its quota applied, or None when running without one."""
    if ignore:
        if cpus is not None:
            notes.append(f"--ignore-cgroups: CPU quota {cpus:g} not applied")
        return None
    from ckpt import cgroups

    name = root.cgroup_name(sandbox_id)
    remove_cgroup(name)  # a stale group of this root's, from a crashed run
    if cpus is not None:
        ok, reason = cgroups.available_for_quota()
        if not ok:
            raise CgroupError(
                f"cannot apply a CPU quota: {reason}; run as root or pass --ignore-cgroups"
            )
        return cgroups.create(name, cpus=cpus)
    try:
        mgr = cgroups.create(name)
    except CgroupError as exc:
        reason = str(exc)
    else:
        if not mgr.inert:
            return mgr
        reason = mgr.reason
    notes.append(f"running without a cgroup ({reason}); CPU is read from the process")
    return None


def open_cgroup(name: str | None) -> BaseManager | None:
    if not name:
        return None
    from ckpt import cgroups

    try:
        return cgroups.open_group(name)
    except CgroupError:
        return None


def remove_cgroup(name: str | None) -> None:
    """Kill whatever is left in the group and delete it (and this root's parent group
    once it is empty); quiet if it is already gone."""
    mgr = open_cgroup(name)
    if mgr is None:
        return
    try:
        if mgr.procs():
            with contextlib.suppress(CgroupError):
                mgr.thaw()
            mgr.kill()
        mgr.delete()
    except CgroupError as exc:
        raise CgroupError(f"cannot remove cgroup {name}: {exc}") from exc
    from ckpt import cgroups

    cgroups.remove_if_empty(str(Path(str(name)).parent))


def own_group(root: Root, st: SandboxState, *, strict: bool) -> str:
    """This sandbox's cgroup name: always this root's own name for the ID.  A record
    naming any other group was edited; ``strict`` refuses it, else it is ignored."""
    mine = root.cgroup_name(st.id)
    if st.cgroup not in (None, mine) and strict:
        raise SandboxError(
            f"sandbox {st.id}: its record names cgroup {st.cgroup!r}, not this root's "
            f"{mine!r}; refusing to act on it (check who edited {root.dir(st.id)})"
        )
    return mine


def group_procs(group: str) -> list[int]:
    mgr = open_cgroup(group)
    if mgr is None:
        return []
    try:
        return list(mgr.procs())
    except CgroupError:
        return []


def freezable(mgr: BaseManager | None) -> BaseManager | None:
    """``mgr`` if its group has a freezer; without one, pause freezes the kernel only."""
    if mgr is None or mgr.freezer_backend == "none":
        return None
    return mgr


def cpu_usec(mgr: BaseManager | None) -> int | None:
    if mgr is None:
        return None
    try:
        return int(mgr.cpu_usage_usec())
    except CgroupError:
        return None
