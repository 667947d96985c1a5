"""The native engine's fast paths change nothing but speed: many saves in one process,
reused walks, the one-call entries for a small save's fixed cost, type tables met
before, the load's look-ahead, runs of one reference and the in-C scalar paths all
write typed's stream byte for byte and load back the same graph.
"""

from __future__ import annotations

import dataclasses
import enum
import faulthandler
import gc
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.bench import state_flat, state_models
from ckpt.bench.state_models import MapHolder, SliceHolder, Target
from ckpt.errors import StateError
from ckpt.state import native, registry, wire
from ckpt.state.stats import Stats

from .graph_equal import graph_diff
from .models import Node
from .requires import requires_native
from .test_corruption import HOSTILE, HOSTILE_TAGGED, ORIGINAL, _leaf_paths, _replaced

pytestmark = requires_native


# --------------------------------------------------------------------------------------
# Many native saves in one process: each writes exactly typed's bytes whatever came
# before it (larger graphs, other shapes, failed saves, freed graphs whose addresses the
# next graph's objects reuse), so nothing a walk leaves behind (its tables sized by the
# previous walk, its module state) leaks into the next.


@pytest.fixture
def hang_is_a_failure():
    """A table with no empty slot left (one sized or cleared wrongly between walks)
    would make a lookup probe forever: end the run with a traceback instead."""
    faulthandler.dump_traceback_later(300, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@state.savable(name="tests.repeated.Blob")
@dataclasses.dataclass(eq=False)
class Blob:
    data: bytes = b""
    next: Blob | None = None


class Unsavable:
    pass


@state.savable(name="tests.repeated.Holder")
@dataclasses.dataclass(eq=False)
class Holder:
    items: list = dataclasses.field(default_factory=list)


def _same_as_typed(root: object) -> None:
    assert state.dumps(root, engine="native") == state.dumps(root, engine="typed")


MAKERS = [
    lambda: state_models.make_graph(20000, seed=1),
    lambda: state_models.make_graph(300, seed=2),
    lambda: state_flat.make_flat(8000),
    lambda: state_models.make_people(5000),
    lambda: state_models.make_graph(12000, seed=3),
    lambda: [1, "x"],
    lambda: state_models.make_graph(20000, seed=4),
]


@pytest.mark.usefixtures("hang_is_a_failure")
def test_saves_after_larger_and_different_ones_write_exactly_typeds_bytes() -> None:
    # Each save reuses what the one before it left: larger tables holding the
    # addresses of objects since freed (and now reused by the next graph's objects),
    # row buffers holding another graph's rows.
    for make in MAKERS + MAKERS[::-1]:
        _same_as_typed(make())
    kept = [make() for make in MAKERS]  # and with every graph alive at once
    for root in kept:
        _same_as_typed(root)


@pytest.mark.usefixtures("hang_is_a_failure")
def test_a_failed_save_leaves_nothing_behind_for_the_next() -> None:
    big = state_models.make_graph(20000, seed=5)
    bad = Holder(items=[Blob(b"x" * 100) for _ in range(5000)] + [Unsavable()])
    for _ in range(3):
        with pytest.raises(StateError):
            state.dumps(Holder(items=[big, bad]), engine="native")
        _same_as_typed(state_models.make_graph(3000, seed=6))


@pytest.mark.usefixtures("hang_is_a_failure")
def test_a_very_large_row_buffer_and_then_small_saves() -> None:
    # One 40 MiB field grows a row buffer through every power of two up to 64 MiB.
    root = Blob(b"\x07" * (40 << 20), Blob(b"tail"))
    data = state.dumps(root, engine="native")
    back = state.loads(data)
    assert back.data == root.data and back.next.data == b"tail"
    _same_as_typed(state_models.make_graph(2000, seed=7))


@pytest.mark.usefixtures("hang_is_a_failure")
@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(20, 6000), st.integers(0, 3)), min_size=1, max_size=6))
def test_any_sequence_of_saves_writes_typeds_bytes(plan: list[tuple[int, int]]) -> None:
    for nodes, seed in plan:
        _same_as_typed(state_models.make_graph(nodes, seed=seed))


