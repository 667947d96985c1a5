"""The native core's dependence on CPython's object layouts and its own shared state:
fields stored straight into inline values, the version-specific paths at their
edges, per-class save plans kept on the TypeInfo, and the vocabulary and
per-interpreter state the C and Python sides share.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import os
import pickle
import re
import subprocess
import sys
import sysconfig
import textwrap
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ckpt import state
from ckpt.bench import state_models as bench
from ckpt.state import native, registry

from .graph_equal import assert_graph_equal, graph_diff
from .requires import requires_native

pytestmark = requires_native


# --------------------------------------------------------------------------------------
# The native loader stores fields straight into a fresh instance's inline values
# (CPython 3.11 to 3.13), skipping ``PyObject_GenericSetAttr``'s descriptor and key lookups.
#
# What must hold is that the instances it makes are indistinguishable from the typed
# engine's: the same attributes in the same order, and afterwards every ordinary
# operation works (read, write, add, delete, ``__dict__``, ``copy``, ``pickle``).  The
# import-time check is exercised here too, so a CPython whose layout differs shows up as
# a failed check (the fast path off), never as a wrong instance.


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


# --------------------------------------------------------------------------------------
# The native core's version-specific paths (_native_compat.h) at their edges: sets read
# in place with deleted entries in their tables, ints on both sides of each fast path's
# limit (one 30-bit digit, two, 64 bits), and UUIDs at both ends of their range.  Each
# writes typed's bytes and loads back, on whichever CPython runs the tests.


@state.savable(name="test.native.VersionLeaf")
@dataclass(eq=False)
class VersionLeaf:
    n: int = 0


@state.savable(name="test.native.VersionBox")
@dataclass(eq=False)
class VersionBox:
    ints: set[int] = field(default_factory=set)
    names: frozenset[str] = frozenset()
    leaves: set[VersionLeaf] = field(default_factory=set)
    n: int = 0
    maybe: int | None = None
    many: list[int] = field(default_factory=list)
    key: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))


def _same(root: object) -> None:
    typed = state.dumps(root, engine="typed")
    native = state.dumps(root, engine="native")
    assert native == typed
    assert graph_diff(root, state.loads(native, engine="native")) is None


def _holey_set(keep: range, drop: range) -> set[int]:
    """A set whose table holds deleted (dummy) entries among the live ones."""
    s = set(keep) | set(drop)
    for x in drop:
        s.discard(x)
    return s


@pytest.mark.parametrize("size", [0, 1, 5, 40, 1000])
def test_sets_with_deleted_entries_write_typeds_bytes(size: int) -> None:
    ints = _holey_set(range(0, 2 * size, 2), range(1, 2 * size, 2))
    names = frozenset(str(i) for i in _holey_set(range(size), range(size, 3 * size)))
    leaves = {VersionLeaf(i) for i in range(size)}
    extra = [VersionLeaf(-i) for i in range(size)]
    leaves.update(extra)
    leaves.difference_update(extra)
    box = VersionBox(ints=ints, names=names, leaves=leaves)
    assert len(box.ints) == len(box.leaves) == size
    _same(box)


EDGES = [
    0,
    1,
    -1,
    2**30 - 1,
    2**30,
    -(2**30) + 1,
    -(2**30),
    2**60 - 1,
    2**60,
    -(2**60),
    2**63 - 1,
    2**63,
    -(2**63),
    2**64 - 1,
    2**64,  # beyond MessagePack: typed's slot escape
    -(2**63) - 1,
    2**200,
]


@pytest.mark.parametrize("n", EDGES, ids=[f"{n:#x}" for n in EDGES])
def test_ints_at_each_fast_path_limit_write_typeds_bytes(n: int) -> None:
    _same(VersionBox(n=n, maybe=n, many=[n, -n, n // 3], ints={n, n - 1}))


@pytest.mark.parametrize("n", [0, 1, 2**64, 2**127, 2**128 - 1], ids=hex)
def test_uuids_at_both_ends_write_typeds_bytes(n: int) -> None:
    _same(VersionBox(key=uuid.UUID(int=n)))


@state.savable(name="test.native.VersionLate")
@dataclass(eq=False)
class VersionLate:
    n: int = 0


@state.savable(name="test.native.VersionTable")
@dataclass(eq=False)
class VersionTable:
    refs: dict[int, VersionLate] = field(default_factory=dict)


@pytest.mark.parametrize("change", ["add", "replace", "remove"])
def test_a_dict_changed_while_it_is_written_in_place_is_written_as_changed(
    monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Python code run to discover a class (here: its plan) changes the dict being
    written in place: the write starts again from snapshots (3.11: the dict's version
    tag says so; 3.12 and later: a dict watcher)."""
    from ckpt.state import native

    table = VersionTable({i: VersionLate(i) for i in range(3)})
    plan_for, changed = native._plan_for, []

    def meddling_plan_for(cls: type) -> object:
        if cls is VersionLate and not changed:
            changed.append(cls)
            if change == "add":
                table.refs[99] = VersionLate(99)
            elif change == "replace":
                table.refs[2] = VersionLate(-2)
            else:
                del table.refs[2]
        return plan_for(cls)

    for cls in (VersionTable, VersionLate):  # no plans cached: discovery asks for them
        state.schema.schema_of(cls).info.__dict__.pop("_native_plan", None)
    monkeypatch.setattr(native, "_plan_for", meddling_plan_for)
    data = state.dumps(table, engine="native")
    assert changed
    assert graph_diff(table, state.loads(data, engine="native")) is None
    if change != "remove":  # the objects met keep their ids: same order as typed's here
        assert data == state.dumps(table, engine="typed")


