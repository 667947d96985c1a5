"""A thread that stays in a sandbox's network namespace, for the sandbox process.

A socket keeps the namespace it was made in, and a namespace is per thread; so the
sandbox process makes its listener (``netns.listen``) and a migration's rebuilt
connections (``connmove.rebuild``) in a thread that entered the namespace.  Starting
that thread and entering the namespace cost 20 to 90 ms under load, on the path where a
migrated address is silent, each time.  So one thread enters once, early (``warm``:
when the restore request arrives, while the image loads), and runs that work when it
comes.  No other thread of the process ever changes its namespace.

A forked child (the template's) gets none of its parent's threads: one is made per
process.  A namespace made anew under the same name is entered anew.  Stdlib only: the
sandbox process imports this.
"""

from __future__ import annotations

import _thread
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ckpt.errors import SandboxError

CLONE_NEWNET = 0x40000000


def enter_net_namespace(fd: int) -> None:
    """Move the calling thread into the network namespace open at ``fd``."""
    setns = getattr(os, "setns", None)
    if setns is not None:  # Python 3.12+
        setns(fd, CLONE_NEWNET)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


T = TypeVar("T")
RUN_TIMEOUT_S = 15.0

_lock = threading.Lock()
_threads: dict[str, NsThread] = {}


class NsThread:
    """One thread in the namespace at ``path``, running the functions it is given in
    turn (``run``); ``close`` ends it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pid = os.getpid()
        self.inode: int | None = None  # the namespace entered (nsfs inode), once in
        self._entered = threading.Event()
        self._failed: BaseException | None = None
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ended = False
        # Not threading.Thread: its start() waits until the new thread runs, a whole
        # scheduling delay on a loaded host, which ``warm`` is there to hide.
        _thread.start_new_thread(self._serve, ())

    def _serve(self) -> None:
        try:
            self._enter_and_serve()
        finally:
            self._ended = True

    def _enter_and_serve(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                self.inode = os.fstat(fd).st_ino
                enter_net_namespace(fd)
            finally:
                os.close(fd)
        except BaseException as exc:  # told to every caller
            self._failed = exc
        self._entered.set()
        while (job := self._jobs.get()) is not None:
            func, out, done = job
            try:
                if self._failed is not None:
                    raise self._failed
                out.append((True, func()))
            except BaseException as exc:
                out.append((False, exc))
            finally:
                done.set()

    def current(self) -> bool:
        """Is this process's thread still in the namespace ``path`` names now?"""
        if self.pid != os.getpid() or self._ended:
            return False
        if not self._entered.is_set():
            return True  # still entering: ``run`` waits for it
        if self._failed is not None:
            return False  # the caller that asks again gets a new try
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

    def run(self, func: Callable[[], T], timeout: float = RUN_TIMEOUT_S) -> T:
        """``func()`` run in the namespace; raises what it raised."""
        out: list[tuple[bool, Any]] = []
        done = threading.Event()
        self._jobs.put((func, out, done))
        if not done.wait(timeout) or not out:
            raise SandboxError(f"work in namespace {self.path} did not finish within {timeout:g} s")
        ok, value = out[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def close(self) -> None:
        self._jobs.put(None)


def thread_in(path: str) -> NsThread:
    """This process's thread in namespace ``path``, started now if there is none (or
    the one there is stands in a namespace no longer named so)."""
    with _lock:
        found = _threads.get(path)
        if found is not None and found.current():
            return found
        if found is not None and found.pid == os.getpid():
            found.close()
        made = _threads[path] = NsThread(path)
        return made


def warm(path: str) -> None:
    """Start the thread for ``path`` now, so that it is in when work comes."""
    thread_in(path)


def run_in(path: str, func: Callable[[], T], timeout: float = RUN_TIMEOUT_S) -> T:
    return thread_in(path).run(func, timeout)