@pytest.mark.usefixtures("hang_is_a_failure")
def test_kept_row_buffers_switched_on_and_off_between_saves() -> None:
    """Large row buffers are kept for the next walk (``_native.set_keep_buffers``): a
    walk that takes one, grows it, or finds none must write the same bytes."""
    from ckpt.state import native

    core = native._core
    was = core.set_keep_buffers(True)
    try:
        for k, make in enumerate(MAKERS * 2):
            core.set_keep_buffers(k % 3 != 1)
            _same_as_typed(make())
    finally:
        core.set_keep_buffers(was)


# --------------------------------------------------------------------------------------
# The native engine keeps one released walk per interpreter for the next save
# (``native._idle_walks``): a save taking it writes exactly what a fresh walk writes, runs
# every hook again, and a big save leaves no big walk behind.


@state.savable(name="tests.reuse.Box")
@dataclasses.dataclass(eq=False)
class Box:
    n: int = 0
    items: list = dataclasses.field(default_factory=list)


@state.savable(name="tests.reuse.Hooked")
@dataclasses.dataclass(eq=False)
class Hooked:
    n: int = 0

    def __before_save__(self) -> None:
        HOOK_CALLS.append(self.n)


HOOK_CALLS: list[int] = []


@state.savable(name="tests.reuse.Nesting")
@dataclasses.dataclass(eq=False)
class Nesting:
    inner: object = None

    def __before_save__(self) -> None:
        NESTED.append(state.dumps(self.inner, engine="native"))


NESTED: list[bytes] = []


def _fresh(root: object) -> bytes:
    """The bytes of a save with no idle walk to take."""
    native._idle_walks.clear()
    return state.dumps(root, engine="native")


def _shared_and_escaped() -> Box:
    shared = [1, 2]
    return Box(2**70, [Box(1, shared), Box(2, shared)])  # a big int escapes its slot


def test_a_taken_walk_writes_what_a_fresh_one_writes() -> None:
    plain = Box(5, [Box(6), Box(7)])
    want = _fresh(plain)
    assert want == state.dumps(plain, engine="typed")
    for before in (_shared_and_escaped(), Box(1, [Box(i) for i in range(5000)])):
        state.dumps(before, engine="native")  # shared locations, an escape, many ids
        _assert_empty()
        assert state.dumps(plain, engine="native") == want
    with pytest.raises(StateError):
        state.dumps(Box(1, [Box(2), object()]), engine="native")
    _assert_empty()
    assert state.dumps(plain, engine="native") == want


def _assert_empty() -> None:
    """The idle walk holds nothing of the save before."""
    assert native._idle_walks, "the save kept no walk for the next"
    walk = native._idle_walks[0]
    assert walk.objects == [] and walk.types == [] and walk.shared == {}
    assert walk.failed is None and len(walk.escaped) == 0 and len(walk.ids) == 0


def test_hooks_run_in_every_save_that_takes_the_walk() -> None:
    obj = Hooked(3)
    HOOK_CALLS.clear()
    for _ in range(3):
        state.dumps(Box(0, [obj]), engine="native")
    assert HOOK_CALLS == [3, 3, 3]


def test_a_save_nested_in_a_hook_has_its_own_walk() -> None:
    inner = Box(9, [Box(10)])
    NESTED.clear()
    outer = Nesting(inner)
    data = state.dumps(outer, engine="native")
    assert [state.dumps(inner, engine="typed")] == NESTED
    assert data == state.dumps(Nesting(inner), engine="typed")
    assert len(native._idle_walks) == 1


def test_a_big_save_leaves_no_big_walk_behind() -> None:
    state.dumps(Box(0, [Box(i, [i]) for i in range(50_000)]), engine="native")
    _assert_empty()
    (walk,) = native._idle_walks
    assert sys.getsizeof(walk.objects) < 1024, "the idle walk keeps the big save's list"


def test_renew_refuses_a_walk_in_use() -> None:
    args = (native._plan_for, native._enum_plan, set(), registry._by_class)
    walk = native._core.Walk(*args)
    with pytest.raises(RuntimeError, match="released"):
        walk.renew(*args)
    walk.release()
    walk.renew(*args)
    walk.release()


