"""A watchdog that finishes a migration for a source CLI that died in the middle of it.

Forked before anything else happens (so it holds no channel, no thread), it waits on a
pipe from the CLI.  The CLI writes ``c`` just before it sends ``Done`` (the commit) and
``x`` when it has finished cleanly.  If the pipe closes without ``x`` (the CLI was
killed), the guard does what the CLI would have:

* not committed: resume the source sandbox (it may be paused for the final dump) and
  remove the CLI's working directory, so exactly one sandbox runs, as before;
* committed: delete the source sandbox, which the destination now runs.

It ignores SIGINT and SIGTERM and has its own session, so a Ctrl-C to the CLI's
terminal reaches the CLI only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

GIVE_UP_S = 60.0  # how long the guard retries a sandbox busy finishing a dump


class Guard:
    """The CLI's end of the pipe to its watchdog process."""

    def __init__(self, root: Any, sandbox_id: str, workdir: Path) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the watchdog
            code = 1
            try:
                os.close(w)
                os.setsid()
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                _watch(r, root, sandbox_id, workdir)
                code = 0
            finally:
                os._exit(code)
        os.close(r)
        self.pid = pid
        self._w = w

    def _say(self, byte: bytes) -> None:
        if self._w >= 0:
            os.write(self._w, byte)

    def commit(self) -> None:
        """From now on a dead CLI means: delete the source."""
        self._say(b"c")

    def close(self) -> None:
        """The CLI finished (either way) and cleaned up itself: the guard just exits."""
        if self._w < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._w, b"x")
        os.close(self._w)
        self._w = -1
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _watch(r: int, root: Any, sandbox_id: str, workdir: Path) -> None:
    said = b""
    while True:
        chunk = os.read(r, 16)
        if not chunk:
            break
        said += chunk
        if b"x" in said:
            return
    from ckpt.sandbox import lifecycle

    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        try:
            if b"c" in said:
                lifecycle.delete(root, sandbox_id, force=True)
            else:
                lifecycle.resume(root, sandbox_id)
            break
        except Exception:  # busy finishing a dump: try again shortly
            time.sleep(0.2)
    while time.monotonic() < deadline:  # a dump may still be writing into it
        shutil.rmtree(workdir, ignore_errors=True)
        if not workdir.exists():
            break
        time.sleep(0.2)
