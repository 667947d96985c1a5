"""How long the CLI waits for a sandbox's checkpoint and restore."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ckpt import settings

# The restore RPC: a fixed floor plus time for the image's bytes at a slow rate per CPU
# of its quota, so a big image is never cut short while a hung restore (a FIFO for a
# statefile, a wedged sandbox) still ends.  A files:100000 image (3.3 MB) restored in
# 1.3 s on one uncapped CPU (2.6 MB/s); the rate below leaves five times that margin.
RESTORE_TIMEOUT_S = 120.0
RESTORE_BYTES_PER_S = 512 * 1024
RESTORE_TIMEOUT_ENV = "CKPT_RESTORE_TIMEOUT_S"
# A checkpoint's own deadline (ckpt/settings.py): generous, since a sandbox of many GiB
# under a small quota writes for minutes, and stopping the wait never kills the sandbox
# (it may still finish).
CHECKPOINT_TIMEOUT_ENV = "CKPT_CHECKPOINT_TIMEOUT_S"


def checkpoint_timeout() -> float:
    """How long the CLI waits for a checkpoint: ``CKPT_CHECKPOINT_TIMEOUT_S``."""
    return settings.current().checkpoint_timeout_s


def restore_timeout(image: Path, cpus: float | None = None) -> float:
    """How long the restore RPC may take: ``CKPT_RESTORE_TIMEOUT_S`` if set, else
    RESTORE_TIMEOUT_S plus the image's size at RESTORE_BYTES_PER_S per CPU of the
    quota (``cpus``; no quota counts as one CPU)."""
    given = settings.current().restore_timeout_s
    if given is not None:
        return given
    size = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(image):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    size += entry.stat(follow_symlinks=False).st_size
    share = min(cpus, 1.0) if cpus else 1.0
    return RESTORE_TIMEOUT_S + size / (RESTORE_BYTES_PER_S * share)
