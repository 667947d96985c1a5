"""Hostile file contents: every outcome is a value or a CgroupError, never a crash."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt.cgroups.cpu import parse_cpu_max
from ckpt.cgroups.detect import Layout, parse_mountinfo
from ckpt.cgroups.stat import StatReader
from ckpt.errors import CgroupError


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_stat_reader_on_arbitrary_bytes(cpu_stat: bytes, pids: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "cpu.stat").write_bytes(cpu_stat)
        (d / "pids.current").write_bytes(pids)
        try:
            st_ = StatReader(d, {}, sizes=()).read()
        except CgroupError as exc:
            assert str(d) in str(exc)
        else:
            assert st_.pids_current == int(pids)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_mountinfo_on_arbitrary_text(text: str) -> None:
    try:
        assert isinstance(parse_mountinfo(text), Layout)
    except CgroupError as exc:
        assert "mountinfo" in str(exc)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40))
def test_cpu_max_on_arbitrary_text(text: str) -> None:
    try:
        quota, period = parse_cpu_max(text, Path("/x/cpu.max"))
    except CgroupError as exc:
        assert "/x/cpu.max" in str(exc)
    else:
        assert period > 0 and (quota is None or quota > 0)
