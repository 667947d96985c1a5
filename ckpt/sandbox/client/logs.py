"""A sandbox's log (``ckpt logs ID [-f]``): what its process wrote to ``sandbox.log``.

The log is opened once, without following a link (a link planted in the sandbox's
directory is refused), and read in bounded chunks: a large log is streamed, never held
whole.  Following polls for more every ``POLL_S`` and looks at the sandbox's record
every ``CHECK_S``; once the sandbox has stopped, what it wrote last is read and the
follow ends.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator

from ckpt.errors import SandboxError, SandboxNotFound
from ckpt.sandbox.client.status import refresh
from ckpt.sandbox.wire.paths import STOPPED, UNREADABLE, Root

CHUNK = 64 * 1024
POLL_S = 0.2
CHECK_S = 1.0


def _open(root: Root, sandbox_id: str) -> int:
    refresh(root, sandbox_id)  # SandboxNotFound for an unknown ID
    path = root.log_path(sandbox_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise SandboxError(f"sandbox {sandbox_id} has no log at {path}") from None
    except OSError as exc:
        why = "a symlink; refusing to follow it" if exc.errno == errno.ELOOP else exc.strerror
        raise SandboxError(f"cannot read the log of sandbox {sandbox_id}: {path} is {why}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SandboxError(f"cannot read the log of sandbox {sandbox_id}: {path} is not a file")
    return fd


def _drain(fd: int) -> Iterator[bytes]:
    while chunk := os.read(fd, CHUNK):
        yield chunk


def read(root: Root, sandbox_id: str, *, follow: bool = False) -> Iterator[bytes]:
    """The log's bytes in chunks; with ``follow``, then what the sandbox writes next,
    until it stops (or the caller stops iterating: Ctrl-C)."""
    fd = _open(root, sandbox_id)
    try:
        yield from _drain(fd)
        if not follow:
            return
        checked = time.monotonic()
        while True:
            time.sleep(POLL_S)
            yield from _drain(fd)
            if time.monotonic() - checked < CHECK_S:
                continue
            checked = time.monotonic()
            try:
                ended = refresh(root, sandbox_id).status in (STOPPED, UNREADABLE)
            except SandboxNotFound:
                ended = True  # deleted meanwhile: what was written is all there is
            if ended:
                yield from _drain(fd)  # its last lines, written as it stopped
                return
    finally:
        os.close(fd)
