"""The committed fuzz inputs replay through the same targets, without atheris.

``corpus/TARGET/`` holds inputs worth keeping (interesting shapes the fuzzer found),
``crashes/TARGET/`` the inputs of fixed findings: each must now end in a value or a
CkptError, so a fixed finding stays fixed.  A directory with no files skips cleanly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ckpt import state
from ckpt.state import wire

from . import seeds, targets

HERE = Path(__file__).resolve().parent


def _committed() -> list[Any]:
    params = []
    for kind in ("corpus", "crashes"):
        for target in sorted(targets.TARGETS):
            d = HERE / kind / target
            files = sorted(f for f in d.iterdir() if f.is_file()) if d.is_dir() else []
            params += [pytest.param(target, f, id=f"{kind}/{target}/{f.name}") for f in files]
            if not files:
                params.append(
                    pytest.param(
                        target,
                        None,
                        id=f"{kind}/{target}",
                        marks=pytest.mark.skip(reason=f"no committed inputs in {d}"),
                    )
                )
    return params


@pytest.mark.parametrize(("target", "path"), _committed())
def test_committed_input(target: str, path: Path, watchdog: None) -> None:
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    targets.TARGETS[target](path.read_bytes())


@pytest.mark.parametrize("target", sorted(targets.TARGETS))
def test_generated_seeds_load(target: str, watchdog: None) -> None:
    """The seeds are real streams and images: every one must load, not just fail cleanly."""
    made = seeds.SEEDS[target]()
    assert len(made) >= 8
    for name, data in made.items():
        targets.TARGETS[target](data)
        if target == "state":
            state.loads(targets.state_input(data), engine="typed")  # a value, not an error
        else:
            checkpoint, meta, pages = targets.statefile_unpack(data)
            assert targets.statefile_pack(checkpoint, meta, pages) == data, name


def test_state_target_reports_a_foreign_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle itself can fail: an exception that is not a CkptError is a Finding."""

    def broken(data: Any, engine: Any = None, stats: Any = None) -> Any:
        raise KeyError("boom")

    monkeypatch.setattr(targets.state, "loads", broken)
    with pytest.raises(targets.Finding, match="KeyError"):
        targets.state_target(b"\x00")


def test_state_target_reports_engines_that_disagree(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"typed": [1], "native": [2], "reflect": [1]}
    monkeypatch.setattr(targets.state, "loads", lambda data, engine=None: answers[engine])
    monkeypatch.setattr(targets, "DIFF_PAIRS", {("typed", "native")})
    with pytest.raises(targets.Finding, match="differently"):
        targets.state_target(b"\x00", engines=("typed", "native"))


def test_statefile_target_reports_an_empty_error_message(monkeypatch: pytest.MonkeyPatch) -> None:
    def silent(*args: Any, **kwargs: Any) -> Any:
        raise targets.statefile.StatefileError("")

    monkeypatch.setattr(targets.statefile, "open_image", silent)
    with pytest.raises(targets.Finding, match="empty message"):
        targets.statefile_target(b"")


def test_statefile_input_layout_round_trips() -> None:
    data = targets.statefile_pack(b"abc", b"", b"xyz")
    assert targets.statefile_unpack(data) == (b"abc", b"", b"xyz")
    assert targets.statefile_unpack(b"\xff\xff") == (b"", b"", b"")  # clamped, never raises


@pytest.mark.parametrize("engine", state.ENGINES)
def test_extension_types_are_refused(engine: str) -> None:
    """A fuzz finding: a MessagePack extension value loaded as a msgspec Ext object."""
    payload = wire.unframe(state.dumps(seeds.Pair(1, [2]), engine="typed"))
    payload[wire.ROOT] = msgspec.msgpack.Ext(1, b"abcd")
    with pytest.raises(state.StateError, match="extension value"):
        state.loads(wire.frame(payload), engine=engine)


def test_replay_cli_fails_on_a_finding_and_prints_the_input(tmp_path: Path) -> None:
    """``python -m tests.fuzz.replay`` (the ASan pass in .ci/fuzz.sh) exits 0 on inputs
    that end well, and 1 on a finding, printing the input.  The committed
    reflect-vs-typed input was a finding until unknown flags were refused; it now ends
    in the same StateError in every engine, so the planted finding is a hang: a
    per-input limit of a microsecond, which no load meets."""
    sample = HERE / "corpus" / "state" / "reflect-vs-typed-unflagged-escape"
    if not sample.is_file():
        pytest.skip(f"{sample} is missing")
    root = HERE.parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "CKPT_FUZZ_DIFF": "all"}
    cmd = [sys.executable, "-m", "tests.fuzz.replay", "state", str(sample)]
    calm = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert calm.returncode == 0, calm.stderr
    hang = [*cmd, "--timeout", "0.000001"]
    found = subprocess.run(hang, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert found.returncode == 1, found.stderr
    assert "FINDING" in found.stderr and "input: b'\\x01" in found.stderr
