# ruff: noqa: RUF009  (state.field is a dataclass field specifier ruff does not know)
"""Python code run for one field (a ``save=`` function here) may change the very object
being saved: set a later field, make its ``__dict__`` (CPython 3.11 then moves the
inline values into it), add a key that turns that dict into a combined table (the
values array is freed), delete a field, or change ``__class__``.

The native save reads fields straight from inline values and skips re-checking them
while only scalars have been written; after any Python code it must look again.  Each
case must write exactly typed's bytes or fail the way typed does.  Under ASan (asan.sh
runs this file) a stale values pointer is a use-after-free report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from ckpt import state
from ckpt.errors import StateError

from .requires import requires_native

pytestmark = requires_native


class Meddler:
    """A field value whose save function runs `act` on the object that holds it."""

    def __init__(self, act: Callable[[Any], None]) -> None:
        self.act = act
        self.owner: Any = None


def _save_meddler(m: Meddler) -> int:
    m.act(m.owner)
    return 1


@state.savable(name="tests.midsave.Target")
@dataclasses.dataclass(eq=False)
class Target:
    a: int = 1
    meddler: Any = state.field(save=_save_meddler, load=lambda _v: None, default=None)
    b: int = 2
    c: str = "c"
    d: float = 4.0
    e: list[int] = dataclasses.field(default_factory=list)
    f: int = 6


@state.savable(name="tests.midsave.Other")
@dataclasses.dataclass(eq=False)
class Other:
    b: int = 20
    c: str = "other"


def _set_later(o: Target) -> None:
    o.b, o.c, o.f = 200, "changed", 600


def _make_dict(o: Target) -> None:
    o.__dict__  # noqa: B018 - materialises the dict, which takes the inline values
    o.b = 201


def _combine(o: Target) -> None:
    o.__dict__["extra"] = "x" * 100  # a key the shared keys lack: values freed
    o.b, o.d = 202, 40.5


def _replace_dict(o: Target) -> None:
    o.__dict__ = {"a": 9, "meddler": None, "b": 203, "c": "new", "d": 1.5, "e": [7], "f": 8}


def _delete(o: Target) -> None:
    del o.c


def _change_class(o: Target) -> None:
    o.__class__ = Other


ACTS = {
    "set-later-fields": _set_later,
    "make-dict": _make_dict,
    "combine-dict": _combine,
    "replace-dict": _replace_dict,
    "delete-field": _delete,
    "change-class": _change_class,
}


def _fresh(act: Callable[[Any], None], n: int = 50) -> list[Target]:
    objs = []
    for i in range(n):
        t = Target(a=i, b=i * 2, c=f"c{i}", d=i / 4, e=[i], f=i * 3)
        t.meddler = Meddler(act)
        t.meddler.owner = t
        objs.append(t)
    return objs


def _outcome(engine: str, act: Callable[[Any], None]) -> tuple[str, Any]:
    try:
        return "bytes", state.dumps(_fresh(act), engine=engine)
    except (StateError, AttributeError, TypeError) as exc:
        return "error", type(exc).__name__


@pytest.mark.parametrize("act", list(ACTS.values()), ids=list(ACTS))
def test_python_code_that_changes_the_object_mid_save_gives_typeds_result(act) -> None:
    typed = _outcome("typed", act)
    native = _outcome("native", act)
    assert native == typed


def test_the_changed_values_are_the_ones_saved() -> None:
    kind, data = _outcome("native", _combine)
    assert kind == "bytes"
    back = state.loads(data)
    assert [(t.b, t.d) for t in back] == [(202, 40.5)] * 50


# The walk reads ahead: while one object is written it already fetches the dicts, values
# and field values of the next twenty or so (see "looking ahead" in _native.c), once it
# has met more objects than fit the L2 cache (the core's `look_ahead_min`).  Python code
# run for one object may change those later objects first, or free what was read ahead
# for them; what is read ahead must be read again, never trusted.  Each act keeps the
# later object savable, so the whole list is written.


@state.savable(name="tests.midsave.Twin")
@dataclasses.dataclass(eq=False)
class Twin(Target):  # Target's fields under another class (and other shared keys)
    pass


def _later_combine(o: Any) -> None:
    d = o.__dict__  # takes the inline values; the keys below turn it combined, freeing them
    for k in range(40):
        d.setdefault(f"extra{k}", k)
    o.b += 1


def _later_replace(o: Any) -> None:
    o.__dict__ = {**o.__dict__, "b": -o.b, "e": [o.a, o.a]}  # the old dict and values go


def _later_shrink(o: Any) -> None:
    for k in ("b", "c", "d", "f"):
        o.__dict__.pop(k, None)  # typed then reads the class defaults


def _later_switch(o: Any) -> None:
    o.__class__ = Twin if type(o) is Target else Target


LATER_ACTS = {
    "set-fields": _set_later,
    "make-dict": lambda o: o.__dict__,
    "combine-dict": _later_combine,
    "replace-dict": _later_replace,
    "shrink-dict": _later_shrink,
    "switch-class": _later_switch,
}


def _fresh_meddling_later(act: Callable[[Any], None]) -> list[Target]:
    from ckpt.state import native

    objs = _fresh(lambda _o: None, native._core.look_ahead_min + 64)
    for i, t in enumerate(objs):
        later = objs[i + 1 : i + 25]
        t.meddler.act = lambda _o, later=later: [act(x) for x in later]
    return objs


@pytest.mark.parametrize("act", list(LATER_ACTS.values()), ids=list(LATER_ACTS))
def test_python_code_that_changes_later_objects_gives_typeds_result(act) -> None:
    typed = state.dumps(_fresh_meddling_later(act), engine="typed")
    native = state.dumps(_fresh_meddling_later(act), engine="native")
    assert native == typed


def _dicts_made(graph: Any) -> Any:
    for obj in graph.nodes + graph.leaves + graph.hubs:
        vars(obj)  # as pickle does: the dict made takes the inline values (a split table)
    return graph


def _dicts_combined(graph: Any) -> Any:
    for obj in graph.nodes + graph.leaves + graph.hubs:
        obj.__dict__ = dict(obj.__dict__)  # a combined str-keyed table of its own
    return graph


@pytest.mark.parametrize(
    "layout",
    [lambda g: g, _dicts_made, _dicts_combined],
    ids=["inline-values", "split-dicts", "combined-dicts"],
)
def test_large_graphs_in_every_attribute_layout_write_typeds_bytes(layout) -> None:
    from ckpt.bench import state_models
    from ckpt.state import native

    nodes = native._core.look_ahead_min + 2000  # large enough for the walk to look ahead
    graph = layout(state_models.make_graph(nodes, seed=11))
    assert state.dumps(graph, engine="native") == state.dumps(graph, engine="typed")


# The walk also reads ahead into lists of references (the item array of a later object's
# list, each item's header and id slot) and into dicts (their keys and entries).  Python
# code run for one object may empty, grow (a new item array, a new keys object), replace
# or share those containers first.


@state.savable(name="tests.midsave.Linked")
@dataclasses.dataclass(eq=False)
class Linked:
    n: int = 0
    meddler: Any = state.field(save=_save_meddler, load=lambda _v: None, default=None)
    peers: list[Linked] = dataclasses.field(default_factory=list)
    table: dict[str, int] = dataclasses.field(default_factory=dict)


def _new_linked(n: int) -> Linked:
    return Linked(n, meddler=Meddler(lambda _o: None))


def _peers_cleared(o: Linked) -> None:
    o.peers.clear()
    o.table.clear()  # its keys object is freed


def _peers_grown(o: Linked) -> None:
    o.peers.extend(_new_linked(-1) for _ in range(40))  # a larger item array, new objects
    o.table.update((f"k{j}", j) for j in range(40))  # a larger keys object


def _peers_replaced(o: Linked) -> None:
    o.peers = [_new_linked(-2), o]  # the old list (read ahead) is freed
    o.table = {"new": -2}  # and the old dict


SHARED_PEERS: list[Linked] = []
SHARED_TABLE: dict[str, int] = {"shared": 1}


def _peers_shared(o: Linked) -> None:
    o.peers = SHARED_PEERS
    o.table = SHARED_TABLE


PEER_ACTS = {
    "clear": _peers_cleared,
    "grow": _peers_grown,
    "replace": _peers_replaced,
    "share": _peers_shared,
}


def _linked_meddling_later(act: Callable[[Any], None]) -> list[Linked]:
    from ckpt.state import native

    objs = [Linked(i) for i in range(native._core.look_ahead_min + 64)]
    SHARED_PEERS[:] = objs[:3]
    for i, o in enumerate(objs):
        o.peers = [objs[(i * 7 + k) % len(objs)] for k in range(i % 6)]
        o.table = {f"t{k}": k for k in range(i % 5)}
        later = objs[i + 1 : i + 4]
        o.meddler = Meddler(lambda _o, later=later: [act(x) for x in later])
    return objs


@pytest.mark.parametrize("act", list(PEER_ACTS.values()), ids=list(PEER_ACTS))
def test_python_code_that_changes_later_lists_of_references_gives_typeds_result(act) -> None:
    typed = state.dumps(_linked_meddling_later(act), engine="typed")
    native = state.dumps(_linked_meddling_later(act), engine="native")
    assert native == typed