# --------------------------------------------------------------------------------------
# The native engine's one-call entries for a small save's and load's fixed sequence
# (``Walk.save``; parsed fill plans kept on the head): whichever path a call takes (a
# type table met before or not, something shared or escaped, the steps of a core built
# before them), the stream is typed's byte for byte and loads back the same.


@state.savable(name="tests.fixed.Leaf")
@dataclasses.dataclass(eq=False)
class Leaf:
    value: int = 0


@state.savable(name="tests.fixed.Holder")
@dataclasses.dataclass(eq=False)
class FixedCostHolder:
    entries: dict[int, Leaf] = dataclasses.field(default_factory=dict)
    items: list[Leaf] = dataclasses.field(default_factory=list)
    small: int = 0


def _roots() -> list[Any]:
    leaf = Leaf(7)
    shared_list = [1, 2]
    return [
        Leaf(3),  # one object
        FixedCostHolder({i: leaf for i in range(64)}, [leaf] * 64, 5),  # the map and slice shapes
        FixedCostHolder({}, [], 1 << 70),  # an int beyond 64 bits: escaped in its slot
        [shared_list, shared_list, Leaf(1)],  # a list met twice: a shared location
        {"a": Leaf(2), "b": None},  # a root dict
        None,
    ]


def _fresh_table() -> None:
    native._prefixes.clear()


@pytest.mark.parametrize("index", range(len(_roots())))
def test_first_and_repeat_saves_are_typed_bytes(index: int) -> None:
    """The first save of a type table (no prefix known: Python assembles) and the next
    (C assembles and frames) both write typed's stream."""
    _fresh_table()
    typed = state.dumps(_roots()[index], engine="typed")
    first = state.dumps(_roots()[index], engine="native")
    again = state.dumps(_roots()[index], engine="native")
    assert first == typed
    assert again == typed


@pytest.mark.parametrize("index", range(len(_roots())))
def test_steps_path_writes_the_same(monkeypatch: pytest.MonkeyPatch, index: int) -> None:
    """A core without ``Walk.save`` (its older steps: dyn_bytes, run, assemble) writes
    what the one call writes."""
    one_call = state.dumps(_roots()[index], engine="native")
    monkeypatch.setattr(native, "_SAVE_IN_C", False)
    assert state.dumps(_roots()[index], engine="native") == one_call


def test_repeat_save_loads_back() -> None:
    root = _roots()[1]
    state.dumps(root, engine="native")
    back = state.loads(state.dumps(root, engine="native"), engine="native")
    assert [e.value for e in back.entries.values()] == [7] * 64
    assert back.entries[0] is back.items[0] is back.items[63]


def test_a_failed_save_names_the_object_and_the_next_save_works() -> None:
    class Unsavable:
        pass

    with pytest.raises(StateError, match=r"tests\.fixed\.Holder"):
        state.dumps(FixedCostHolder({}, [Unsavable()]), engine="native")  # type: ignore[list-item]
    root = _roots()[1]
    assert state.dumps(root, engine="native") == state.dumps(root, engine="typed")


def test_walk_save_checks_its_arguments() -> None:
    walk = native._core.Walk(native._plan_for, native._enum_plan, set(), {})
    try:
        with pytest.raises(TypeError):
            walk.save(None, None, None, None, None, [], 2)  # prefixes not a dict
        with pytest.raises(TypeError):
            walk.save(None, None, None, None, None, {})  # too few
        with pytest.raises(ValueError):
            walk.save(None, None, None, None, None, {}, 256)
    finally:
        walk.release()


@state.savable(name="tests.fixed.Frozen")
@dataclasses.dataclass(frozen=True, eq=False)
class Frozen:
    value: int = 0
    leaf: Leaf | None = None


@state.savable(name="tests.fixed.Noisy")
@dataclasses.dataclass(eq=False)
class Noisy:
    """A class with its own __setattr__: its fields are stored through it."""

    value: int = 0
    name: str = ""

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)


