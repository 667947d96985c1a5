"""The cycle harness's plan parsing, ABBA order and statistics (no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt.bench import cycle
from ckpt.errors import SandboxError


def test_abba_order_balances_engines() -> None:
    plan = cycle.Plan.parse(
        "x", Path("/tmp/i"), count=4, cpu="uncapped", hold=0, engines="reflect,typed"
    )
    assert plan.order() == ["reflect", "typed", "typed", "reflect"] * 2


def test_plan_parses_quotas() -> None:
    plan = cycle.Plan.parse(
        "x", Path("/tmp/i"), count=1, cpu="uncapped, 1,0.25", hold=0, engines="typed"
    )
    assert plan.quotas == [None, 1.0, 0.25]


@pytest.mark.parametrize(
    ("cpu", "engines", "match"),
    [
        ("0", "typed", "positive"),
        ("abc", "typed", "bad CPU quota"),
        ("", "typed", "at least one quota"),
        ("1", "typed,typed", "distinct"),
        ("1", "typed,pickle", "unknown engine 'pickle'"),
    ],
)
def test_plan_rejects_bad_options(cpu: str, engines: str, match: str) -> None:
    with pytest.raises(SandboxError, match=match):
        cycle.Plan.parse("x", Path("/tmp/i"), count=1, cpu=cpu, hold=0, engines=engines)


def test_mann_whitney_matches_reference_values() -> None:
    # scipy.stats.mannwhitneyu(a, b, method="asymptotic") gives p = 0.01219 for these.
    assert cycle.mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(
        0.01219, abs=1e-4
    )
    # identical samples: no evidence of a difference
    assert cycle.mann_whitney_p([3, 1, 2], [2, 3, 1]) == 1.0
    # all tied: variance is zero, p is 1
    assert cycle.mann_whitney_p([5, 5, 5], [5, 5, 5]) == 1.0
    # ties across groups, by hand: U1 = 0.5, mu = 8, tie term 18,
    # var = 16/12 * (9 - 18/56) = 11.571, z = (7.5 - 0.5) / 3.4017 = 2.0578, p = 0.0396
    assert cycle.mann_whitney_p([1, 2, 2, 3], [3, 4, 4, 5]) == pytest.approx(0.0396, abs=1e-4)


def test_rows_ratio_and_targets() -> None:
    plan = cycle.Plan.parse("x", Path("/tmp/i"), count=3, cpu="1", hold=0, engines="reflect,typed")
    report = cycle.Report(plan)
    for v in (100.0, 110.0, 90.0):
        report.samples.append(cycle.Sample("1", "reflect", {"Checkpoint": v, "Restore": v}))
        report.samples.append(cycle.Sample("1", "typed", {"Checkpoint": v / 4, "Restore": v}))
    rows = {(r.phase, r.engine): r for r in report.rows()}
    assert rows[("Checkpoint", "typed")].ratio == pytest.approx(0.25)
    assert rows[("Checkpoint", "typed")].target == 0.50
    assert rows[("Restore", "typed")].ratio == pytest.approx(1.0)
    assert rows[("Checkpoint", "reflect")].ratio is None
    lines = cycle.go_lines(report)
    assert len(lines) == 6
    start = "template" if plan.template else "cold"
    assert lines[1].startswith(
        f"BenchmarkCycle/start={start}/cpu=1/engine=typed\t1\t25 Checkpoint-ns/op"
    )