@pytest.mark.skipif(
    not (3, 11) <= sys.version_info[:2] <= (3, 13)
    or bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    reason="dicts' tables are read in place on CPython 3.11-3.13 with the GIL only",
)
def test_dict_tables_are_read_in_place_where_their_layout_is_known() -> None:
    from ckpt.state import native

    assert native._core.fast_paths == 1
    assert native._core.dict_table == 1  # the import-time check agreed with PyDict_Next


@pytest.mark.skipif(
    not KNOWN_LAYOUT or not getattr(native._core, "fast_paths", 0),
    reason="instance layouts are read in place only on CPython 3.11-3.13, in a build that "
    "may read them",
)
def test_the_layout_checks_accept_this_interpreter() -> None:
    """Where the core knows this CPython's instance layout, its import-time checks find
    attributes where getattr does; a layout read wrongly would turn the fast paths off
    and every field would be read through getattr, correct but twice as slow."""
    fresh = native._Probe()
    assert native._core.check_values(fresh, "x") is True
    assert fresh.__dict__ == {"x": 1}  # materialises the dict
    assert native._core.check_layout(fresh) is True
    # and an instance whose dict replaced its values: not what check_values reads
    replaced = native._Probe()
    replaced.__dict__ = {"x": 2}
    assert native._core.check_values(replaced, "x") is False
    native._core.check_values(native._Probe(), "x")  # on again


# --------------------------------------------------------------------------------------
# A class's native save plan is parsed once and kept on its TypeInfo: a later walk
# uses it without calling back, a class registered again gets a new one, a dropped
# class's plan does not keep it alive, and a malformed plan is a clean error.


def _both(root: object) -> bytes:
    data = state.dumps(root, engine="native")
    assert data == state.dumps(root, engine="typed")
    return data


def test_a_second_walk_finds_the_plan_without_calling_back(monkeypatch) -> None:
    @state.savable(name="tests.plan.Cached")
    @dataclasses.dataclass(eq=False)
    class Cached:
        n: int = 0

    first = _both(Cached(1))
    calls: list[type] = []
    real = native._plan_for
    monkeypatch.setattr(native, "_plan_for", lambda cls: calls.append(cls) or real(cls))
    assert _both(Cached(1)) == first
    assert calls == []


