"""The checkpointfile benchmark runs end to end and reports every figure it promises."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ckpt.bench import checkpointfile
from ckpt.bench.harness import BenchError
from ckpt.cli import app


def test_suite_reports_times_sizes_and_targets():
    res = checkpointfile.run(count=1, files=200, workers=1, memory=False, progress=False)
    names = {(r.name, r.variant) for r in res["checkpointfile"]}
    assert ("Decode", "typed") in names and ("Encode", "reflect") in names
    assert {r.variant for r in res["stats"]} == {"stats-on", "stats-off"}
    for engine in ("typed", "reflect"):
        sizes = res["sizes"][engine]
        assert sizes["state-file-B"] > 0 and sizes["pages-file-B"] > 0
        assert sizes["encoded-kernel-B"] > sizes["state-file-B"]  # compression is on
    assert {row["target"] for row in res["targets"]} >= {
        "Decode time typed/reflect",
        "state file typed/reflect",
        "Files200Load time stats on/off",
    }


def test_filter_that_matches_nothing_is_an_error():
    with pytest.raises(BenchError):
        checkpointfile.run(count=1, files=0, filter="NoSuchCase", memory=False, progress=False)


def test_cli_json_output():
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "bench",
            "checkpointfile",
            "--count",
            "1",
            "--files",
            "0",
            "--workers",
            "1",
            "--no-memory",
            "--json",
            "--filter",
            "Stream",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert {r["name"] for r in doc["results"]} == {"DecodeStream", "EncodeStream"}
    assert doc["sizes"]["typed"]["objects"] > 1000
