"""``ckpt bench frozen``: one small real cell (every acknowledged write survives), the
table within 80 columns, and bad options refused before anything starts."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ckpt.bench import frozen
from ckpt.bench.harness import BenchError


@pytest.mark.slow
def test_a_small_run_loses_nothing_and_leaves_nothing(tmp_path) -> None:
    report = frozen.run([4], ["kv"], ["pre-copy", "chain"], rate=1 << 20)
    cells = report["cells"]
    assert [c["mode"] for c in cells] == ["pre-copy", "chain"]
    for c in cells:
        assert c["acked"] > 0 and c["lost"] == 0, c
        assert c["image_bytes"] > 0 and "frozen_time_ms" in c["counters"]
    lines = frozen.go_lines(report)
    assert lines[0].startswith("BenchmarkFrozen/kv_4/pre-copy\t1\t")


def test_table_fits_80_columns() -> None:
    cell = frozen.Cell("memory:1024", "leave-running", 12345.6, 9999.9, 99999, 2**33, 0, 0)
    kv = frozen.Cell("kv:1024", "pre-copy", 1.0, 2.0, 3, 4, 100000, 0)
    report = {"cells": [vars(cell), vars(kv)]}
    buf = io.StringIO()
    Console(file=buf, width=80, record=True).print(frozen.render(report))
    assert max(len(line) for line in buf.getvalue().splitlines()) <= 80
    assert "…" not in buf.getvalue()


@pytest.mark.parametrize("kwargs", [{"modes": ["fast"]}, {"sizes": [0]}, {"kinds": ["http"]}])
def test_bad_options_are_refused_before_starting(kwargs: dict) -> None:
    with pytest.raises(BenchError):
        frozen.run(**{"sizes": [4], "kinds": ["kv"], "modes": ["stop"], **kwargs})


def test_plot_writes_a_png(tmp_path) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the [plot] extra)")
    cells = [
        vars(frozen.Cell(f"{kind}:{size}", mode, size / 10, size / 20, size, size << 20))
        for kind in ("kv", "memory")
        for size in (64, 256)
        for mode in ("stop", "pre-copy")
    ]
    out = frozen.plot({"cells": cells, "machine": {"cpu": "test"}}, tmp_path / "f.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