def test_a_class_registered_again_is_saved_under_its_new_registration() -> None:
    @dataclasses.dataclass(eq=False)
    class Renamed:
        n: int = 0

    state.savable(name="tests.plan.Before")(Renamed)
    before = _both(Renamed(7))
    state.savable(name="tests.plan.After")(Renamed)  # a new TypeInfo for the same class
    after = _both(Renamed(7))
    assert b"tests.plan.Before" in before and b"tests.plan.Before" not in after
    assert b"tests.plan.After" in after
    assert state.loads(after, engine="native").n == 7


def _define_and_save() -> weakref.ref:
    @state.savable(name="tests.plan.Dropped")
    @dataclasses.dataclass(eq=False)
    class Dropped:
        n: int = 0
        other: Dropped | None = None

    _both(Dropped(1, Dropped(2)))
    assert isinstance(registry.type_info(Dropped).__dict__["_native_plan"], native._core.Plan)
    return weakref.ref(Dropped)


def test_a_replaced_class_and_its_plan_are_collected() -> None:
    old = _define_and_save()
    _define_and_save()  # the same name again: the registry drops the first class
    gc.collect()
    assert old() is None


@pytest.mark.parametrize(
    "args",
    [
        (),
        (None, 1, False, False, ()),  # the name is not a str
        (None, "n", False, False, [("x",)]),  # fields not a tuple
        (None, "n", False, False, (("x",),)),  # a field of the wrong arity
        (None, "n", False, False, (("x", 0, 0, 0, 0, 0, 0, 0, None, None, 0), 7)),
        # a list[tuple[...]] field whose per-item masks are not a tuple
        (None, "n", False, False, (("x", 5, 0, native.E_TUPLE, 0, 0, 0, 0, None, [1, 2], 0),)),
        (
            None,
            "n",
            False,
            False,
            (("x", 5, 0, native.E_TUPLE, 0, 0, 0, 0, None, tuple(range(99)), 0),),
        ),
    ],
    ids=["empty", "name", "fields", "arity", "second", "masks", "too-many-masks"],
)
def test_a_malformed_plan_is_an_error_not_a_crash(args: tuple) -> None:
    with pytest.raises((TypeError, SystemError)):
        native._core.Plan(*args)


# --------------------------------------------------------------------------------------
# The native core's shared vocabulary (``_native_vocab.h``) as Python sees it, and its
# per-interpreter state (``_native_state.h``).
#
# The op codes are declared once in C and exported; native.py must read them from the
# module, never keep copies that drift.  The Python objects the core keeps (StateError,
# msgspec's encoder) are per interpreter: a subinterpreter importing the engine must not
# replace the main interpreter's.


STATE = Path(native.__file__).parent


def _header_enums() -> dict[str, int]:
    """Every code the header declares, evaluated the way C numbers an enum."""
    text = (STATE / "_native_vocab.h").read_text()
    codes: dict[str, int] = {}
    for body in re.findall(r"enum\s*\{(.*?)\};", text, re.S):
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        nxt = 0
        for item in filter(None, (i.strip() for i in body.split(","))):
            name, _, value = (p.strip() for p in item.partition("="))
            nxt = eval(value, {}, dict(codes)) if value else nxt  # our own header
            codes[name] = nxt
            nxt += 1
    for name, value in re.findall(r"#define (MAX_\w+) (\d+)", text):
        codes[name] = int(value)
    return codes


def test_every_code_native_py_uses_is_the_modules() -> None:
    core = native._core
    names = [n for n in dir(native) if re.fullmatch(r"(OP|E|EK|L|B|Z)_[A-Z_]+", n)]
    assert len(names) > 40
    for name in names:
        assert getattr(native, name) == getattr(core, name), name
    assert native.MAX_TUPLE_ITEMS == core.MAX_TUPLE_ITEMS
    assert (native.MAX_ELEM_DEPTH, native.MAX_ELEM_NODES) == (
        core.MAX_ELEM_DEPTH,
        core.MAX_ELEM_NODES,
    )
    assert native._VALUE_KINDS == {
        "datetime": core.VK_DATETIME,
        "date": core.VK_DATE,
        "timedelta": core.VK_TIMEDELTA,
        "uuid": core.VK_UUID,
    }
    bits = {t.__name__: b for t, b in native._BITS.items()}
    assert bits == {
        "NoneType": core.M_NONE,
        "bool": core.M_BOOL,
        "int": core.M_INT,
        "float": core.M_FLOAT,
        "str": core.M_STR,
        "bytes": core.M_BYTES,
    }