def _fill_call(data: bytes, monkeypatch: pytest.MonkeyPatch, cls: type) -> tuple:
    """The arguments of the read_fill call that fills the ``cls`` objects of ``data``."""
    calls = []
    real = native._core.read_fill

    def fill(shells: list, body: Any, start: int, plan: Any, objs: list, ctx: Any) -> Any:
        if shells and type(shells[0]) is cls:
            calls.append((shells, bytes(body), start, plan, list(objs), ctx))
        return real(shells, body, start, plan, objs, ctx)

    monkeypatch.setattr(native._core, "read_fill", fill)
    state.loads(data, engine="native")
    monkeypatch.undo()
    return calls[-1]


@pytest.mark.parametrize(
    ("make", "cls"),
    [
        (lambda: FixedCostHolder({i: Leaf(i) for i in range(5)}, [Leaf(9)], 3), FixedCostHolder),
        (lambda: [Frozen(1, Leaf(2)), Frozen(3)], Frozen),
        (lambda: [Noisy(1, "a"), Noisy(2, "b")], Noisy),
    ],
)
def test_a_parsed_plan_fills_as_its_tuple(
    monkeypatch: pytest.MonkeyPatch, make: Any, cls: type
) -> None:
    """Loads hand read_fill the plan parsed once (read_plan); filling fresh shells with
    it and with the tuple it was parsed from gives the same fields and end offset as
    the load itself."""
    data = state.dumps(make(), engine="native")
    state.loads(data, engine="native")  # the head known: its parsed plans kept
    shells, body, start, plan, objs, ctx = _fill_call(data, monkeypatch, cls)
    assert type(plan).__name__ == "FillPlan"
    results = []
    for used in (plan, _tuple_of(cls)):
        fresh = [object.__new__(cls) for _ in shells]
        swap = {id(old): new for old, new in zip(shells, fresh, strict=True)}
        table = [swap.get(id(o), o) for o in objs]
        end = native._core.read_fill(fresh, body, start, used, table, ctx)
        results.append((end, [dict(vars(o)) for o in fresh]))
    assert results[0] == results[1]
    assert results[0][1] == [dict(vars(o)) for o in shells]


def _tuple_of(cls: type) -> tuple:
    """The tuple plan native._load_plan cached for the class's one stream layout."""
    from ckpt.state import schema

    (plan,) = schema.schema_of(cls).info.__dict__["_native_load"].values()
    return plan


def test_read_plan_refuses_what_read_fill_refuses() -> None:
    with pytest.raises(TypeError):
        native._core.read_plan([0, 0, 0, ()])
    with pytest.raises(SystemError):
        native._core.read_plan((0, False, 0, (("x", 5, 0, 0, None, 0, None, None),)))
    with pytest.raises(TypeError):
        native._core.read_fill([], b"", 0, None, [], None)


def test_read_shells_checks_its_arguments() -> None:
    body = native._frame_body(state.dumps(Leaf(1), engine="native"))
    with pytest.raises(TypeError):
        native._core.read_shells([Leaf], ["tests.fixed.Leaf"], [1], body, 0)
    with pytest.raises(TypeError):
        native._core.read_shells((Leaf,), ["tests.fixed.Leaf"], [1], body, 0, 1)
    with pytest.raises(TypeError):
        native._core.read_shells([Leaf], ["tests.fixed.Leaf"], [1], body, "0", 1)
    with pytest.raises(SystemError):
        native._core.read_shells([Leaf], ["tests.fixed.Leaf"], [1], body, -1, 1)


@pytest.mark.parametrize("index", [0, 1])
def test_a_load_leaves_no_garbage_for_the_cyclic_gc(index: int) -> None:
    """A load whose slots and root need no decoder makes no reference cycle: what it
    built and dropped is freed at once, not left for a collection."""
    data = state.dumps(_roots()[index], engine="native")
    state.loads(data, engine="native")  # the head known
    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        root = state.loads(data, engine="native")
        assert gc.collect() == 0
    finally:
        if was:
            gc.enable()
    assert type(root) is type(_roots()[index])


def test_the_decoder_is_made_when_slot_code_reads_it() -> None:
    """The load context makes its dyn decoder at the first read, and only ``dyn``."""
    objs: list = [None]
    ctx = native._load_ctx(objs, [])
    assert ctx.oget(0) is None
    assert ctx.oget == objs.__getitem__  # made at the first read
    assert ctx.dyn([1, "a", None]) == [1, "a", None]
    assert ctx.dyn is ctx.dyn  # made once
    with pytest.raises(AttributeError):
        ctx.other  # noqa: B018


