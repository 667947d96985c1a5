"""CPU quota values and their cpu.max / CFS encodings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.cgroups.cpu import cpus_from, format_cpu_max, parse_cpu_max, quota_us
from ckpt.errors import CgroupError

P = Path("/fake/cpu.max")


def test_quarter_cpu_is_25000_of_100000() -> None:
    assert format_cpu_max(0.25, ncpu=2) == "25000 100000"
    assert format_cpu_max(2, ncpu=2) == "200000 100000"


def test_unlimited_is_max() -> None:
    assert format_cpu_max(None) == "max 100000"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max", (None, 100000)),
        ("max 100000\n", (None, 100000)),
        ("25000 100000\n", (25000, 100000)),
        ("150000 50000", (150000, 50000)),
    ],
)
def test_parse_cpu_max(text: str, expected: tuple[int | None, int]) -> None:
    assert parse_cpu_max(text, P) == expected


@pytest.mark.parametrize(
    "text",
    ["", "garbage", "25000", "1 2 3", "abc 100000", "25000 max", "0 100000", "-5 100000", "100 0"],
)
def test_malformed_cpu_max_names_the_file(text: str) -> None:
    with pytest.raises(CgroupError, match=r"/fake/cpu\.max"):
        parse_cpu_max(text, P)


@pytest.mark.parametrize("bad", [0, -1, -0.5, math.nan, math.inf, 3, 2.01, "1", True, None])
def test_bad_cpu_values_are_errors(bad: object) -> None:
    with pytest.raises(CgroupError, match="invalid CPU quota"):
        quota_us(bad, ncpu=2)  # type: ignore[arg-type]


def test_tiny_quota_is_raised_to_the_kernel_minimum() -> None:
    assert quota_us(0.001, ncpu=2) == 1000


@given(st.floats(min_value=0.01, max_value=2.0))
def test_format_then_parse_round_trips(cpus: float) -> None:
    quota, period = parse_cpu_max(format_cpu_max(cpus, ncpu=2), P)
    got = cpus_from(quota, period)
    assert got is not None and abs(got - cpus) <= 0.5 / period
