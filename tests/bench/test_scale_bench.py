"""``ckpt bench scale``: runs end to end on tiny sizes and reports every figure it
promises; options and rendering (80 columns, JSON, Go lines) checked without sandboxes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from ckpt.bench import scale
from ckpt.cli import app


def test_sizes_parse_and_bad_sizes_are_errors() -> None:
    assert scale.parse_sizes("1000, 10k,2_000", "files") == [1000, 10000, 2000]
    assert scale.parse_sizes("", "files") == []
    with pytest.raises(scale.ScaleError, match="--graphs: 'x1' is not a size"):
        scale.parse_sizes("x1", "graphs")
    with pytest.raises(scale.ScaleError, match="at least 1"):
        scale.parse_sizes("0", "memory")


def test_nothing_to_run_is_an_error() -> None:
    with pytest.raises(scale.ScaleError, match="nothing to run"):
        scale.run([], [], [], progress=False)


def test_cli_reports_a_bad_size_on_one_line() -> None:
    res = CliRunner().invoke(app, ["bench", "scale", "--files", "lots"])
    assert res.exit_code != 0
    assert "is not a size" in str(res.exception)


def _fake(kind: str, size: int, **kw: float) -> scale.Point:
    p = scale.Point(f"{kind}:{size}", kind, size, reps=1)
    p.boot_ns, p.checkpoint_ns, p.restore_ns = size * 1e5, size * 2e4, size * 3e4
    p.checkpoint_cpu_ns = size * 1e4
    p.rss_before, p.rss_growth, p.restore_peak_rss = 30 << 20, 5 << 20, 40 << 20
    for k, v in kw.items():
        setattr(p, k, v)
    return p


def _fake_result() -> dict:
    points = [
        _fake("files", 1000),
        _fake("files", 100_000),
        _fake("graph", 1000),
        scale.Point("graph:100000", "graph", 100_000, error="did not answer boot"),
        _fake("memory", 16, pages_stored=3000, pages_ns=1e8, zstd_ns=5e7, digest_ok=True),
        _fake(
            "memory",
            1024,
            pages_stored=190_000,
            pages_ns=6e9,
            zstd_ns=4e9,
            eager_first_ns=3e9,
            background_first_ns=4e8,
            digest_ok=True,
        ),
    ]
    points[-1].rss_growth = 80 << 20
    return {"points": points, "summary": scale.summarize(points), "machine": {"cpu": "test"}}


def test_render_fits_80_columns_and_states_each_target() -> None:
    res = _fake_result()
    console = Console(width=80, record=True, force_terminal=False)
    console.print(scale.render(res))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "graph:100000: failed: did not answer boot" in text
    assert "restored memory digests match: ok" in text
    assert "RSS growth in checkpoint, memory:1024: 80.0 MiB (<= 64 MiB) MISSED" in text
    assert "page throughput, memory:1024: 67% of zstd alone (>= 50%) ok" in text
    assert "--background 1st answer, memory:1024: 0.13x eager (<= 0.2x) ok" in text


def test_go_lines_and_json_carry_every_point_that_ran() -> None:
    res = _fake_result()
    lines = scale.go_lines(res)
    assert all(re.fullmatch(r"BenchmarkScale\w+/[\w=/.-]+\t\d+\t\d+ ns/op.*", ln) for ln in lines)
    assert any(ln.startswith("BenchmarkScaleZstd/memory=1024\t") for ln in lines)
    assert not any("graph=100000" in ln for ln in lines)  # failed: no figure
    doc = json.loads(json.dumps(scale.to_json(res), default=str))
    mem = doc["points"][-1]
    assert mem["boot_ns_per_MiB"] == pytest.approx(1e5)
    assert mem["pipeline_mib_s"] == pytest.approx(190_000 * 4096 / 2**20 / 6)
    assert doc["summary"]["files_boot_per_unit_growth"]["ratio"] == pytest.approx(1.0)


def test_plot_without_matplotlib_says_how_to_get_it(tmp_path: Path, monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_mpl(name: str, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    with pytest.raises(scale.ScaleError, match=r"ckpt\[plot\]"):
        scale.plot(_fake_result(), tmp_path / "x.png")


def test_tiny_real_run_measures_every_phase(tmp_path: Path) -> None:
    res = scale.run([60], [40], [1], count=1, workdir=tmp_path, progress=False)
    points = {p.workload: p for p in res["points"]}
    assert set(points) == {"files:60", "graph:40", "memory:1"}
    for p in points.values():
        assert p.error is None and p.reps == 1
        assert p.boot_ns > 0 and p.checkpoint_ns > 0 and p.restore_ns > 0 and p.boot_cpu_ns > 0
        assert p.restore_peak_rss > 0 and p.rss_before > 0
        assert p.objects and p.objects > 0
    mem = points["memory:1"]
    assert mem.digest_ok is True
    assert mem.pages_stored > 0 and mem.zstd_ns > 0 and mem.pages_ns > 0
    assert mem.eager_first_ns and mem.background_first_ns
    assert res["summary"]["digests_ok"] is True
    assert not any((tmp_path / "root").glob("scale-*"))  # every sandbox deleted


def test_marginal_cost_cancels_the_fixed_cost_of_a_sandbox() -> None:
    points = []
    for n in (1000, 4000, 16000):
        p = scale.Point(f"graph:{n}", "graph", n, reps=1)
        p.boot_ns = 4e8 + n * 5e4  # 400 ms to start, 50 µs per object
        p.checkpoint_ns = p.restore_ns = 1e6 * n
        points.append(p)
    summary = scale.summarize(points)
    m = summary["graph_boot_marginal_growth"]
    assert m["ratio"] == pytest.approx(1.0) and m["ns_to"] == pytest.approx(5e4)
    assert summary["graph_boot_per_unit_growth"]["ratio"] < 0.2  # fixed cost dominates
    assert "  one more object: 50.0 µs (1k..4k) -> 50.0 µs (4k..16k): 1.00x" in (
        scale.verdicts(summary)
    )


def test_the_cli_defaults_are_the_benchmarks_own() -> None:
    """``ckpt bench scale``'s option defaults are spelled in ckpt/cli/bench_sandbox.py
    (it must not import the benchmark to start): they must say what scale.py's
    defaults say."""
    import inspect

    from ckpt.cli.bench_sandbox import bench_scale_cmd

    params = inspect.signature(bench_scale_cmd).parameters
    want = {
        "files": scale.DEFAULT_FILES,
        "graphs": scale.DEFAULT_GRAPHS,
        "memory": scale.DEFAULT_MEMORY,
    }
    for name, sizes in want.items():
        assert params[name].default == ",".join(map(str, sizes)), name
