"""Cross-engine matrix: every field kind, saved with each engine and loaded with each."""

from __future__ import annotations

import pytest

from ckpt import state

from .conftest import roundtrip
from .graph_equal import assert_graph_equal, graph_diff
from .kinds import KINDS, Kind, holder

SLOTS = pytest.mark.parametrize("slots", [False, True], ids=["plain", "slots"])
KIND = pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])


def test_engines_are_reflect_typed_and_native_where_built() -> None:
    native = ("native",) if state.native_status()[0] else ()
    assert ("reflect", "typed", *native) == state.ENGINES


@KIND
@SLOTS
def test_every_sample_round_trips_in_a_root_list(
    kind: Kind, slots: bool, engines: tuple[str, str]
) -> None:
    cls = holder(kind, slots)
    original = [cls(v) for v in kind.samples()]
    loaded = roundtrip(original, engines)
    assert_graph_equal(original, loaded)
    assert all(type(obj) is cls for obj in loaded)


@KIND
def test_each_sample_round_trips_as_the_root_object(kind: Kind, engines: tuple[str, str]) -> None:
    cls = holder(kind, slots=False)
    for value in kind.samples():
        original = cls(value)
        loaded = roundtrip(original, engines)
        assert loaded is not original
        diff = graph_diff(original, loaded)
        assert diff is None, f"value {value!r:.100}: {diff}"


@KIND
def test_a_kind_inside_a_dict_root_of_objects(kind: Kind, engines: tuple[str, str]) -> None:
    """The root may be plain data: a dict mapping names to savable objects."""
    cls = holder(kind, slots=True)
    original = {f"k{i}": cls(v) for i, v in enumerate(kind.samples())}
    loaded = roundtrip(original, engines)
    assert type(loaded) is dict
    assert_graph_equal(original, loaded)


@pytest.mark.parametrize(
    "root",
    [
        pytest.param([], id="empty-list"),
        pytest.param({}, id="empty-dict"),
        pytest.param([1, "a", None, 2.5, b"x", (1, 2)], id="plain-list"),
        pytest.param({"a": [1, 2], "b": {"c": (3,)}, 4: {5, 6}}, id="plain-dict"),
        pytest.param(7, id="int"),
        pytest.param(None, id="none"),
        pytest.param("text", id="str"),
        pytest.param((1, [2]), id="tuple"),
    ],
)
def test_plain_data_roots(root: object, engines: tuple[str, str]) -> None:
    assert_graph_equal(root, roundtrip(root, engines))