def test_the_module_exports_what_the_header_declares() -> None:
    declared = _header_enums()
    exported = {n: getattr(native._core, n) for n in declared if hasattr(native._core, n)}
    # every op, element, bit, build, zero and value-kind code is exported, with its value
    for name, value in declared.items():
        if re.match(r"(OP|E|EK|M|L|B|Z|VK|MAX)_", name):
            assert exported.get(name) == value, name
    assert native._core.MP_NIL == 0xC0 and native._core.MP_FIXARRAY == 0x90


def test_without_the_core_native_py_still_imports() -> None:
    code = textwrap.dedent(
        """
        from ckpt.state import native
        assert not native.native_status()[0]
        ops = [native.OP_PY, native.OP_SCALAR, native.OP_REF, native.OP_VALUE]
        assert len(set(ops)) == len(ops)
        assert sorted(native._BITS.values()) == [1, 2, 4, 8, 16, 32]
        print("ok")
        """
    )
    env = {**os.environ, "CKPT_PURE_PYTHON": "1", "PYTHONPATH": str(STATE.parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.stdout.strip() == "ok", out.stderr


def test_a_subinterpreter_keeps_its_own_state() -> None:
    """A subinterpreter that imports the engine configures its own StateError; the main
    interpreter's errors stay its own class afterwards (with one module-wide copy they
    were the subinterpreter's, whose class the main one's ``except`` does not catch)."""
    code = textwrap.dedent(
        """
        import _testcapi
        from ckpt import state
        from ckpt.errors import StateError
        from ckpt.state import native

        assert native.native_status()[0]
        # msgspec itself may not load in a subinterpreter: on 3.12 it fails there once
        # another module was imported first (wire.py: msgspec and ckpt.errors, no C of ours)
        if any(_testcapi.run_in_subinterp("import ckpt.state.wire") != 0 for _ in "ab"):
            print("skip")
            raise SystemExit
        sub = '''
        from ckpt import state
        from ckpt.errors import StateError
        data = state.dumps([1, "a", None], engine="native")
        assert state.loads(data, engine="native") == [1, "a", None]
        try:
            state.loads(data[:-3] + bytes(3), engine="native")
        except StateError:
            pass
        '''
        assert _testcapi.run_in_subinterp(sub) == 0
        data = state.dumps([1, "a", None], engine="native")
        assert state.loads(data, engine="native") == [1, "a", None]
        try:
            native._core.read_split(b"\\x93\\x01")
        except StateError:
            print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(STATE.parents[1])}  # keeps LD_PRELOAD (ASan)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    if out.stdout.strip() == "skip":
        pytest.skip("msgspec does not load in a subinterpreter on this Python")
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("lacks", ["E_LIST", "OP_ENUM_DYN", "MAX_ELEM_NODES", "L_ELEM"])
def test_a_core_built_from_older_sources_is_refused_in_words(lacks: str) -> None:
    """A checkout updated without a reinstall keeps its old ``.so``: ckpt then runs on
    the pure-Python engines and ``--version`` says why, never a traceback."""
    code = textwrap.dedent(
        f"""
        import importlib.machinery, importlib.util, sys
        path = {str(Path(native._core.__file__))!r}
        loader = importlib.machinery.ExtensionFileLoader("ckpt.state._native", path)
        spec = importlib.util.spec_from_file_location("ckpt.state._native", path, loader=loader)
        core = importlib.util.module_from_spec(spec)  # ckpt.state not imported yet
        delattr(core, {lacks!r})  # as a build from before that code was added
        sys.modules["ckpt.state._native"] = core
        from ckpt import state
        from ckpt.state import native
        ok, why = native.native_status()
        assert not ok, why
        print(why)
        assert state.loads(state.dumps([1, (2, "x")])) == [1, (2, "x")]
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        f"the C extension is older than this ckpt (it lacks {lacks}); reinstall ckpt"
    )
