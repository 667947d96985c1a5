"""Without its C core (no compiler at install, or ``CKPT_PURE_PYTHON=1``) the native
engine is reported unavailable with a reason and the default engine is ``typed``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from ckpt import state

_PROBE = textwrap.dedent(
    """
    from ckpt import state
    available, reason = state.native_status()
    assert not available and reason == "disabled by CKPT_PURE_PYTHON=1", reason
    assert state.default_engine() == "typed"
    assert state.ENGINES == ("reflect", "typed")
    data = state.dumps({"a": [1, 2]})
    assert state.loads(data) == {"a": [1, 2]}
    try:
        state.dumps([1], engine="native")
    except state.StateError as exc:
        assert "unavailable" in str(exc) and "CKPT_PURE_PYTHON" in str(exc), exc
    else:
        raise AssertionError("the native engine ran although it was switched off")
    print("fallback ok")
    """
)


def test_pure_python_switch_falls_back_to_typed() -> None:
    env = {**os.environ, "CKPT_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "fallback ok"


def test_native_status_is_a_flag_and_one_line_reason() -> None:
    available, reason = state.native_status()
    assert isinstance(available, bool)
    assert reason and "\n" not in reason
    assert state.default_engine() == ("native" if available else "typed")
