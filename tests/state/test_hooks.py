# ruff: noqa: RUF009  (state.field is a dataclass field specifier ruff does not know)
"""__before_save__ and __after_load__: when they run, how often, and in which order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ckpt import state

from .conftest import roundtrip
from .models import Leaf

EVENTS: list[tuple[str, str, int]] = []


@pytest.fixture(autouse=True)
def _clear_events() -> None:
    EVENTS.clear()


@state.savable(name="tests.state.hooks.Counted")
@dataclass(eq=False)
class Counted:
    """Records its hooks; its after_load snapshots its neighbours' fields."""

    ident: int = 0
    other: Counted | None = None
    friends: list[Counted] = field(default_factory=list)
    extra: object = None
    stamped: str = ""
    seen: Any = state.field(nosave=True, default=None)

    def __before_save__(self) -> None:
        EVENTS.append(("before_save", "Counted", self.ident))
        self.stamped = f"stamped-{self.ident}"

    def __after_load__(self) -> None:
        EVENTS.append(("after_load", "Counted", self.ident))
        other = self.other
        self.seen = {
            "other_ident": None if other is None else other.ident,
            "other_other": None if other is None or other.other is None else other.other.ident,
            "friends": [f.ident for f in self.friends],
            "friends_stamped": [f.stamped for f in self.friends],
            "extra": self.extra if not isinstance(self.extra, Counted) else self.extra.ident,
        }


@state.savable(name="tests.state.hooks.Grower")
@dataclass(eq=False, slots=True)
class Grower:
    """Its before_save hook attaches a new object, which must be saved too."""

    child: Leaf | None = None

    def __before_save__(self) -> None:
        if self.child is None:
            self.child = Leaf(11)


@state.savable(name="tests.state.hooks.Waiter")
@dataclass(eq=False)
class Waiter:
    """Its after_load runs after the one of what it waits on."""

    name: str = ""
    dep: Waiter | None = state.field(wait=True, default=None)
    plain: Waiter | None = None

    def __after_load__(self) -> None:
        EVENTS.append(("after_load", "Waiter", int(self.name)))


@state.savable(name="tests.state.hooks.WaitA")
@dataclass(eq=False)
class WaitA:
    dep: WaitB | None = state.field(wait=True, default=None)

    def __after_load__(self) -> None:
        EVENTS.append(("after_load", "WaitA", 0))


@state.savable(name="tests.state.hooks.WaitB")
@dataclass(eq=False, slots=True)
class WaitB:
    dep: WaitA | None = state.field(wait=True, default=None)

    def __after_load__(self) -> None:
        EVENTS.append(("after_load", "WaitB", 0))


@state.savable(name="tests.state.hooks.Quiet")
@dataclass(eq=False)
class Quiet:
    """No hooks at all: must round-trip unaffected next to hooked objects."""

    peer: Counted | None = None


def _ring(n: int) -> list[Counted]:
    nodes = [Counted(i) for i in range(n)]
    for i, node in enumerate(nodes):
        node.other = nodes[(i + 1) % n]
        node.friends = [nodes[(i + 2) % n], nodes[(i + 3) % n]]
    return nodes


def test_before_save_runs_once_per_object_before_encoding(engine: str) -> None:
    nodes = _ring(5)
    data = state.dumps([nodes[0], nodes[0], Quiet(nodes[1])], engine=engine)
    saves = sorted(e for e in EVENTS if e[0] == "before_save")
    assert saves == [("before_save", "Counted", i) for i in range(5)]
    loaded = state.loads(data, engine=engine)
    assert loaded[0].stamped == "stamped-0"  # what the hook set was saved


def test_before_save_only_for_reachable_objects(engine: str) -> None:
    unreachable = Counted(99)
    state.dumps(Counted(1, other=Counted(2)), engine=engine)
    assert ("before_save", "Counted", 99) not in EVENTS
    assert unreachable.stamped == ""


def test_object_attached_by_before_save_is_saved(engines: tuple[str, str]) -> None:
    loaded = roundtrip(Grower(), engines)
    assert isinstance(loaded.child, Leaf)
    assert loaded.child.value == 11


def test_after_load_runs_once_per_object_after_the_whole_graph(
    engines: tuple[str, str],
) -> None:
    nodes = _ring(6)
    nodes[2].extra = nodes[5]
    loaded = roundtrip([nodes[0], Quiet(nodes[3])], engines)
    loads = sorted(e for e in EVENTS if e[0] == "after_load")
    assert loads == [("after_load", "Counted", i) for i in range(6)]
    # Every hook saw every neighbour fully built, whatever order the objects loaded in.
    cur = loaded[0]
    for _ in range(6):
        i = cur.ident
        assert cur.seen["other_ident"] == (i + 1) % 6
        assert cur.seen["other_other"] == (i + 2) % 6
        assert cur.seen["friends"] == [(i + 2) % 6, (i + 3) % 6]
        assert cur.seen["friends_stamped"] == [f"stamped-{(i + 2) % 6}", f"stamped-{(i + 3) % 6}"]
        cur = cur.other
    assert loaded[1].peer.seen["other_ident"] == 4
    assert cur.other.other.seen["extra"] == 5  # node 2


def test_after_load_for_objects_inside_plain_data_roots(engines: tuple[str, str]) -> None:
    root = {"a": [Counted(1)], "b": (Counted(2),), "c": {Counted(3)}}
    roundtrip(root, engines)
    assert sorted(e[2] for e in EVENTS if e[0] == "after_load") == [1, 2, 3]


