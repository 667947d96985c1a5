"""``ckpt bench migrate``: one small real cell on loopback (every acknowledged write
arrives, the client found the destination), the table within 80 columns, and bad
options refused before anything starts."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ckpt.bench import migrate
from ckpt.bench.harness import BenchError


@pytest.mark.slow
def test_a_small_run_loses_nothing() -> None:
    report = migrate.run([4], ["kv"], rate=1 << 20)
    (cell,) = report["cells"]
    assert cell["acked"] > 0 and cell["lost"] == 0, cell
    assert cell["rounds"] >= 2 and cell["bytes_sent"] > 0 and cell["memory_bytes"] > 0
    assert cell["gap_ms"] > 0 and "downtime_ms" in cell["counters"]
    assert migrate.go_lines(report)[0].startswith("BenchmarkMigrate/loopback/kv_4\t1\t")


def test_table_fits_80_columns() -> None:
    cell = migrate.Cell("memory:1024", 12345.6, 99999.9, 99999.9, 999999, 2**33, 2**30, 1.234)
    report = {"link": "netns-1gbit+10ms", "cells": [vars(cell)]}
    buf = io.StringIO()
    Console(file=buf, width=80, record=True).print(migrate.render(report))
    assert max(len(line) for line in buf.getvalue().splitlines()) <= 80
    assert "…" not in buf.getvalue()


@pytest.mark.parametrize(
    "kwargs", [{"sizes": [0]}, {"sizes": []}, {"kinds": ["http"]}, {"link": "wifi"}]
)
def test_bad_options_are_refused_before_starting(kwargs: dict) -> None:
    with pytest.raises(BenchError):
        migrate.run(**{"sizes": [4], "kinds": ["kv"], **kwargs})
