"""The CLI's fault point: ``CKPT_FAULT=pause:VERB:STEP`` stops the CLI (SIGSTOP) at that
step, so a test can SIGKILL it exactly there; the steps are ``pause_point``'s callers
(and ``migrate``'s, through the hook ``from_env`` gives)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from ckpt import faults
from ckpt.faults import Fault


def _stop_at(step: str) -> None:
    pause = faults.injected(Fault.PAUSE)
    if pause is not None and pause.text == step:
        os.kill(os.getpid(), signal.SIGSTOP)


def pause_point(step: str) -> None:
    """Stop this process here when ``CKPT_FAULT`` is ``pause:`` ``step`` (tests only)."""
    _stop_at(step)


def from_env() -> Callable[[str], None] | None:
    """The pause hook when ``CKPT_FAULT`` names a pause, else None: read once, so a
    caller that takes its hook as an argument has nothing of tests on its path."""
    return _stop_at if faults.injected(Fault.PAUSE) is not None else None
