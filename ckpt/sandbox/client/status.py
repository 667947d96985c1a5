"""What a sandbox's status really is: its record checked against what is left of it.

A record says ``running`` until something writes otherwise; a sandbox killed from outside
writes nothing.  ``refresh`` believes the record only while one of the sandbox's verified
processes (``pids.py``), its cgroup's members or the peer of its socket is left, and
writes nothing itself, so ``list`` and ``state`` stay read-only.

Why a sandbox stopped is kept in its record's ``extra["stopped"]``: ``checkpointed`` and
``killed`` are written by the command that stopped it; one that ended by itself (or was
signalled, ``ckpt kill ID TERM``) writes no record, so ``refresh`` says ``exited`` with
the status its log's last line gives (``sandboxlog.exit_status``), or ``killed`` by the
signal sent when it said none.  ``status_text`` words it: ``exited (code 0)``.
"""

from __future__ import annotations

from ckpt.sandbox.client.group import group_procs, own_group
from ckpt.sandbox.client.pids import alive, is_ours, socket_owner
from ckpt.sandbox.wire.paths import (
    CREATING,
    PAUSED,
    RUNNING,
    STOPPED,
    UNREADABLE,
    Root,
    SandboxState,
)
from ckpt.sandbox.wire.sandboxlog import exit_status

STOPPED_KEY = "stopped"  # extra["stopped"]: {"reason": ..., "code": N, "signal": "TERM"}
SIGNALLED_KEY = "signalled"  # extra["signalled"]: the last signal `ckpt kill` sent
CHECKPOINTED = "checkpointed"
KILLED = "killed"
EXITED = "exited"


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
    st.extra[STOPPED_KEY] = ended_by_itself(root, st)
    return st


def ended_by_itself(root: Root, st: SandboxState) -> dict[str, object]:
    """Why a sandbox that no command stopped is gone: the exit status it logged, else
    the signal ``ckpt kill`` sent it, else an exit nobody saw (a crash, a kill from
    outside: ``code`` None)."""
    code = exit_status(root.log_path(st.id), st.pid) if st.pid else None
    sent = st.extra.get(SIGNALLED_KEY)
    if code is None and isinstance(sent, str):
        return {"reason": KILLED, "signal": sent}
    return {"reason": EXITED, "code": code}


def stop_reason(st: SandboxState) -> dict[str, object]:
    """The record's reason a stopped sandbox stopped (empty for a record without one)."""
    why = st.extra.get(STOPPED_KEY)
    return why if isinstance(why, dict) else {}


def live(root: Root, sandbox_id: str, verb: str, *, say_why: bool = False) -> SandboxState:
    """The record of a running or paused sandbox whose cgroup is ckpt's own; any other
    is refused in one line naming its status (with ``say_why``, why it stopped)."""
    from ckpt.errors import SandboxError

    st = refresh(root, sandbox_id)
    own_group(root, st, strict=True)
    if st.status not in (RUNNING, PAUSED):
        shown = status_text(st) if say_why else st.status
        raise SandboxError(f"cannot {verb} sandbox {sandbox_id}: it is {shown}")
    return st


def status_text(st: SandboxState) -> str:
    """The status as a person reads it: a stopped sandbox says why (``checkpointed``,
    ``killed``, ``killed (TERM)``, ``exited (code 0)``); others say their status."""
    if st.status != STOPPED:
        return st.status
    why = stop_reason(st)
    reason = why.get("reason")
    if reason == CHECKPOINTED:
        return CHECKPOINTED
    if reason == KILLED:
        signal = why.get("signal")
        if signal in (None, "KILL"):
            return KILLED
        # a record can be edited: only a signal's name is shown, nothing else it holds
        named = isinstance(signal, str) and signal.isalnum() and signal.isupper()
        return f"{KILLED} ({signal if named and len(signal) <= 8 else '?'})"
    if reason == EXITED:
        code = why.get("code")
        return f"{EXITED} (code {code})" if isinstance(code, int) else f"{EXITED} (code unknown)"
    return STOPPED


def unreadable(sandbox_id: str) -> SandboxState:
    """A stand-in for a record that cannot be read: nothing in it is known."""
    return SandboxState(
        id=sandbox_id, pid=0, status=UNREADABLE, workload="?", cgroup=None, created=""
    )
