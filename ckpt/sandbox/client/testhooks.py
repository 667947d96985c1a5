"""Test hook of the CLI: ``CKPT_TEST_PAUSE_AT=VERB:STEP`` stops the CLI (SIGSTOP) at that
step, so a test can SIGKILL it exactly there; the steps are ``pause_point``'s callers."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

PAUSE_ENV = "CKPT_TEST_PAUSE_AT"


def pause_point(step: str) -> None:
    """Stop this process here when ``CKPT_TEST_PAUSE_AT`` names ``step`` (tests only)."""
    if os.environ.get(PAUSE_ENV) == step:
        os.kill(os.getpid(), signal.SIGSTOP)


def from_env() -> Callable[[str], None] | None:
    """``pause_point`` when ``CKPT_TEST_PAUSE_AT`` is set, else None: read once, so a
    caller that takes its hook as an argument has nothing of tests on its path."""
    return pause_point if os.environ.get(PAUSE_ENV) else None
