"""``ckpt bench state-scale``: sizes, failures, tables that fit, JSON and Go lines."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from ckpt.bench import state_scale
from ckpt.bench.harness import BenchError


def test_parse_sizes_accepts_suffixes_sorts_and_dedups() -> None:
    assert state_scale.parse_sizes("100k, 20000,1M,20k") == [20_000, 100_000, 1_000_000]


@pytest.mark.parametrize("text", ["", "abc", "10", "2x"])
def test_parse_sizes_rejects_what_is_not_a_usable_count(text: str) -> None:
    with pytest.raises(BenchError, match="--sizes"):
        state_scale.parse_sizes(text)


def test_parse_engines() -> None:
    assert state_scale.parse_engines("") == list(state_scale.CONTENDERS)
    assert state_scale.parse_engines("typed,pickle,typed") == ["typed", "pickle"]
    with pytest.raises(BenchError, match="unknown pickle-py"):
        state_scale.parse_engines("typed,pickle-py")


@pytest.fixture(scope="module")
def points() -> list[state_scale.Point]:
    return state_scale.run([300, 600], ["typed", "reflect", "pickle"], count=2, progress=False)


def test_every_engine_and_size_is_measured_or_failed(points: list[state_scale.Point]) -> None:
    assert [(p.nodes, p.engine) for p in points] == [
        (n, e) for n in (300, 600) for e in ("typed", "reflect", "pickle", "walk")
    ]
    for p in points:
        if p.engine == "walk":
            assert p.load is None and len(p.save.samples) == 2 and p.per_node("save") > 0
            continue
        if p.engine == "pickle" and p.failure:
            assert "RecursionError" in p.failure and p.save is None
            continue
        assert not p.failure
        assert len(p.save.samples) == len(p.load.samples) == 2
        assert p.per_node("save") > 0 and p.per_node("load") > 0
        assert p.save.peak_bytes > 0 and p.load.peak_bytes > 0
        assert p.stream_bytes > 100 * p.nodes / 10  # tens of bytes per node


def test_typed_and_reflect_streams_differ_in_size(points: list[state_scale.Point]) -> None:
    by = {(p.nodes, p.engine): p for p in points}
    assert by[(600, "typed")].stream_bytes < by[(600, "reflect")].stream_bytes


def test_growth_is_relative_to_the_smallest_size(points: list[state_scale.Point]) -> None:
    by = {(p.nodes, p.engine): p for p in points}
    small, big = by[(300, "typed")], by[(600, "typed")]
    assert state_scale.growth(points, small, "save") == 1.0
    want = big.per_node("load") / small.per_node("load")
    assert state_scale.growth(points, big, "load") == pytest.approx(want)
    rows = state_scale.target_rows(points)
    assert {(r["engine"], r["op"], r["nodes"]) for r in rows} == {
        ("typed", "save", 600),
        ("typed", "load", 600),
    }
    walk = by[(600, "walk")].per_node("save") / by[(300, "walk")].per_node("save")
    assert all(r["walk_growth"] == pytest.approx(walk) for r in rows)


def test_touch_reads_every_objects_attributes() -> None:
    from ckpt.bench import state_models

    root = state_models.make_graph(300)
    ints = sum(
        type(v) is int
        for group in (root.hubs, root.nodes, root.leaves)
        for o in group
        for v in vars(o).values()
    )
    assert ints > 300 and state_scale.touch(root) == ints


def test_tables_fit_80_columns(points: list[state_scale.Point]) -> None:
    buf = io.StringIO()
    Console(file=buf, width=80, force_terminal=False).print(state_scale.render(points))
    text = buf.getvalue()
    assert max(map(len, text.splitlines())) <= 80
    assert "…" not in text  # nothing cut
    assert "typed" in text and "growth" in text


def test_json_and_go_lines(points: list[state_scale.Point]) -> None:
    doc = json.loads(json.dumps(state_scale.to_json(points)))
    assert len(doc["points"]) == 8 and "tracemalloc" in doc["memory"]
    walks = [p for p in doc["points"] if p["engine"] == "walk"]
    assert [p["nodes"] for p in walks] == [300, 600] and walks[0]["walk_growth"] == 1.0
    assert all(r["walk_growth"] == walks[1]["walk_growth"] for r in doc["targets"])
    typed = [p for p in doc["points"] if p["engine"] == "typed"]
    assert all(p["save_ns_per_node"] > 0 and p["stream_bytes"] > 0 for p in typed)
    lines = state_scale.go_lines(points)
    ok = [p for p in points if not p.failure]
    engines = [p for p in ok if p.engine != "walk"]
    assert len(lines) == 2 * len(engines) + 2
    assert all(line.startswith("BenchmarkStateScale/") for line in lines)
    assert sum(line.startswith("BenchmarkStateScale/Walk/nodes=") for line in lines) == 2
    assert any("nodes=600/typed" in line and "stream-B" in line for line in lines)