def _python_open(body: memoryview) -> tuple:
    """What loads read from the memoryview before read_open: the split, the head's key
    (None unless nothing is shared and no flag set) and the root's object id."""
    from ckpt.state import wire as w

    spans, tseq, rows = native._core.read_split(body)
    at = spans[w.SHARED][0]
    plain = spans[w.FLAGS][1] == at + 2 and body[at] == 0x90 and body[at + 1] == 0x80
    key = body[spans[w.VERSION][0] : spans[w.TYPES][1]].tobytes() if plain else None
    at, end = spans[w.ROOT]
    one = end - at == 3 and body[at] == 0x81 and body[at + 1] == w.T_REF and body[at + 2] < 0x80
    return spans, tseq, rows, key, body[at + 2] if one else -1


@pytest.mark.parametrize("index", range(len(_roots())))
def test_read_open_reads_what_python_read(index: int) -> None:
    from ckpt.state import wire as w

    body = native._frame_body(state.dumps(_roots()[index], engine="native"))
    opened = native._core.read_open(body, w.T_REF)
    assert opened[:5] == _python_open(body)
    assert opened[5] == [span[1] for span in opened[2]]  # each type's row count
    if index == 0:  # one object: its id; the head's key known
        assert opened[4] == 1 and opened[3] is not None
    if index in (2, 3):  # an escape (a flag) and a shared location: no key
        assert opened[3] is None


@pytest.mark.parametrize("index", range(len(_roots())))
def test_loads_without_read_open_are_the_same(monkeypatch: pytest.MonkeyPatch, index: int) -> None:
    data = state.dumps(_roots()[index], engine="native")
    with_open = state.dumps(state.loads(data, engine="native"), engine="typed")
    monkeypatch.setattr(native, "_OPEN_IN_C", False)
    assert state.dumps(state.loads(data, engine="native"), engine="typed") == with_open


def test_read_open_checks_its_arguments() -> None:
    body = native._frame_body(state.dumps(Leaf(1), engine="native"))
    with pytest.raises(TypeError):
        native._core.read_open(body)
    with pytest.raises(ValueError):
        native._core.read_open(body, 0x80)
    with pytest.raises(StateError):
        native._core.read_open(b"\x90", 0)


def test_a_head_met_before_is_not_taken_for_other_flags() -> None:
    """A stream whose flags item is one byte but not the empty map (nil here) is not
    the head met before: it is validated, and its wrong flags refused."""
    from ckpt.state import wire as w

    data = state.dumps(Leaf(1), engine="native")
    state.loads(data, engine="native")  # the head known
    body = bytearray(native._frame_body(data))
    assert body[-2:] == b"\x90\x80"
    body[-1] = 0xC0  # flags: nil
    opened = native._core.read_open(bytes(body), w.T_REF)
    assert opened[3] is None
    framed = w.frame(msgspec.Raw(bytes(body)))
    with pytest.raises(StateError, match="wrong shape"):
        state.loads(framed, engine="native")


# --------------------------------------------------------------------------------------
# A save or load of a type table met before reuses what the last one made of it (the
# encoded head of a save, the resolved head of a load) without changing a byte or a
# check: shared containers, escapes, other roots, other object counts, a class
# registered again and malformed counts all come out as on the first save or load.


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


# --------------------------------------------------------------------------------------
# The native load's look-ahead changes nothing but speed.
#
# Past ``load_ahead_min`` objects, ``read_fill`` runs a second cursor a few rows ahead
# that reads reference fields and prefetches the objects they name.  It only reads: every
# stream, well-formed or hostile, loads to the same graph or fails with the same message
# whether it runs or not.  Here it is forced on (threshold 0) for small streams, compared
# with it forced off, and left at its default for a graph large enough to use it.  Under
# AddressSanitizer (.ci/asan.sh) a read past the rows would abort the run.


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


@pytest.mark.watchdog_s(240)  # thousands of loads in one test, on a shared core
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


