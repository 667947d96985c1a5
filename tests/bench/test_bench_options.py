"""Options of ``ckpt bench`` that must reach the benchmark before it starts.

``ckpt --no-template bench load`` must not start the template, and ``bench scale --plot``
must refuse at once (not after the whole run) when it cannot write the PNG.  Nothing
here starts a sandbox: the runs are replaced by recorders."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from typer.testing import CliRunner

from ckpt import cli
from ckpt.bench import load, scale
from ckpt.bench.harness import BenchError


def _fake_row(template: bool, *, clients: int, cycles: int, progress: Any = None) -> dict:
    return {
        "start": "template" if template else "cold",
        "clients": clients,
        "cycles": cycles,
        "answered": 1,
        "refused": 0,
        "dropped": 0,
        "failed": 0,
        "server_count": 1,
        "exactly_once": True,
        "p50_ms": 1.0,
        "p99_ms": 1.0,
        "max_ms": 1.0,
        "cycle_ms": 1.0,
    }


@pytest.fixture
def load_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record each mode bench load would run (True = with the template), run none."""
    calls: list[bool] = []

    def record(template: bool, **kw: Any) -> dict:
        calls.append(template)
        return _fake_row(template, **kw)

    monkeypatch.setattr(load, "run_mode", record)
    monkeypatch.setenv("CKPT_TEMPLATE", "1")  # restored after the test: --no-template sets it
    return calls


def _bench_load(tmp_path: Path, *args: str) -> Any:
    return CliRunner().invoke(cli.app, ["--root", str(tmp_path), *args])


def test_global_no_template_runs_only_the_cold_mode(tmp_path: Path, load_calls) -> None:
    res = _bench_load(tmp_path, "--no-template", "bench", "load", "--cycles", "1", "--json")
    assert res.exit_code == 0, res.output
    assert load_calls == [False]
    assert [r["start"] for r in json.loads(res.output)["rows"]] == ["cold"]


def test_without_no_template_both_modes_run(tmp_path: Path, load_calls) -> None:
    res = _bench_load(tmp_path, "bench", "load", "--cycles", "1", "--json")
    assert res.exit_code == 0, res.output
    assert load_calls == [True, False]


def test_no_template_with_template_mode_alone_is_refused(tmp_path: Path, load_calls) -> None:
    res = _bench_load(tmp_path, "--no-template", "bench", "load", "--modes", "template")
    assert isinstance(res.exception, BenchError)
    assert "--modes cold" in str(res.exception)
    assert load_calls == []


def _hide_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail


def test_check_plot_refuses_before_the_run_without_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hide_matplotlib(monkeypatch)
    with pytest.raises(scale.ScaleError, match=r"needs matplotlib: pip install 'ckpt\[plot\]'"):
        scale.check_plot(tmp_path / "scale.png")


def test_check_plot_refuses_a_missing_directory_and_other_formats(tmp_path: Path) -> None:
    with pytest.raises(scale.ScaleError, match="does not exist"):
        scale.check_plot(tmp_path / "nowhere" / "scale.png")
    with pytest.raises(scale.ScaleError, match=r"ending in \.png"):
        scale.check_plot(tmp_path / "scale.svg")


def _fake_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in pyplot whose savefig writes a file, so no real matplotlib is needed."""
    fig = mock.MagicMock()
    fig.savefig.side_effect = lambda path, **kw: Path(path).write_bytes(b"\x89PNG fake")
    pyplot = types.ModuleType("matplotlib.pyplot")
    pyplot.subplots = lambda *a, **kw: (fig, [mock.MagicMock() for _ in range(3)])
    pyplot.close = lambda f: None
    mpl = types.ModuleType("matplotlib")
    mpl.use = lambda backend: None
    mpl.pyplot = pyplot
    monkeypatch.setitem(sys.modules, "matplotlib", mpl)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", pyplot)


def test_plot_says_where_the_png_went(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_matplotlib(monkeypatch)
    monkeypatch.chdir(tmp_path)
    target = scale.check_plot(Path("scale"))  # no suffix: .png is added
    assert target == (tmp_path / "scale.png").resolve()
    result = {"points": [], "summary": {}, "machine": {"cpu": "test"}}
    written = scale.plot(result, target)
    assert written == target
    assert written.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("command", ["frozen", "migrate"])
@pytest.mark.parametrize("sizes", ["64,abc", "0", "-5", "", ",", "64,0"])
def test_bad_sizes_are_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, sizes: str
) -> None:
    from ckpt.bench import frozen, migrate

    ran: list[Any] = []
    monkeypatch.setattr(frozen, "run", lambda *a, **kw: ran.append(a))
    monkeypatch.setattr(migrate, "run", lambda *a, **kw: ran.append(a))
    res = _bench_load(tmp_path, "bench", command, "--sizes", sizes)
    assert isinstance(res.exception, BenchError)
    assert str(res.exception) == f"bad --sizes {sizes!r}: give MiB counts such as 64,256"
    assert ran == []


@pytest.mark.parametrize("command", ["frozen", "migrate"])
def test_good_sizes_reach_the_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    from ckpt.bench import frozen, migrate

    suite = {"frozen": frozen, "migrate": migrate}[command]
    ran: list[Any] = []
    monkeypatch.setattr(suite, "run", lambda sizes, *a, **kw: ran.append(sizes) or {"x": 1})
    res = _bench_load(tmp_path, "bench", command, "--sizes", " 256, 64 ", "--json")
    assert res.exit_code == 0, res.output
    assert ran == [[256, 64]]
    assert json.loads(res.output) == {"x": 1}


class _Suite:
    """A suite module's three printers, recording which ran."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def render(self, report: Any) -> str:
        self.calls.append("render")
        return f"table of {report['n']}"

    def go_lines(self, report: Any) -> list[str]:
        self.calls.append("go_lines")
        return [f"BenchmarkX\t1\t{report['n']} ns/op"]

    def to_json(self, report: Any) -> Any:
        self.calls.append("to_json")
        return {"n": report["n"], "as": "json"}


def test_suite_report_prints_json_alone_or_the_table_then_go_lines(capsys) -> None:
    from ckpt.cli.output import suite_report

    suite = _Suite()
    suite_report(suite, {"n": 7}, True)
    assert json.loads(capsys.readouterr().out) == {"n": 7, "as": "json"}
    assert suite.calls == ["to_json"]
    suite = _Suite()
    suite_report(suite, {"n": 7}, False)
    out = capsys.readouterr().out
    assert out.index("table of 7") < out.index("BenchmarkX\t1\t7 ns/op")
    assert suite.calls == ["render", "go_lines"]
