"""A watchdog that finishes a migration for a process that died in the middle of it.

Forked before the session begins, it closes every descriptor but its pipe (so it holds
no channel and no listening socket) and waits.  The process tells it how far it got,
one byte at a time (``RESTORING``, ``COMMITTING``, ``CANCELLED``, ``COMMITTED``) and
writes ``DONE`` when it has finished and cleaned up itself.  If the pipe closes without
``DONE`` (the process was killed), the guard calls ``act`` with what it was told,
retrying while the sandbox is busy, then removes the working directory.  What ``act``
does is decided from the last state told (``source_action``, ``destination_action``):

* the source: not committing -> resume its sandbox (it may be paused for the final
  dump); committed -> delete it (the destination runs it); committing but not known
  to be committed -> leave it paused, neither running nor lost (the destination may
  have read ``Done`` and kept it); paging (post-copy: it runs there, without pages
  only this paused copy holds) -> leave it paused; cancelled (the destination answered ``Done`` with an
  ``Error``: it cancels only before it commits) -> resume it;
* the destination: restoring but not committed -> stop and remove what it restored.

It ignores SIGINT and SIGTERM and has its own session, so a Ctrl-C to a terminal
reaches the process only.
"""

from __future__ import annotations

import contextlib
import enum
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

GIVE_UP_S = 60.0  # how long the guard retries a sandbox busy finishing a dump
RESTORING, COMMITTING, COMMITTED, DONE = b"r", b"c", b"a", b"x"
CANCELLED = b"n"  # the source: the destination refused the commit, it runs nothing
PAGING = b"p"  # the source, post-copy: committed, the destination lacks pages it holds


class Action(enum.Enum):
    """What a guard does with the sandbox of a process that died mid-migration."""

    RESUME = "resume"
    DELETE = "delete"
    LEAVE = "leave"


def _last(said: bytes) -> bytes:
    """The last state told (the states are told in order; ``DONE`` is not one)."""
    states = said.replace(DONE, b"")
    return states[-1:]


def source_action(said: bytes) -> Action:
    """The source's guard: resume unless the destination may keep the sandbox."""
    last = _last(said)
    if last == COMMITTED:
        return Action.DELETE
    if last in (COMMITTING, PAGING):
        # Done is sent: the destination may run it, or may not; or it runs it with
        # pages only this paused copy holds: neither resumed (two copies) nor deleted
        return Action.LEAVE
    return Action.RESUME  # nothing, restoring or cancelled: the destination keeps nothing


def destination_action(said: bytes) -> Action:
    """The destination's guard: remove what it restored unless the commit was read."""
    if COMMITTED in said:
        return Action.LEAVE
    return Action.DELETE if RESTORING in said else Action.LEAVE


class Guard:
    """The process's end of the pipe to its watchdog."""

    def __init__(self, workdir: Path, act: Callable[[bytes], None]) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the watchdog
            code = 1
            try:
                os.closerange(3, r)
                os.closerange(r + 1, os.sysconf("SC_OPEN_MAX"))
                os.setsid()
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                _watch(r, workdir, act)
                code = 0
            finally:
                os._exit(code)
        os.close(r)
        self.pid = pid
        self._w = w

    def say(self, what: bytes) -> None:
        """Tell the guard how far the migration got."""
        if self._w >= 0:
            os.write(self._w, what)

    def close(self) -> None:
        """The process finished (either way) and cleaned up itself: the guard exits."""
        if self._w < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._w, DONE)
        os.close(self._w)
        self._w = -1
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _watch(r: int, workdir: Path, act: Callable[[bytes], None]) -> None:
    said = b""
    while chunk := os.read(r, 16):
        said += chunk
        if DONE in said:
            return
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        try:
            act(said)
            break
        except Exception:  # busy finishing a dump: try again shortly
            time.sleep(0.2)
    while time.monotonic() < deadline:  # a dump may still be writing into it
        shutil.rmtree(workdir, ignore_errors=True)
        if not workdir.exists():
            break
        time.sleep(0.2)


def source_act(root: object, sandbox_id: str) -> Callable[[bytes], None]:
    """What the source's guard does for a dead ``ckpt migrate``."""

    def act(said: bytes) -> None:
        from ckpt.sandbox.client import lifecycle

        what = source_action(said)
        if what is Action.DELETE:
            lifecycle.delete(root, sandbox_id, force=True)  # type: ignore[arg-type]
        elif what is Action.RESUME:
            lifecycle.resume(root, sandbox_id)  # type: ignore[arg-type]

    return act


def destination_act(root: object, sandbox_id: str) -> Callable[[bytes], None]:
    """What the destination's guard does for a dead ``ckpt serve``."""

    def act(said: bytes) -> None:
        from ckpt.sandbox.client import lifecycle

        if destination_action(said) is Action.DELETE and root.exists(sandbox_id):  # type: ignore[attr-defined]
            lifecycle.delete(root, sandbox_id, force=True)  # type: ignore[arg-type]

    return act
