"""Marks shared by the state tests: one place says when the native core is missing and
why (in the compiler's words, from ``native_status``)."""

from __future__ import annotations

import pytest

from ckpt import state

requires_native = pytest.mark.skipif(
    not state.native_status()[0], reason=f"native engine: {state.native_status()[1]}"
)
