"""Stats: per-type counts and times when asked for; not a single clock read otherwise."""

from __future__ import annotations

import itertools
import sys
import time
from dataclasses import dataclass
from typing import Any

import pytest

from ckpt import state

from .conftest import roundtrip
from .graph_equal import assert_graph_equal
from .models import Leaf, Node, Pair, SLeaf

CLOCKS = ("perf_counter_ns", "perf_counter", "monotonic_ns", "monotonic", "time_ns", "time")


class ClockRead(Exception):
    """A clock was read although stats were off."""


def _graph() -> list[Any]:
    leaves = [Leaf(i) for i in range(5)]
    nodes = [Node(i, payload=leaves[i % 5]) for i in range(12)]
    for a, b in itertools.pairwise(nodes):
        a.next = b
    return [nodes[0], [Pair(leaves[0], SLeaf(1)) for _ in range(3)]]


EXPECTED = {"tests.state.Node": 12, "tests.state.Leaf": 5, "tests.state.Pair": 3}
EXPECTED["tests.state.SLeaf"] = 3


@pytest.fixture
def clocks_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every clock raise, in `time` and wherever ckpt.state bound one by name."""

    def boom(*args: Any) -> Any:
        raise ClockRead("a clock was read")

    originals = {getattr(time, name) for name in CLOCKS}
    for name in CLOCKS:
        monkeypatch.setattr(time, name, boom)
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith("ckpt.state"):
            continue
        for attr, value in list(vars(module).items()):
            if callable(value) and value in originals:
                monkeypatch.setattr(module, attr, boom)


def _counts(stats: Any) -> dict[str, int]:
    table = stats.as_dict()
    return {row["type"]: row["count"] for row in table["types"]}


def test_no_clock_is_read_without_stats(engines: tuple[str, str], clocks_raise: None) -> None:
    graph = _graph()
    assert_graph_equal(graph, roundtrip(graph, engines))


def test_the_clock_patch_would_catch_a_read(engine: str, clocks_raise: None) -> None:
    """Control for the test above: with stats on, the patched clock must fire."""
    with pytest.raises(Exception) as info:
        state.dumps(_graph(), engine=engine, stats=state.Stats())
    chain, exc = [], info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(isinstance(e, ClockRead) for e in chain), chain


def test_save_counts_per_type(engine: str) -> None:
    stats = state.Stats()
    state.dumps(_graph(), engine=engine, stats=stats)
    counts = _counts(stats)
    assert {k: v for k, v in counts.items() if k.startswith("tests.")} == EXPECTED


def test_load_counts_per_type(engines: tuple[str, str]) -> None:
    data = state.dumps(_graph(), engine=engines[0])
    stats = state.Stats()
    loaded = state.loads(data, engine=engines[1], stats=stats)
    counts = _counts(stats)
    assert {k: v for k, v in counts.items() if k.startswith("tests.")} == EXPECTED
    assert_graph_equal(_graph(), loaded)


def test_counts_track_the_graph(engine: str) -> None:
    """Counts follow the graph, not a constant: double the graph, double the counts."""
    stats = state.Stats()
    state.dumps([_graph(), _graph()], engine=engine, stats=stats)
    counts = _counts(stats)
    assert {k: v for k, v in counts.items() if k.startswith("tests.")} == {
        k: 2 * v for k, v in EXPECTED.items()
    }


def test_times_are_non_negative_ints(engine: str) -> None:
    stats = state.Stats()
    state.loads(state.dumps(_graph(), engine=engine, stats=stats), engine=engine, stats=stats)
    table = stats.as_dict()
    assert isinstance(table["total_ns"], int) and table["total_ns"] >= 0
    for row in table["types"]:
        assert isinstance(row["total_ns"], int) and row["total_ns"] >= 0, row
    assert _counts(stats)["tests.state.Node"] == 24  # the save and the load both counted


def test_str_renders_a_table_naming_the_types(engine: str) -> None:
    stats = state.Stats()
    state.dumps(_graph(), engine=engine, stats=stats)
    text = str(stats)
    for name, count in EXPECTED.items():
        line = next((ln for ln in text.splitlines() if ln.rstrip().endswith(name)), None)
        assert line is not None, f"{name} missing from:\n{text}"
        assert str(count) in line.split(), line
    assert "count" in text


def test_rich_rendering_names_the_types() -> None:
    from rich.console import Console

    stats = state.Stats()
    state.dumps(_graph(), engine="typed", stats=stats)
    console = Console(width=120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(stats)
    text = console.export_text()
    assert "tests.state.Node" in text


def test_rows_are_sorted_by_total_time(engine: str) -> None:
    stats = state.Stats()
    state.dumps([_graph() for _ in range(5)], engine=engine, stats=stats)
    totals = [row["total_ns"] for row in stats.as_dict()["types"]]
    assert len(totals) >= 4
    assert totals == sorted(totals, reverse=True)


@state.savable(name="tests.state.stats.Big")
@dataclass(eq=False)
class Big:
    n: int = 0


def test_counts_with_ints_beyond_64_bits(engine: str) -> None:
    """A typed writer that re-encodes for big ints must not count objects twice."""
    stats = state.Stats()
    state.dumps([Big(1), Big(2**70), Big(3)], engine=engine, stats=stats)
    assert _counts(stats)["tests.state.stats.Big"] == 3


def _fresh_class(tag: str) -> type:
    """A new savable class (its code not generated yet) with a quoted self-reference."""

    @state.savable(name=f"tests.state.stats.Fresh{tag}")
    @dataclass(eq=False)
    class Fresh:
        n: int = 0
        nxt: Fresh | None = None

    return Fresh


@pytest.mark.parametrize("engine", ["typed", "reflect"])
def test_one_time_set_up_is_reported_apart(engine: str) -> None:
    """First use resolves annotations and generates code: that goes on the set-up line,
    not into the type's per-object time (once: 3 objects "taking" 44.6 ms)."""
    fresh = _fresh_class(engine)
    stats = state.Stats()
    data = state.dumps([fresh(1, fresh(2)), fresh(3)], engine, stats=stats)
    assert stats.counts[f"tests.state.stats.Fresh{engine}"] == 3
    assert stats.setup_ns > 0
    assert "(set-up, once per class)" in str(stats)
    assert stats.as_dict()["setup_ns"] == stats.setup_ns
    # A second save of the same classes has nothing left to set up.
    again = state.Stats()
    state.dumps([fresh(1)], engine, stats=again)
    assert again.setup_ns == 0
    load_stats = state.Stats()
    state.loads(data, engine, stats=load_stats)
    assert load_stats.counts[f"tests.state.stats.Fresh{engine}"] == 3


def test_set_up_reads_no_clock_without_stats(clocks_raise: None) -> None:
    fresh = _fresh_class("noclock")
    assert state.loads(state.dumps(fresh(1, fresh(2)))).nxt.n == 2
