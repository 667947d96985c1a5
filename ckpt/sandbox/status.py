"""What a sandbox's status really is: its record checked against what is left of it.

A record says ``running`` until something writes otherwise; a sandbox killed from outside
writes nothing.  ``refresh`` believes the record only while one of the sandbox's verified
processes (``pids.py``), its cgroup's members or the peer of its socket is left, and
writes nothing itself, so ``list`` and ``state`` stay read-only.
"""

from __future__ import annotations

from ckpt.sandbox.group import group_procs, own_group
from ckpt.sandbox.paths import CREATING, PAUSED, RUNNING, STOPPED, UNREADABLE, Root, SandboxState
from ckpt.sandbox.pids import alive, is_ours, socket_owner


def _creator_alive(st: SandboxState) -> bool:
    """Is the CLI that is creating this sandbox still at work?"""
    by = st.extra.get("creating_by")
    if not (isinstance(by, list) and len(by) == 2):
        return False
    try:
        return alive(int(by[0]), float(by[1]))
    except (TypeError, ValueError):
        return False


def refresh(root: Root, sandbox_id: str) -> SandboxState:
    """A sandbox's state as it really is; writes nothing (``list`` and ``state`` are
    read-only).  A sandbox none of whose processes is left shows as stopped; one whose
    creating CLI died part-way shows as creating while any of it remains."""
    st = root.read(sandbox_id)
    if st.status not in (RUNNING, PAUSED, CREATING):
        return st
    if st.status == CREATING and _creator_alive(st):
        return st
    group = own_group(root, st, strict=False)
    if is_ours(root, st, group) or group_procs(group) or socket_owner(root, st, group):
        return st
    st.status = STOPPED
    st.address = None
    return st


def unreadable(sandbox_id: str) -> SandboxState:
    """A stand-in for a record that cannot be read: nothing in it is known."""
    return SandboxState(
        id=sandbox_id, pid=0, status=UNREADABLE, workload="?", cgroup=None, created=""
    )
