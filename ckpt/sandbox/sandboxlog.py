"""The sandbox's log line: its own module so that the modules ``process`` uses (the
image writer, the store-backed image) can log without importing ``process``."""

from __future__ import annotations

import os
import sys
import time


def log(msg: str) -> None:
    """One timestamped line to the sandbox log (our stderr)."""
    now = time.time()
    stamp = f"{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d}"
    sys.stderr.write(f"{stamp} [{os.getpid()}] {msg}\n")
    sys.stderr.flush()
