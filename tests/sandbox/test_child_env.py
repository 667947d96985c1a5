"""The sandbox process's environment: bytecode kept inside ckpt's own cache directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt.sandbox.client import childenv
from ckpt.state import codecache


def test_bytecode_goes_inside_the_code_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    cache = codecache.cache_dir()
    if cache is None:
        pytest.skip("the code cache is disabled in this environment")
    env = childenv.child_env()
    prefix = Path(env["PYTHONPYCACHEPREFIX"])
    assert prefix.parent == cache  # never beside it, e.g. /tmp/pycache
    assert "PYTHONDONTWRITEBYTECODE" not in env


def test_a_prefix_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path))
    assert childenv.child_env()["PYTHONPYCACHEPREFIX"] == str(tmp_path)
