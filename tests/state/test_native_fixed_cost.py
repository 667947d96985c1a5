"""The native engine's one-call entries for a small save's and load's fixed sequence
(``Walk.save``; parsed fill plans kept on the head): whichever path a call takes (a
type table met before or not, something shared or escaped, the steps of a core built
before them), the stream is typed's byte for byte and loads back the same."""

from __future__ import annotations

import dataclasses
import gc
from typing import Any

import msgspec
import pytest

from ckpt import state
from ckpt.errors import StateError
from ckpt.state import native

from .requires import requires_native

pytestmark = requires_native


@state.savable(name="tests.fixed.Leaf")
@dataclasses.dataclass(eq=False)
class Leaf:
    value: int = 0


@state.savable(name="tests.fixed.Holder")
@dataclasses.dataclass(eq=False)
class Holder:
    entries: dict[int, Leaf] = dataclasses.field(default_factory=dict)
    items: list[Leaf] = dataclasses.field(default_factory=list)
    small: int = 0


def _roots() -> list[Any]:
    leaf = Leaf(7)
    shared_list = [1, 2]
    return [
        Leaf(3),  # one object
        Holder({i: leaf for i in range(64)}, [leaf] * 64, 5),  # the map and slice shapes
        Holder({}, [], 1 << 70),  # an int beyond 64 bits: escaped in its slot
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
        state.dumps(Holder({}, [Unsavable()]), engine="native")  # type: ignore[list-item]
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
        (lambda: Holder({i: Leaf(i) for i in range(5)}, [Leaf(9)], 3), Holder),
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
