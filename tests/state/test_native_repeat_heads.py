"""A save or load of a type table met before reuses what the last one made of it (the
encoded head of a save, the resolved head of a load) without changing a byte or a
check: shared containers, escapes, other roots, other object counts, a class
registered again and malformed counts all come out as on the first save or load.
"""

from __future__ import annotations

import dataclasses
import enum

import pytest

from ckpt import state
from ckpt.state import native
from ckpt.state.stats import Stats

from .graph_equal import graph_diff
from .requires import requires_native

pytestmark = requires_native


class Hue(enum.Enum):
    RED = 1
    BLUE = 2


@state.savable(name="tests.heads.Item")
@dataclasses.dataclass(eq=False)
class Item:
    n: int = 0
    tags: list[int] = dataclasses.field(default_factory=list)
    more: list[int] = dataclasses.field(default_factory=list)
    hue: Hue = Hue.RED
    peer: Item | None = None


def _round_trip(root: object) -> object:
    data = state.dumps(root, engine="native")
    assert data == state.dumps(root, engine="typed")
    loaded = state.loads(data, engine="native")
    assert graph_diff(root, loaded) is None
    return loaded


def _plain(n: int) -> Item:
    return Item(n, [n], [n + 1], Hue.BLUE, Item(n + 1))


def test_a_shared_container_after_a_plain_save_of_the_same_types() -> None:
    _round_trip(_plain(1))
    shared = [7, 8]
    root = _plain(2)
    root.tags = root.more = shared
    loaded = _round_trip(root)
    assert loaded.tags is loaded.more
    _round_trip(_plain(3))  # and plain again after it


def test_an_escape_after_a_plain_save_of_the_same_types() -> None:
    _round_trip(_plain(1))
    _round_trip(Item(2**70, peer=Item(-(2**80))))
    _round_trip(_plain(3))


def test_other_roots_and_other_counts_with_the_same_types() -> None:
    for root in (_plain(1), [_plain(2), _plain(3)], {"a": _plain(4)}, (Item(5),), Item(6)):
        _round_trip(root)
    chain = Item(0)
    for i in range(1, 50):
        chain = Item(i, peer=chain)
    _round_trip(chain)


def test_load_stats_name_every_type_on_a_repeated_load() -> None:
    data = state.dumps(_plain(1), engine="native")
    for _ in range(2):
        stats = Stats()
        state.loads(data, engine="native", stats=stats)
        rows = {row["type"]: row["count"] for row in stats.as_dict()["types"]}
        assert rows == {"tests.heads.Item": 2}


def _define_again() -> type:
    @state.savable(name="tests.heads.Again")
    @dataclasses.dataclass(eq=False)
    class Again:
        n: int = 0

    return Again


def test_a_class_registered_again_between_loads_loads_as_registered_now() -> None:
    first = _define_again()
    data = state.dumps(first(3), engine="native")
    assert type(state.loads(data, engine="native")) is first
    second = _define_again()  # the same name again: the registry drops the first class
    loaded = state.loads(data, engine="native")
    assert type(loaded) is second and loaded.n == 3


def test_an_enum_with_objects_fails_as_the_first_time() -> None:
    from ckpt.state import wire as w

    data = state.dumps([Hue.RED, Item(1)], engine="native")
    payload = w.unframe(data)
    enum_index = next(i for i, t in enumerate(payload[w.TYPES]) if t[2] == ["enum"])
    payload[w.TYPE_SEQ].append(enum_index)
    payload[w.ROWS][enum_index].append([])
    bad = w.frame(payload)
    native._heads.clear()
    for _ in range(2):  # resolved from scratch, then with the head known
        with pytest.raises(state.StateError, match=r"enum type .* cannot have objects"):
            state.loads(bad, engine="native")
        state.loads(data, engine="native")


@pytest.mark.parametrize("rows_of_last", [False, True], ids=["one-row-less", "not-rows"])
@pytest.mark.parametrize("root", [[Hue.RED, Item(1)], [Item(1), Item(2)]], ids=["enum", "two"])
def test_a_stream_whose_rows_do_not_match_its_table_fails_as_the_first_time(
    root: list, rows_of_last: bool
) -> None:
    data = state.dumps(root, engine="native")
    bad = _broken_rows(data, rows_of_last)
    native._heads.clear()
    with pytest.raises(state.StateError) as first:
        state.loads(bad, engine="native")  # resolved from scratch
    state.loads(data, engine="native")  # the head is known from here on
    with pytest.raises(state.StateError) as again:
        state.loads(bad, engine="native")
    assert str(again.value) == str(first.value)


def _broken_rows(data: bytes, replace: bool) -> bytes:
    """The stream with its last type's last row gone (type_seq and rows disagree), or
    with that type's rows replaced by an int."""
    from ckpt.state import wire as w

    payload = w.unframe(data)
    if replace:
        payload[w.ROWS][-1] = 5
    else:
        payload[w.ROWS][-1].pop()
    return w.frame(payload)


@pytest.mark.parametrize("raw", [None, 301, -1, 2**40, [1], {0: 1, 1: 1}], ids=repr)
def test_a_malformed_root_fails_as_the_first_time(raw: object) -> None:
    root = [Item(i) for i in range(300)]  # ids up to 300: wide enough for any byte
    data = state.dumps(root, engine="native")
    bad = _with_root(data, {0: raw})
    native._heads.clear()
    with pytest.raises(state.StateError) as first:
        state.loads(bad, engine="native")
    state.loads(data, engine="native")  # the head is known from here on
    with pytest.raises(state.StateError) as again:
        state.loads(bad, engine="native")
    assert str(again.value) == str(first.value)


def test_roots_of_every_kind_load_as_saved() -> None:
    items = [Item(i) for i in range(300)]
    for root in (items[0], 5, -1, None, [items[3]], {0: items[1]}, (items[2],)):
        _round_trip(root)
        _round_trip([items, root])


def _with_root(data: bytes, root: object) -> bytes:
    from ckpt.state import wire as w

    payload = w.unframe(data)
    payload[w.ROOT] = root
    return w.frame(payload)


def test_no_save_leaves_its_walk_behind() -> None:
    """A save's context is bound to its walk only until the save ends, whether slot
    code bound it, nothing did, or the save failed."""
    _round_trip(_plain(1))  # nothing escapes: never bound
    _round_trip(Item(2**70))  # an escape: bound by slot code
    with pytest.raises(state.StateError):
        state.dumps(Item(peer=object()), engine="native")  # type: ignore[arg-type]
    assert native._pending_walks == {}