# --------------------------------------------------------------------------------------
# Lists and dict passes of references write an item equal to the one before it without
# looking its id up again: runs of one object, alternations and None in between must give
# typed's bytes and load back to the same graph.


def _check(root: Any) -> None:
    data = state.dumps(root, engine="native")
    assert data == state.dumps(root, engine="typed")
    assert graph_diff(root, state.loads(data, engine="native")) is None


# indices into a pool of three targets; -1 is None
runs = st.lists(st.integers(-1, 2), max_size=12)


def _pick(pool: list[Target], picks: list[int]) -> list[Target | None]:
    return [None if i < 0 else pool[i] for i in picks]


@settings(max_examples=150, deadline=None)
@given(runs)
def test_lists_of_references_with_runs(picks: list[int]) -> None:
    pool = [Target(i) for i in range(3)]
    _check(SliceHolder(entries=_pick(pool, picks)))
    kids = [Node(i) for i in range(3)]
    _check(Node(9, kids=[kids[i] for i in picks if i >= 0]))


@settings(max_examples=150, deadline=None)
@given(runs)
def test_dict_values_with_runs(picks: list[int]) -> None:
    pool = [Target(i) for i in range(3)]
    _check(MapHolder(entries=dict(enumerate(_pick(pool, picks)))))


@pytest.mark.parametrize("n", [1, 2, 1024])
def test_one_shared_object_many_times(n: int) -> None:
    target = Target(7)
    _check(SliceHolder(entries=[target] * n))
    _check(MapHolder(entries=dict.fromkeys(range(n), target)))
    _check(SliceHolder(entries=[target, Target(8)] * n))


# --------------------------------------------------------------------------------------
# The native writer's in-C paths for lists of scalar tuples, dicts read in place and
# enum members: the stream stays typed's byte for byte, for values that fit and for every
# kind of misfit (escaped by typed's own slot code), and loads back to the same graph.


class Tone(enum.Enum):
    LOW = 1
    HIGH = "high"


@state.savable(name="test.native.PathLeaf")
@dataclass(eq=False)
class PathLeaf:
    n: int = 0


@state.savable(name="test.native.Paths")
@dataclass(eq=False)
class Paths:
    pairs: list[tuple[int, int]] = field(default_factory=list)
    named: list[tuple[str, int]] = field(default_factory=list)
    mixed: list[tuple[float, bool, bytes]] = field(default_factory=list)
    var: list[tuple[int, ...]] = field(default_factory=list)
    table: dict[str, int] = field(default_factory=dict)
    refs: dict[int, PathLeaf] = field(default_factory=dict)
    labels: set[str] = field(default_factory=set)
    tones: list[Tone] = field(default_factory=list)
    tone: Tone = Tone.LOW
    pair: tuple[int, str] = (0, "")
    wide: tuple[int, int, int, int, int, int, int, int, str] = (0, 0, 0, 0, 0, 0, 0, 0, "")


def _same(root: Any) -> None:
    typed = state.dumps(root, engine="typed")
    native = state.dumps(root, engine="native")
    assert native == typed
    loaded = state.loads(native, engine="native")
    assert graph_diff(root, loaded) is None


MISFITS: list[tuple[str, Any]] = [
    ("pairs", [(1, 2), (3,)]),  # a tuple too short
    ("pairs", [(1, 2), (3, 4, 5)]),  # too long
    ("pairs", [(1, 2), [3, 4]]),  # a list where a tuple belongs
    ("pairs", [(1, 2**70)]),  # an int beyond 64 bits
    ("pairs", [(1, None)]),
    ("pairs", [(True, 2)]),  # a bool fits an int slot
    ("named", [("a", 1), (1, "a")]),  # items swapped
    ("named", [("ü", -1), ("", 0)]),
    ("mixed", [(1.5, True, b"x"), (2, False, b"")]),  # an int fits a float slot
    ("mixed", [(1.5, 1, b"x")]),  # an int does not fit a bool slot
    ("var", [(), (1,), tuple(range(40))]),
    ("var", [(1, "x")]),
    ("table", {"a": 1, "b": None}),
    ("table", {1: 1}),
    ("refs", {1: 5}),  # an int in a reference slot
    ("tones", [Tone.LOW, Tone.HIGH, Tone.LOW]),
    ("tones", [Tone.LOW, 1]),
    ("tone", 1),
    ("pair", (7, "seven")),
    ("pair", ("seven", 7)),  # items swapped
    ("pair", (7, "seven", 8)),  # too long
    ("pair", (7,)),  # too short
    ("pair", (True, "")),  # a bool fits an int slot
    ("pair", (2**64, "x")),  # an int beyond 64 bits
    ("pair", [7, "seven"]),  # a list where a tuple belongs
    ("wide", (1, 2, 3, 4, 5, 6, 7, 8, "nine")),  # longer than the plan's masks hold
    ("wide", (1, 2, 3, 4, 5, 6, 7, 8, 9)),  # the last item's kind
    ("wide", (1, 2, 3, 4, 5, 6, 7, "eight", "nine")),
]


