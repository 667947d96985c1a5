"""Signals and verbs over every sandbox: ``ckpt kill ID [SIGNAL]``, ``kill --all`` and
``delete --all``.

``SIGKILL`` is ``lifecycle.kill``: every process of the sandbox, its cgroup freed, its
record stopped.  Any other signal goes to the sandbox's verified process only (start
time, cgroup or socket peer: ``pids.is_ours``), through a pidfd opened before the last
check, so a pid reused in between is never signalled; the sandbox decides what the
signal means (``TERM``: it exits, status 0) and ``ckpt state`` says how it ended.
"""

from __future__ import annotations

import contextlib
import os
import signal as _signal
from collections.abc import Callable
from dataclasses import dataclass

from ckpt.errors import CkptError, SandboxError
from ckpt.sandbox.client.group import own_group
from ckpt.sandbox.client.pids import alive, is_ours
from ckpt.sandbox.client.status import SIGNALLED_KEY, refresh, status_text
from ckpt.sandbox.wire.paths import PAUSED, RUNNING, STOPPED, Root, SandboxState


def parse_signal(text: str) -> _signal.Signals:
    """``TERM``, ``SIGTERM``, ``term`` or ``15`` as a signal; anything else is an error
    that lists a few."""
    word = text.strip().upper()
    try:
        if word.isdigit():
            return _signal.Signals(int(word))
        return _signal.Signals[word if word.startswith("SIG") else f"SIG{word}"]
    except (KeyError, ValueError):
        raise SandboxError(
            f"unknown signal {text!r}: give a name such as TERM, INT, HUP or KILL, or its "
            "number (`kill -l` lists them)"
        ) from None


def short_name(signo: _signal.Signals) -> str:
    """``SIGTERM`` -> ``TERM``, as runsc and kill(1) print it."""
    return signo.name.removeprefix("SIG")


def kill(root: Root, sandbox_id: str, signo: _signal.Signals = _signal.SIGKILL) -> SandboxState:
    """Send ``signo`` to the sandbox: SIGKILL stops all of it (``lifecycle.kill``);
    another signal goes to its verified process, and is noted in its record so that
    ``ckpt state`` can say it was killed by it if it dies without saying why."""
    if signo == _signal.SIGKILL:
        from ckpt.sandbox.client import lifecycle

        return lifecycle.kill(root, sandbox_id)
    st = refresh(root, sandbox_id)
    group = own_group(root, st, strict=True)
    if st.status not in (RUNNING, PAUSED) or not is_ours(root, st, group):
        raise SandboxError(
            f"cannot send {short_name(signo)} to sandbox {sandbox_id}: it is "
            f"{status_text(st)}, with no process of its own to signal"
        )
    previous = st.extra.get(SIGNALLED_KEY)
    st.extra[SIGNALLED_KEY] = short_name(signo)
    root.write(st)  # first: a sandbox that dies at once is still known as signalled
    try:
        _send(st, signo)
    except BaseException:
        if previous is None:
            st.extra.pop(SIGNALLED_KEY, None)
        else:
            st.extra[SIGNALLED_KEY] = previous
        with contextlib.suppress(CkptError):
            root.write(st)
        raise
    return st


def _send(st: SandboxState, signo: _signal.Signals) -> None:
    """Signal the recorded pid through a pidfd, checked to still be the sandbox after
    the pidfd was opened (the pidfd then names that process, whatever the pid becomes)."""
    try:
        pidfd = os.pidfd_open(st.pid)
    except ProcessLookupError:
        raise SandboxError(f"sandbox {st.id} exited before it could be signalled") from None
    try:
        if not alive(st.pid, st.pid_start):
            raise SandboxError(f"sandbox {st.id} exited before it could be signalled")
        _signal.pidfd_send_signal(pidfd, signo)
    except ProcessLookupError:
        raise SandboxError(f"sandbox {st.id} exited before it could be signalled") from None
    finally:
        os.close(pidfd)


@dataclass
class Outcome:
    """What a verb did to one sandbox of ``--all``: its state, or the error's line."""

    id: str
    state: SandboxState | None = None
    error: str | None = None


def each(
    root: Root, verb: Callable[[str], SandboxState | None], wanted: Callable[[str], bool]
) -> list[Outcome]:
    """``verb`` on every sandbox under the root that ``wanted`` picks, one after the
    other; a failure is noted and the others go on."""
    out = []
    for sandbox_id in root.ids():
        try:
            if not wanted(sandbox_id):
                continue
            out.append(Outcome(sandbox_id, verb(sandbox_id)))
        except CkptError as exc:
            out.append(Outcome(sandbox_id, error=str(exc)))
    return out


def _not_stopped(root: Root) -> Callable[[str], bool]:
    return lambda sandbox_id: refresh(root, sandbox_id).status != STOPPED


def kill_all(root: Root, signo: _signal.Signals = _signal.SIGKILL) -> list[Outcome]:
    """``kill`` every sandbox of the root that has not stopped."""
    return each(root, lambda i: kill(root, i, signo), _not_stopped(root))


def delete_all(root: Root, *, force: bool = False) -> list[Outcome]:
    """``delete`` every sandbox of the root: the stopped ones, or all with ``force``
    (a running one without it is an error in the list, and stays)."""
    from ckpt.sandbox.client import lifecycle

    def delete(sandbox_id: str) -> None:
        lifecycle.delete(root, sandbox_id, force=force)

    return each(root, delete, lambda _id: True)


def failed(outcomes: list[Outcome], verb: str) -> None:
    """Raise one error naming the sandboxes ``verb`` failed on, when there are any."""
    bad = [o for o in outcomes if o.error is not None]
    if bad:
        names = ", ".join(o.id for o in bad)
        raise SandboxError(f"{verb} failed for {len(bad)} of {len(outcomes)} sandboxes: {names}")
