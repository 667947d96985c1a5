"""Fault injection: one enum of points behind one variable, ``CKPT_FAULT``, parsed
once through the settings object; a name it does not know is refused in one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ckpt
from ckpt import faults, settings
from ckpt.faults import Fault
from ckpt.settings import SettingsError


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("checkpoint-stal:3", "unknown fault point 'checkpoint-stal'"),
        ("", "unknown fault point ''"),
        ("checkpoint-stall:soon", "checkpoint-stall takes seconds, not 'soon'"),
        ("warm-delay:-1", "warm-delay takes 0 to"),
        ("warm-delay", "warm-delay takes seconds, not ''"),
        ("hold-delay:inf", "hold-delay takes 0 to"),
        ("pause:migrate", "pause takes VERB:STEP"),
    ],
)
def test_a_bad_fault_is_refused_with_what_is_wrong(raw: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        faults.parse(raw)


def test_the_settings_carry_the_parsed_fault_and_give_it_to_children() -> None:
    s = settings.load({"CKPT_FAULT": "checkpoint-stall:30:/tmp/go"})
    assert s.fault == faults.Injection(Fault.CHECKPOINT_STALL, "30:/tmp/go", 30.0, "/tmp/go")
    assert settings.child_env(s) == {"CKPT_FAULT": "checkpoint-stall:30:/tmp/go"}
    assert settings.load({}).fault is None
    with pytest.raises(SettingsError, match=r"^CKPT_FAULT='nope': unknown fault point 'nope'"):
        settings.load({"CKPT_FAULT": "nope"})


def test_a_point_sees_only_its_own_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKPT_FAULT", "warm-delay:2.5")
    assert faults.delay(Fault.WARM_DELAY) == 2.5
    assert faults.delay(Fault.HOLD_DELAY) == 0.0
    assert faults.injected(Fault.PAUSE) is None
    from ckpt.sandbox.client import testhooks

    assert testhooks.from_env() is None  # no hook on the path unless a pause is named
    monkeypatch.setenv("CKPT_FAULT", "pause:checkpoint:sending")
    assert testhooks.from_env() is not None
    monkeypatch.delenv("CKPT_FAULT")
    assert faults.delay(Fault.WARM_DELAY) == 0.0


def test_every_point_is_documented_and_no_other_fault_variable_is_read() -> None:
    assert set(faults.MEANINGS) == set(Fault)
    package = Path(ckpt.__file__).parent
    old = re.compile(r"CKPT_(TEMPLATE_FAULT|TEST_PAUSE_AT)")
    assert not [p for p in package.rglob("*.py") if old.search(p.read_text(encoding="utf-8"))]
    uses = {
        m
        for p in package.rglob("*.py")
        for m in re.findall(r"Fault\.([A-Z_]+)", p.read_text(encoding="utf-8"))
    }
    assert uses >= {f.name for f in Fault}, "a fault point nothing meets"


def test_the_cli_refuses_an_unknown_fault_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "CKPT_FAULT": "no-such-point:1", "CKPT_ROOT": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "ckpt", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: CKPT_FAULT='no-such-point:1': unknown fault point 'no-such-point'; give one of "
    ), done.stderr