@pytest.mark.parametrize(
    ("name", "value"), MISFITS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(MISFITS)]
)
def test_fits_and_misfits_write_typed_stream(name: str, value: Any) -> None:
    leaf = PathLeaf(3)
    a = Paths(pairs=[(0, 1)], refs={0: leaf, 1: leaf}, labels={"x", "y"}, tones=[Tone.HIGH])
    setattr(a, name, value)
    b = Paths(pairs=a.pairs, table=a.table if isinstance(a.table, dict) else {})  # shared
    _same([a, b, leaf, Paths()])


def test_a_shared_list_of_tuples_and_a_shared_dict_keep_identity() -> None:
    pairs, table = [(1, 2)], {"k": 1}
    a, b = Paths(pairs=pairs, table=table), Paths(pairs=pairs, table=table)
    _same([a, b])
    loaded = state.loads(state.dumps([a, b], engine="native"), engine="native")
    assert loaded[0].pairs is loaded[1].pairs and loaded[0].table is loaded[1].table


@pytest.mark.parametrize("holders", [2, 3, 9])
def test_a_container_held_by_several_fields_and_objects_stays_shared(holders: int) -> None:
    pairs, labels, table = [(1, 2)], {"a"}, {"k": 1}
    objs = [Paths(pairs=pairs, labels=labels, table=table) for _ in range(holders)]
    objs[0].var = pairs  # a second field of one object holds the same list
    _same(objs)
    loaded = state.loads(state.dumps(objs, engine="native"), engine="native")
    assert all(o.pairs is loaded[0].pairs for o in loaded) and loaded[0].var is loaded[0].pairs
    assert all(o.labels is loaded[0].labels and o.table is loaded[0].table for o in loaded)


def test_dict_of_references_to_classes_not_met_yet() -> None:
    leaves = [PathLeaf(i) for i in range(50)]
    roots = [Paths(refs={i: leaves[(i * 7) % 50] for i in range(j % 9)}) for j in range(60)]
    _same(roots)


scalar = st.one_of(
    st.integers(-(2**65), 2**65),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.floats(),
    st.binary(max_size=2),
)
item = st.one_of(
    st.tuples(scalar, scalar),
    st.tuples(scalar),
    st.lists(scalar, max_size=3).map(tuple),
    st.lists(scalar, max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(item, max_size=5),
    st.lists(item, max_size=5),
    st.lists(item, max_size=5),
    st.dictionaries(st.one_of(st.text(max_size=2), st.integers()), scalar, max_size=4),
)
def test_random_tuples_and_dicts_write_typed_stream(
    pairs: Any, named: Any, var: Any, table: Any
) -> None:
    _same([Paths(pairs=pairs, named=named, var=var, table=table, mixed=list(pairs))])


INT_EDGES = [2**30 - 1, 2**30, -(2**30), 2**60 - 1, -(2**60 - 1), 2**60, -(2**60), 2**63 - 1]
INT_EDGES += [-(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 2**45 + 3, -(2**45 + 3)]


def test_ints_at_every_digit_boundary_write_typed_stream() -> None:
    roots = [Paths(pairs=[(v, 1)], table={"a": v}, var=[(v, -v)]) for v in INT_EDGES]
    _same(roots)
