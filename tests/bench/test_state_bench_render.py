"""The benchmark tables fit an 80-column terminal and split long names where they read
best, never mid-word ("DecodeStrea" over "m")."""

from __future__ import annotations

import io

from rich.console import Console

from ckpt.bench import harness

NAMES = (
    "DecodeStream",
    "EncodeStream",
    "Encoding/root-dict",
    "BigIntGraphSave",
    "Files20000Save",
    "GraphSave",
)


def _results() -> list[harness.Result]:
    out = []
    for name in NAMES:
        for variant, ns in (("reflect", 41_618_258), ("native", 5_536_548)):
            sample = harness.Sample(ns, ns, 1, 25_466, 172_645)
            out.append(harness.Result(name, variant, [sample] * 3, peak_bytes=2_254_189))
    return out


def _text() -> str:
    buf = io.StringIO()
    table = harness.render(_results(), baseline="reflect", title="ckpt bench checkpointfile")
    Console(file=buf, width=80, force_terminal=False).print(table)
    return buf.getvalue()


def _first_cells(text: str) -> list[str]:
    return [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]


def test_tables_fit_80_columns() -> None:
    assert max(len(line) for line in _text().splitlines()) <= 80


def test_long_names_split_at_a_word_boundary() -> None:
    cells = [c for c in _first_cells(_text()) if c]
    for expected in ("Decode", "Stream", "Encoding/", "root-dict", "BigInt", "Files20000"):
        assert expected in cells
    assert "GraphSave" in cells  # short enough for one line, and BigIntGraphSave's second
    for cell in cells:  # every piece is the start of a name or a whole word of one
        assert any(
            name.startswith(cell) or cell in harness._two_lines(name).split("\n") for name in NAMES
        ), cell