def _waiters(order: list[int]) -> list[Waiter]:
    """A wait chain 0 <- 1 <- 2 <- 3 (3 waits on 2, ...), listed in `order`."""
    waiters = [Waiter(str(i)) for i in range(4)]
    for i in range(1, 4):
        waiters[i].dep = waiters[i - 1]
    # Plain (non-wait) references in the opposite direction must not constrain the order.
    for i in range(3):
        waiters[i].plain = waiters[i + 1]
    return [waiters[i] for i in order]


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]])
def test_wait_orders_after_load(order: list[int], engines: tuple[str, str]) -> None:
    roundtrip(_waiters(order), engines)
    ran = [e[2] for e in EVENTS if e[1] == "Waiter"]
    assert sorted(ran) == [0, 1, 2, 3]
    assert ran == [0, 1, 2, 3], f"after_load order {ran} breaks the wait chain"


def test_wait_on_a_hookless_or_missing_dependency(engines: tuple[str, str]) -> None:
    lonely = Waiter("7")  # dep is None
    roundtrip([lonely], engines)
    assert [e[2] for e in EVENTS] == [7]


def test_wait_cycle_is_a_state_error_naming_the_types(engines: tuple[str, str]) -> None:
    a, b = WaitA(), WaitB()
    a.dep, b.dep = b, a
    data = state.dumps(a, engine=engines[0])
    with pytest.raises(state.StateError) as info:
        state.loads(data, engine=engines[1])
    message = str(info.value)
    assert "WaitA" in message and "WaitB" in message, message


def test_wait_cycle_of_one_type(engines: tuple[str, str]) -> None:
    waiters = [Waiter(str(i)) for i in range(3)]
    for i in range(3):
        waiters[i].dep = waiters[(i + 1) % 3]
    data = state.dumps(waiters, engine=engines[0])
    with pytest.raises(state.StateError, match="Waiter"):
        state.loads(data, engine=engines[1])


def test_after_load_sees_shared_containers_filled(engines: tuple[str, str]) -> None:
    """Containers restored as shared (one list, several holders) are full before hooks run."""
    a, b, c = Counted(1), Counted(2), Counted(3)
    friends = [c, b]
    a.friends = b.friends = friends
    extra = {"shared": [c]}
    a.extra = b.extra = extra
    loaded = roundtrip([a, b, extra], engines)
    for obj in loaded[:2]:
        assert obj.seen["friends"] == [3, 2]
        assert obj.seen["friends_stamped"] == ["stamped-3", "stamped-2"]
    assert loaded[0].friends is loaded[1].friends
    assert loaded[0].extra is loaded[2]


@state.savable(name="tests.state.hooks.Nested")
@dataclass(eq=False)
class Nested:
    """Hooks that save and load other graphs: the engine must be re-entrant."""

    inner: object = None
    blob: bytes = b""
    back: Any = state.field(nosave=True, default=None)

    def __before_save__(self) -> None:
        self.blob = state.dumps(self.inner, engine="typed")

    def __after_load__(self) -> None:
        self.back = state.loads(self.blob, engine="reflect")


def test_hooks_may_save_and_load_other_graphs(engines: tuple[str, str]) -> None:
    inner = [Leaf(1), {"k": Leaf(2)}]
    nested = Nested(inner)
    loaded = roundtrip([nested, Quiet(Counted(5))], engines)
    assert loaded[0].back[0].value == 1
    assert loaded[0].back[1]["k"].value == 2
    assert loaded[0].back[0] is not loaded[0].inner[0]
    assert loaded[1].peer.seen["other_ident"] is None


@state.savable(name="tests.state.hooks.Silent")
@dataclass(eq=False, slots=True)
class Silent:
    """No __after_load__ of its own, but it waits on a Waiter."""

    dep: Waiter | None = state.field(wait=True, default=None)


@state.savable(name="tests.state.hooks.WaitsOnSilent")
@dataclass(eq=False)
class WaitsOnSilent:
    dep: Silent | None = state.field(wait=True, default=None)

    def __after_load__(self) -> None:
        EVENTS.append(("after_load", "WaitsOnSilent", 99))


def test_wait_is_transitive_through_an_object_without_a_hook(engines: tuple[str, str]) -> None:
    """top waits on a hookless middle object that waits on bottom: bottom's hook runs first
    (gVisor completes an object only when everything it waits on has completed)."""
    bottom = Waiter("1")
    middle = Silent(bottom)
    top = WaitsOnSilent(middle)
    roundtrip([top, middle, bottom], engines)
    order = [e[2] for e in EVENTS]
    assert sorted(order) == [1, 99]
    assert order == [1, 99], f"after_load order {order}: top ran before what it waits on"


SAVES: list[int] = []


@state.savable(name="tests.state.hooks.BigCounter")
@dataclass(eq=False)
class BigCounter:
    n: int = 0
    nums: list[int] = field(default_factory=list)

    def __before_save__(self) -> None:
        SAVES.append(self.n)


@pytest.mark.parametrize(
    "graph",
    [
        pytest.param(lambda: [BigCounter(1), BigCounter(2**70)], id="big-int-field"),
        pytest.param(lambda: [BigCounter(1, [-(2**65)])], id="big-int-in-list"),
        pytest.param(lambda: [BigCounter(1), BigCounter(2)], id="small-ints"),
    ],
)
def test_before_save_runs_once_even_with_ints_beyond_64_bits(graph: Any, engine: str) -> None:
    SAVES.clear()
    objects = graph()
    data = state.dumps(objects, engine=engine)
    assert sorted(SAVES) == sorted(obj.n for obj in objects), f"hooks ran for {SAVES}"
    loaded = state.loads(data, engine=engine)
    assert [(o.n, o.nums) for o in loaded] == [(o.n, o.nums) for o in objects]
