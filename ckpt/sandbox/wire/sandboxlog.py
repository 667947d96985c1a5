"""The sandbox's log line: its own module so that the modules ``process`` uses (the
image writer, the store-backed image) can log without importing ``process``.

A sandbox's last line says how it exited (``exit status N``, from ``exit_now``): a
sandbox is nobody's child once its CLI has returned, so its log is where ``ckpt wait``
and ``ckpt state`` read its exit status (``exit_status``).
"""

from __future__ import annotations

import os
import sys
import time

EXIT_LINE = "exit status {code}"
TAIL_BYTES = 4096  # the exit line is among the last lines; never read the whole log
_EXIT_PATTERN = rb"\[(\d+)\] exit status (\d{1,3})\n"  # compiled on use: ``re`` is not cheap


def log(msg: str) -> None:
    """One timestamped line to the sandbox log (our stderr)."""
    now = time.time()
    stamp = f"{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d}"
    sys.stderr.write(f"{stamp} [{os.getpid()}] {msg}\n")
    sys.stderr.flush()


def exit_now(code: int) -> None:
    """Say how this process exits, as the log's last line, and exit with ``code`` at
    once (no interpreter shutdown: other threads may still hold the kernel)."""
    log(EXIT_LINE.format(code=code))
    os._exit(code)


def exit_status(path: os.PathLike[str] | str, pid: int) -> int | None:
    """The status process ``pid`` said it exits with, from the end of its log at
    ``path`` (opened without following a link), or None when it said nothing (it was
    killed, or the log is gone)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        tail = os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES))
    except OSError:
        return None
    finally:
        os.close(fd)
    import re

    found = None
    for match in re.finditer(_EXIT_PATTERN, tail):
        if int(match.group(1)) == pid:
            found = int(match.group(2))
    return found
