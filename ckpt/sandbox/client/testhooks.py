"""Test hook of the CLI: ``CKPT_TEST_PAUSE_AT=VERB:STEP`` stops the CLI (SIGSTOP) at that
step, so a test can SIGKILL it exactly there; the steps are ``pause_point``'s callers."""

from __future__ import annotations

import os
import signal

PAUSE_ENV = "CKPT_TEST_PAUSE_AT"


def pause_point(step: str) -> None:
    """Stop this process here when ``CKPT_TEST_PAUSE_AT`` names ``step`` (tests only)."""
    if os.environ.get(PAUSE_ENV) == step:
        os.kill(os.getpid(), signal.SIGSTOP)
