"""A copy-on-write snapshot for ``--leave-running``: fork the frozen sandbox, thaw the
parent at once, and let the child write the image (as Redis's BGSAVE does).

The child is a copy of the process at the instant of the fork, so the image is the
frozen kernel's whatever the parent does next; the kernel's pages are shared until the
parent writes them.  The frozen time is the fork (page tables), not the page write.

Only the forking thread exists in the child.  It must not take a lock another thread
may have held at the fork: it never logs (stderr's buffer lock), never waits on
``Host.cond``, and writes its result with ``os.write``.  The chunk pool is rebuilt in
the child (``chunks._forget_pool_after_fork``).  A sandbox whose pages are still being
loaded in the background is not forked: reading an unfetched page takes a run lock the
loader thread may hold (``usable`` says so, and the caller writes in place instead).
"""

from __future__ import annotations

import json
import os
import select
import signal
import time

from ckpt import errors

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MAX_RESULT = 1 << 20  # bytes of JSON the child may send back
DEADLINE_S = 3600.0  # the longest image write waited for


def usable(kernel: Any) -> bool:
    """Whether the sandbox can be forked safely now (see the module docstring)."""
    mf = kernel.memory_file
    return hasattr(os, "fork") and mf.unfetched == 0 and not mf.loading


def start(write: Callable[[], dict[str, Any]]) -> tuple[int, int]:
    """Fork; the child runs ``write()`` and sends back its result.  Returns (pid, fd)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one thread, a copy of the frozen kernel
        try:
            os.close(r)
            try:
                out: dict[str, Any] = {"ok": True, "result": write()}
            except BaseException as exc:
                out = {"ok": False, "kind": type(exc).__name__, "error": str(exc)}
            data = json.dumps(out, default=str).encode()[:MAX_RESULT]
            while data:
                data = data[os.write(w, data) :]
        finally:
            os._exit(0)
    os.close(w)
    return pid, r


def collect(pid: int, fd: int, deadline_s: float = DEADLINE_S) -> dict[str, Any]:
    """The child's result; its error raised again here as the same ``CkptError`` class."""
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + deadline_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                raise errors.SandboxError(
                    f"the snapshot writer (pid {pid}) took over {deadline_s:g} s; it was "
                    "killed and no image was committed"
                )
            data = os.read(fd, 65536)
            if not data:
                break
            size += len(data)
            if size > MAX_RESULT:
                os.kill(pid, signal.SIGKILL)
                raise errors.SandboxError("the snapshot writer sent an oversized result")
            chunks.append(data)
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    try:
        out = json.loads(b"".join(chunks))
    except ValueError:
        out = None
    if not isinstance(out, dict):
        raise errors.SandboxError(
            f"the snapshot writer (pid {pid}) died before reporting; no image was committed"
        )
    if not out.get("ok"):
        cls = getattr(errors, str(out.get("kind")), None)
        if not (isinstance(cls, type) and issubclass(cls, errors.CkptError)):
            cls = errors.SandboxError
        raise cls(str(out.get("error")))
    result = out.get("result")
    return result if isinstance(result, dict) else {}
