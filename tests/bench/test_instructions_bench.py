"""``ckpt bench instructions``: callgrind counts only the operations, every failure is a
one-line BenchError, and the tables fit 80 columns."""

from __future__ import annotations

import io
import shutil
import sys

import pytest
from rich.console import Console

from ckpt.bench import instructions
from ckpt.bench.harness import BenchError

ALL = instructions.benchmark_names()


def test_parse_reads_the_summary_or_totals_line() -> None:
    assert instructions.parse_callgrind(b"events: Ir\nfl=x\nsummary: 123456\n") == 123456
    assert instructions.parse_callgrind(b"events: Ir\ntotals: 42\n") == 42
    with pytest.raises(BenchError, match="no summary line"):
        instructions.parse_callgrind(b"events: Ir\nfl=x\n")


def test_every_bench_state_benchmark_is_offered() -> None:
    assert "Encoding/fields" in ALL and "Decoding/fields" in ALL
    assert {"GraphSave", "GraphLoad", "FlatSave", "FlatLoad", "PeopleLoad"} <= set(ALL)


def test_no_valgrind_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(instructions.shutil, "which", lambda _name: None)
    with pytest.raises(BenchError, match="valgrind is not installed"):
        instructions.run(["Encoding/ptr"], ["typed"])


def test_an_unknown_variant_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(instructions.shutil, "which", lambda _name: "/bin/true")
    with pytest.raises(BenchError, match="unknown variant 'quickle'"):
        instructions.run(["Encoding/ptr"], ["typed", "quickle"])


def _fake_counter(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """Stand a plain Python child in for valgrind: ``script`` gets the out file as argv[1]."""
    monkeypatch.setattr(instructions.shutil, "which", lambda _name: "/bin/true")
    monkeypatch.setattr(
        instructions,
        "_command",
        lambda _vg, out_file, _args: [sys.executable, "-c", script, out_file],
    )


def test_a_count_of_zero_says_the_interpreter_has_no_symbols(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_counter(monkeypatch, "import sys; open(sys.argv[1], 'w').write('summary: 0\\n')")
    with pytest.raises(BenchError, match="counted nothing inside functools_reduce"):
        instructions.run(["Encoding/ptr"], ["typed"])


def test_a_failed_child_names_the_case_and_its_last_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_counter(monkeypatch, "import sys; print('boom: no memory', file=sys.stderr); sys.exit(3)")
    with pytest.raises(BenchError, match=r"Decoding/ptr/typed: .*exit 3.*boom: no memory"):
        instructions.run(["Decoding/ptr"], ["typed"])


def test_the_fake_counter_path_returns_counts_per_op(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_counter(monkeypatch, "import sys; open(sys.argv[1], 'w').write('summary: 1000\\n')")
    counts = instructions.run(["Encoding/ptr", "GraphSave"], ["typed", "reflect"], jobs=2)
    assert [(c.name, c.variant) for c in counts] == [
        ("Encoding/ptr", "typed"),
        ("Encoding/ptr", "reflect"),
        ("GraphSave", "typed"),
        ("GraphSave", "reflect"),
    ]
    assert [c.per_op for c in counts] == [200.0, 200.0, 1000.0, 1000.0]  # 5 ops; 1 on graphs


def test_the_child_refuses_an_unknown_benchmark() -> None:
    with pytest.raises(SystemExit, match="unknown benchmark 'Encoding/nope'"):
        instructions._child(["Encoding/nope", "typed", "1", "10"])


def test_tables_fit_80_columns_and_keep_every_name() -> None:
    counts = [
        instructions.Count(name, variant, 1, 1_356_300_000 + i)
        for i, name in enumerate(ALL)
        for variant in ("native", "typed", "reflect", "pickle")
    ]
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=False)
    for table in instructions.render(counts):
        console.print(table)
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    assert "1356.30M" in text and "1.000" in text


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_real_counts_rank_the_engines() -> None:
    """Under callgrind, native saves the 1024-long chain in far fewer instructions than
    reflect, and the setup (imports, building the chain) is not in either count."""
    variants = ["native", "reflect"] if "native" in instructions.VARIANTS else ["typed", "reflect"]
    fast, reflect = instructions.run(["Encoding/ptr"], variants, ops=2, graph_nodes=10, jobs=2)
    assert fast.ops == reflect.ops == 2
    # An interpreter start with ckpt's imports alone is ~600M instructions: a count
    # this small holds only the operations.
    assert 0 < fast.per_op < reflect.per_op / 3 < 100e6


def test_a_filter_that_matches_nothing_names_what_there_is() -> None:
    assert instructions.benchmark_names(pattern="fields") == ["Encoding/fields", "Decoding/fields"]
    with pytest.raises(
        BenchError, match=r"--filter 'nope' matches no benchmark; there are: .*GraphSave"
    ):
        instructions.benchmark_names(pattern="nope")
