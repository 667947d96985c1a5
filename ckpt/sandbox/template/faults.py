"""The template's test hooks: ``CKPT_TEMPLATE_FAULT=WHICH:SECONDS`` delays one step
(see server.py's docstring for each ``WHICH``)."""

from __future__ import annotations

import os


def fault_delay(which: str) -> float:
    """``CKPT_TEMPLATE_FAULT=WHICH:SECONDS``: the test hook's delay, or 0."""
    name, _, value = os.environ.get("CKPT_TEMPLATE_FAULT", "").partition(":")
    if name != which:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        return 0.0
