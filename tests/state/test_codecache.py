"""The typed engine's persistent code cache, exercised in fresh processes.

The cache directory is resolved once per process, so each case runs a child Python with
its own ``CKPT_CACHE_DIR``.  A damaged cache must never change results, and a directory
others could write to must not be used at all (cached code is executable).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Saves a graph with the typed engine, loads it back, prints a digest of what loaded.
CHILD = """
import sys
from dataclasses import dataclass, field
from ckpt import state

@state.savable(name="tests.state.codecache.Item")
@dataclass(eq=False)
class Item:
    ident: int = 7
    label: str = "x"
    tags: list[str] = field(default_factory=list)
    peer: "Item | None" = None

a = Item(1, "a", ["t"])
b = Item(2, "", [], a)
a.peer = b
data = state.dumps([a, b], engine="typed")
x, y = state.loads(data, engine="typed")
assert x.peer is y and y.peer is x, "identity lost"
print(x.ident, x.label, x.tags, y.ident, repr(y.label), y.tags, len(data))
"""


def _run(cache: Path, **env: str) -> str:
    child_env = {**os.environ, "CKPT_CACHE_DIR": str(cache), "CKPT_CODE_CACHE": "1", **env}
    result = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


EXPECTED = "1 a ['t'] 2 '' []"


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    path = tmp_path / "codegen"
    path.mkdir(mode=0o700)
    return path


def test_cache_is_filled_then_reused(cache: Path) -> None:
    first = _run(cache)
    assert first.startswith(EXPECTED)
    files = sorted(cache.glob("*.code"))
    assert files, "the typed engine stored no compiled code"
    second = _run(cache)
    assert second == first
    assert sorted(cache.glob("*.code")) == files


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(b""), id="empty"),
        pytest.param(lambda p: p.write_bytes(b"\x00garbage" * 10), id="garbage"),
        pytest.param(
            lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), id="half"
        ),
    ],
)
def test_damaged_cache_files_fall_back_to_compiling(cache: Path, damage: object) -> None:
    first = _run(cache)
    for path in cache.glob("*.code"):
        damage(path)  # type: ignore[operator]
    assert _run(cache) == first


def test_directory_writable_by_others_is_not_used(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    assert _run(open_dir).startswith(EXPECTED)
    assert list(open_dir.glob("*.code")) == []


def test_cache_can_be_turned_off(cache: Path) -> None:
    assert _run(cache, CKPT_CODE_CACHE="0").startswith(EXPECTED)
    assert list(cache.glob("*.code")) == []
