"""``ckpt bench lifecycle``'s table fits an 80-column terminal with every command
name whole (it used to fold "checkpoint" into "checkpoin" over "t")."""

from __future__ import annotations

import io

from rich.console import Console

from ckpt.bench import harness, lifecycle


def _report() -> dict:
    cases = []
    for command, start, ns in (
        ("bare", "-", 78_121_868),
        ("run", "cold", 1_104_040_418),
        ("checkpoint", "-", 310_642_917),
        ("restore", "template", 314_192_251),
        ("state", "-", 218_775_090),
    ):
        case = lifecycle.Case(command, "nginx", "0.25", start, lambda: [])
        # a 10-20% spread, as on a noisy VM: "13%" is as wide as that column gets
        case.result.samples = [
            harness.Sample(int(ns * f), 220_000_000, 0, 0, 0) for f in (0.9, 1.0, 1.0, 1.1, 1.2)
        ]
        if command == "restore":
            case.phases["ResumeTotal_ms"] = [949.6]
        cases.append(case)
    return {"cases": cases, "command": ["ckpt"], "machine": {}}


def test_the_table_fits_80_columns_and_keeps_command_names_whole() -> None:
    buf = io.StringIO()
    Console(file=buf, width=80, force_terminal=False).print(lifecycle.render(_report()))
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    first = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    assert {"bare", "run", "checkpoint", "restore", "state"} <= set(first)
    assert "1104 ms" in text and "950 ms" in text and "14.1" in text
