"""The native load's look-ahead changes nothing but speed.

Past ``load_ahead_min`` objects, ``read_fill`` runs a second cursor a few rows ahead
that reads reference fields and prefetches the objects they name.  It only reads: every
stream, well-formed or hostile, loads to the same graph or fails with the same message
whether it runs or not.  Here it is forced on (threshold 0) for small streams, compared
with it forced off, and left at its default for a graph large enough to use it.  Under
AddressSanitizer (.ci/asan.sh) a read past the rows would abort the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ckpt import state
from ckpt.bench import state_flat, state_models
from ckpt.state import wire

from .graph_equal import graph_diff
from .requires import requires_native
from .test_corruption import HOSTILE, HOSTILE_TAGGED, ORIGINAL, _leaf_paths, _replaced

pytestmark = requires_native

NEVER = 1 << 60


def _core() -> Any:
    from ckpt.state import native

    return native._core


@pytest.fixture
def ahead_threshold() -> Iterator[Any]:
    """Set the threshold for one test and put the default back afterwards."""
    core = _core()
    default = core.set_load_ahead_min(NEVER)
    core.set_load_ahead_min(default)
    yield core.set_load_ahead_min
    core.set_load_ahead_min(default)


def _outcome(data: bytes) -> tuple[str, Any]:
    try:
        return "loaded", state.loads(data, "native")
    except state.StateError as exc:
        return "error", str(exc)


def _same_both_ways(data: bytes, set_min: Any, what: str) -> None:
    set_min(0)
    ahead = _outcome(data)
    set_min(NEVER)
    plain = _outcome(data)
    assert ahead[0] == plain[0], f"{what}: {ahead[0]} with look-ahead, {plain[0]} without"
    if ahead[0] == "error":
        assert ahead[1] == plain[1], what
    else:
        assert graph_diff(plain[1], ahead[1]) is None, what


def test_hostile_value_at_every_position_same_with_look_ahead(
    ahead_threshold: Any, watchdog: None
) -> None:
    payload = wire.unframe(state.dumps(ORIGINAL, "native"))
    paths = list(_leaf_paths(payload))
    assert len(paths) > 20
    for path in paths:
        for value in HOSTILE + HOSTILE_TAGGED:
            _same_both_ways(wire.frame(_replaced(payload, path, value)), ahead_threshold, path)


@pytest.mark.parametrize(
    "make",
    [
        lambda: state_models.make_graph(3000, seed=5),
        lambda: state_flat.make_flat(2000),
        lambda: state_models.make_people(1500),
        state_models.make_fields,
        state_models.make_ptr,
        state_models.make_map,
    ],
    ids=["graph", "flat", "people", "fields", "ptr", "map"],
)
def test_bench_shapes_load_as_typed_loads_them(make: Any, ahead_threshold: Any) -> None:
    root = make()
    data = state.dumps(root, "native")
    ahead_threshold(0)
    loaded = state.loads(data, "native")
    assert graph_diff(root, loaded) is None
    assert graph_diff(state.loads(data, "typed"), loaded) is None


def test_rows_with_ids_past_the_objects_fail_alike(ahead_threshold: Any, watchdog: None) -> None:
    """Every reference in a graph's rows replaced, one at a time, by ids at and past the
    object count, and by a non-id: the look-ahead skips what fill then reports."""
    root = state_models.make_graph(60, seed=9)
    payload = wire.unframe(state.dumps(root, "native"))
    objects = len(payload[wire.TYPE_SEQ]) + 1
    rows = payload[wire.ROWS]
    done = 0
    for t, type_rows in enumerate(rows):
        for r, row in enumerate(type_rows[:8]):
            for c, cell in enumerate(row):
                if type(cell) is not int or cell <= 0:
                    continue
                for bad in (objects, objects + 7, 2**40, "id"):
                    path = (wire.ROWS, t, r, c)
                    _same_both_ways(
                        wire.frame(_replaced(payload, path, bad)), ahead_threshold, path
                    )
                    done += 1
    assert done > 50


def test_a_graph_past_the_default_threshold_loads_the_same(ahead_threshold: Any) -> None:
    root = state_models.make_graph(70_000, seed=11)
    data = state.dumps(root, "native")
    with_default = state.loads(data, "native")  # 70k objects: past the default
    ahead_threshold(NEVER)
    without = state.loads(data, "native")
    assert graph_diff(root, with_default) is None
    assert graph_diff(without, with_default) is None


def test_committed_fuzz_inputs_with_look_ahead_forced_on(
    ahead_threshold: Any, watchdog: None
) -> None:
    """The fuzzer's kept state inputs, replayed with the look-ahead on for every load:
    the fuzz target's own checks (a value or a CkptError; typed and native agree)."""
    from pathlib import Path

    from tests.fuzz import targets

    corpus = Path(__file__).resolve().parent.parent / "fuzz" / "corpus" / "state"
    inputs = sorted(f for f in corpus.iterdir() if f.is_file())
    assert len(inputs) > 20, corpus
    ahead_threshold(0)
    for path in inputs:
        targets.TARGETS["state"](path.read_bytes())
