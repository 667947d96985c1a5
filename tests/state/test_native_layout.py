"""The native loader stores fields straight into a fresh instance's inline values
(CPython 3.11 to 3.13), skipping ``PyObject_GenericSetAttr``'s descriptor and key lookups.

What must hold is that the instances it makes are indistinguishable from the typed
engine's: the same attributes in the same order, and afterwards every ordinary
operation works (read, write, add, delete, ``__dict__``, ``copy``, ``pickle``).  The
import-time check is exercised here too, so a CPython whose layout differs shows up as
a failed check (the fast path off), never as a wrong instance.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import sys
import sysconfig

import pytest

from ckpt import state
from ckpt.bench import state_models as bench
from ckpt.state import native

from .graph_equal import assert_graph_equal
from .requires import requires_native

pytestmark = requires_native
# the CPython versions whose instance layouts the core knows (_native_layout.h)
KNOWN_LAYOUT = (3, 11) <= sys.version_info[:2] <= (3, 13) and not sysconfig.get_config_var(
    "Py_GIL_DISABLED"
)


@state.savable(name="tests.store.Point")
@dataclasses.dataclass(eq=False)
class Point:
    x: int = 0
    y: float = 0.0
    label: str = ""
    tags: list[str] = dataclasses.field(default_factory=list)
    peer: Point | None = None


@state.savable(name="tests.store.Frozen")
@dataclasses.dataclass(eq=False, frozen=True)
class Frozen:
    a: int = 0
    b: str = ""


def _points(n: int) -> list[Point]:
    pts = [Point(i, i / 2, f"p{i}", [f"t{i}"] * (i % 3)) for i in range(n)]
    for i, p in enumerate(pts):
        p.peer = pts[(i * 7) % n]
    return pts


@pytest.mark.skipif(
    not KNOWN_LAYOUT or not getattr(native._core, "fast_paths", 0),
    reason="the direct store is for CPython 3.11-3.13's layouts, in a build that reads them",
)
def test_the_import_check_accepts_this_interpreter() -> None:
    native._StoreProbe(1, 2)
    fresh = object.__new__(native._StoreProbe)
    a, b = object(), object()
    assert native._core.check_store(fresh, sys.intern("a"), a, sys.intern("b"), b) is True
    assert list(vars(fresh).items()) == [("b", b), ("a", a)]  # stored b first, then a


def test_the_check_refuses_an_instance_that_is_not_fresh() -> None:
    used = native._StoreProbe(1, 2)
    assert native._core.check_store(used, "a", 3, "b", 4) is False
    assert (used.a, used.b) == (1, 2)  # untouched
    fresh = object.__new__(native._StoreProbe)
    native._core.check_store(fresh, sys.intern("a"), 5, sys.intern("b"), 6)  # on again


@pytest.mark.parametrize("n", [1, 2, 50])
def test_loaded_instances_match_typed_field_for_field_in_order(n: int) -> None:
    pts = _points(n)
    data = state.dumps(pts, engine="native")
    fast, slow = state.loads(data, engine="native"), state.loads(data, engine="typed")
    assert_graph_equal(pts, fast)
    assert_graph_equal(slow, fast)
    for f, s in zip(fast, slow, strict=True):
        assert list(vars(f)) == list(vars(s)) == ["x", "y", "label", "tags", "peer"]


def test_loaded_instances_take_every_ordinary_operation() -> None:
    p, q = state.loads(state.dumps(_points(2), engine="native"), engine="native")
    assert (p.x, p.y, p.label, p.tags, p.peer) == (0, 0.0, "p0", [], p)
    p.x = 41
    p.extra = "new"  # a key the class never had
    del p.label
    assert vars(p) == {"x": 41, "y": 0.0, "tags": [], "peer": p, "extra": "new"}
    assert p.label == ""  # the class attribute (the field's default) shows through
    c = copy.copy(q)
    assert vars(c) == vars(q) and c is not q
    again = pickle.loads(pickle.dumps(q))
    assert (again.x, again.label, again.tags) == (q.x, q.label, q.tags)
    q.__dict__["y"] = 9.5
    assert q.y == 9.5


def test_frozen_instances_load_the_same_and_stay_frozen() -> None:
    items = [Frozen(i, f"f{i}") for i in range(20)]
    loaded = state.loads(state.dumps(items, engine="native"), engine="native")
    assert_graph_equal(items, loaded)
    assert list(vars(loaded[3])) == ["a", "b"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded[3].a = 1


def test_the_benchmark_fields_shape_matches_typed() -> None:
    root = bench.make_fields()
    data = state.dumps(root, engine="native")
    fast = state.loads(data, engine="native")
    assert_graph_equal(root, fast)
    assert_graph_equal(state.loads(data, engine="typed"), fast)
    assert list(vars(fast.items[5])) == [f.name for f in dataclasses.fields(bench.Fields)]
