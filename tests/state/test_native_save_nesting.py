"""Containers nested deeper than one level, saved in C: ``list[list[list[int]]]``,
``dict[str, list[list[int]]]``, ``list[dict[str, int]]``, ``list[set[Node]]`` and their
``Optional`` forms, through the field's nest program (E_NEST: SK_* nodes from the
annotation, bounded by the plan, never by the input).

typed is the byte-for-byte reference: for every value, fitting or not (an int beyond 64
bits three levels down, a tuple where a list is declared, a subclass, None where it is
not allowed, a list that holds itself), the native stream must equal typed's and both
engines must load it back to the same graph.  A value that does not fit its field goes
to the slot function for that value alone.
"""

from __future__ import annotations

import enum
import random
import zlib
from dataclasses import dataclass, field, fields
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.state import native, schema, wire

from .graph_equal import assert_graph_equal, graph_diff
from .requires import requires_native
from .test_native_bigint import python_slots

pytestmark = requires_native

# ruff: noqa: UP045 (Optional[...] is one of the kinds under test)


class Tone(enum.Enum):
    LOW = 1
    HIGH = "high"


class SubList(list):
    pass


@state.savable(name="tests.native_save_nesting.Nest")
@dataclass(eq=False, repr=False)  # a failing test prints no cyclic graph
class Nest:
    lll: list[list[list[int]]] = field(default_factory=list)
    dsll: dict[str, list[list[int]]] = field(default_factory=dict)
    lds: list[dict[str, int]] = field(default_factory=list)
    lol: list[Optional[list[float]]] = field(default_factory=list)
    lsr: list[set[Nest]] = field(default_factory=list)
    ldr: list[dict[str, list[Nest]]] = field(default_factory=list)
    llr: list[list[list[Optional[Nest]]]] = field(default_factory=list)
    dde: dict[int, dict[Tone, list[str]]] = field(default_factory=dict)
    lfs: list[frozenset[int]] = field(default_factory=list)
    olll: Optional[list[list[list[bytes]]]] = None
    llo: list[list[Optional[Tone]]] = field(default_factory=list)
    label: int = 0


ANNOTATIONS = {f.name: f.type for f in fields(Nest)}
NESTED = [name for name in ANNOTATIONS if name != "label"]


def test_every_nested_kind_here_has_a_c_op() -> None:
    """The plan: no field of Nest leaves the C path; each nests through a program."""
    sch = schema.schema_of(Nest)
    ops = {s.name: native._field_op(s.kind) for s in sch.fields}
    assert [n for n, op in ops.items() if op[0] == native.OP_PY] == []
    assert [n for n in NESTED if native.E_NEST not in (ops[n][2], ops[n][4])] == []


def test_a_program_is_bounded_by_the_plan() -> None:
    """Deeper or larger than the load side's limits: typed's slot function, as before."""
    deep: Any = int
    for _ in range(native.MAX_ELEM_DEPTH):
        deep = list[deep]
    assert native._field_op(schema.kind_of(list[deep], "t"))[0] == native.OP_PY
    shallow: Any = int
    for _ in range(native.MAX_ELEM_DEPTH - 1):
        shallow = list[shallow]
    assert native._field_op(schema.kind_of(list[shallow], "t"))[2] == native.E_NEST
    wide = dict[str, tuple[int, int]]  # a tuple node: not in a nest program
    assert native._field_op(schema.kind_of(list[wide], "t"))[0] == native.OP_PY


def _check(root: Any) -> bytes | None:
    """Native's bytes are typed's and load back as the graph; or both refuse it alike."""
    try:
        expected = state.dumps(root, engine="typed")
    except state.StateError as exc:
        with pytest.raises(state.StateError) as got:
            state.dumps(root, engine="native")
        assert str(got.value).replace("native", "typed", 1) == str(exc)
        return None
    data = state.dumps(root, engine="native")
    if data != expected:  # where, not a diff of two long byte strings
        at = next(
            (i for i, (a, b) in enumerate(zip(data, expected, strict=False)) if a != b),
            min(len(data), len(expected)),
        )
        pytest.fail(f"native differs from typed at byte {at}: {data[at : at + 16]!r}")
    for engine in ("native", "typed"):
        assert_graph_equal(root, state.loads(data, engine=engine))
    return data


def _full(n: int) -> list[Nest]:
    objs = [Nest(label=i) for i in range(n)]
    for i, o in enumerate(objs):
        other = objs[(i + 1) % n]
        o.lll = [[[i, -i], []], [], [[2**63, -(2**63)]]][: i % 4]
        o.dsll = {"a": [[i], [1, 2]], "b": [], "c": [[]]} if i % 2 else {}
        o.lds = [{"x": i}, {}, {"y": 2**64 - 1, "z": -1}]
        o.lol = [None, [1.5, float(i)], [], [float("inf")]]
        o.lsr = [{other, o}, set()] if i % 2 else [{other}]
        o.ldr = [{"k": [other, o, other]}, {}]
        o.llr = [[[None, other], []], [[o]]]
        o.dde = {i: {Tone.LOW: ["a"], Tone.HIGH: []}, -1: {}}
        o.lfs = [frozenset({i, 2}), frozenset()]
        o.olll = [[[b"x" * i]]] if i % 3 else ([] if i % 3 == 1 else None)
        o.llo = [[Tone.LOW, None, Tone.HIGH], []]
    return objs


def test_every_kind_is_typed_s_bytes_with_no_python_slot() -> None:
    objs = _full(6)
    with python_slots() as calls:
        _check(objs)
    assert not [k for k in calls if k.startswith("save ")], calls


def test_shared_inner_containers_stay_shared() -> None:
    """An inner container met again (in the same field, another field or another
    object) is Nil, recorded as shared, and loads back as the same object."""
    objs = _full(3)
    inner, row, table = [7, 8], {"s": 1}, {objs[0]}
    objs[0].lll = [[inner, inner], [inner]]
    objs[1].dsll = {"k": [inner]}
    objs[2].lds = [row, row]
    objs[1].lds = [row]
    objs[0].lsr = [table]
    objs[2].lsr = [table, table]
    data = _check(objs)
    assert data is not None
    for engine in ("native", "typed"):
        back = state.loads(data, engine=engine)
        assert back[0].lll[0][0] is back[0].lll[0][1] is back[0].lll[1][0]
        assert back[1].dsll["k"][0] is back[0].lll[0][0]
        assert back[2].lds[0] is back[2].lds[1] is back[1].lds[0]
        assert back[0].lsr[0] is back[2].lsr[0] is back[2].lsr[1]


def _cyclic() -> list:
    loop: list = []
    loop.append(loop)
    return [loop]


MISFITS: list[tuple[str, Any]] = [
    ("lll", [[[1, 2**70]]]),  # beyond 64 bits, three levels down
    ("lll", [[(1, 2)]]),  # a tuple where a list is declared
    ("lll", [[SubList([1])]]),
    ("lll", [[None]]),
    ("lll", [[[None]]]),
    ("lll", _cyclic()),  # a list holding itself: the plan's depth, not the input's
    ("lll", [(1,)]),
    ("dsll", {"a": [[1.5]]}),
    ("dsll", {1: [[1]]}),
    ("dsll", {"a": [(1,)]}),
    ("lds", [{"a": "x"}]),
    ("lds", [{1: 1}]),
    ("lds", [[("a", 1)]]),
    ("lol", [[1.5, "x"]]),
    ("lol", [[1.5, 2]]),  # an int fits a float, but not C's fast path: the slot's
    ("lol", [(1.5,)]),
    ("lsr", [{1}]),
    ("lsr", [frozenset()]),
    ("lsr", [{object.__new__(Nest), None}]),
    ("ldr", [{"k": [1]}]),
    ("ldr", [{"k": (None,)}]),
    ("llr", [[[5]]]),
    ("dde", {1: {"LOW": ["a"]}}),
    ("dde", {1: {Tone.LOW: [b"a"]}}),
    ("lfs", [{1}]),
    ("lfs", [frozenset({2**64})]),
    ("olll", [[[b"x", "y"]]]),
    ("olll", [[[bytearray(b"x")]]]),
    ("llo", [[Tone.LOW, 1]]),
    ("llo", [["high"]]),
]


@pytest.mark.parametrize(
    ("name", "value"), MISFITS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(MISFITS)]
)
def test_a_misfit_is_typed_s_escape(name: str, value: Any) -> None:
    objs = _full(3)
    setattr(objs[1], name, value)
    _check(objs)


def test_a_misfit_met_after_its_fitting_twin_is_typed_s() -> None:
    """A list shared between a field it fits and one it does not."""
    objs = _full(3)
    shared = [[1, 2]]
    objs[0].lll = [shared]
    objs[1].dsll = {"x": shared}
    objs[2].lol = shared  # list[list[int]] is a list[Optional[list[float]]]
    objs[1].llr = [shared]  # ints are not references: escaped
    _check(objs)


def test_the_empty_forms_match() -> None:
    """An empty inner container is an empty array, never Nil (Nil means met before)."""
    o = Nest(
        lll=[[[]], []],
        dsll={"e": []},
        lds=[{}],
        lol=[[], None],
        lsr=[set()],
        ldr=[{"e": []}],
        dde={0: {}},
        lfs=[frozenset()],
        olll=[],
        llo=[[]],
    )
    data = _check(o)
    assert data is not None
    back = state.loads(data, engine="native")
    assert back.lll == [[[]], []] and back.lds == [{}] and back.olll == []


# ---- hypothesis: random values of every kind, fitting or not ----------------------

_ints = st.one_of(st.integers(-5, 5), st.sampled_from([2**63, -(2**63), 2**64, -(2**63) - 1]))
_odd = st.one_of(st.none(), st.booleans(), _ints, st.floats(), st.text(max_size=2))


def _values(name: str, nodes: st.SearchStrategy) -> st.SearchStrategy:
    """Values that fit the field most of the time, and sometimes do not."""
    ints_ll = st.lists(st.lists(_ints, max_size=3), max_size=3)
    fitting: dict[str, st.SearchStrategy] = {
        "lll": st.lists(ints_ll, max_size=3),
        "dsll": st.dictionaries(st.text(max_size=2), ints_ll, max_size=3),
        "lds": st.lists(st.dictionaries(st.text(max_size=2), _ints, max_size=3), max_size=3),
        "lol": st.lists(st.none() | st.lists(st.floats() | _ints, max_size=3), max_size=3),
        "lsr": st.lists(st.sets(nodes, max_size=3), max_size=3),
        "ldr": st.lists(
            st.dictionaries(st.text(max_size=2), st.lists(nodes, max_size=3), max_size=2),
            max_size=2,
        ),
        "llr": st.lists(st.lists(st.lists(st.none() | nodes, max_size=3), max_size=2)),
        "dde": st.dictionaries(
            _ints,
            st.dictionaries(st.sampled_from(list(Tone)), st.lists(st.text(max_size=2))),
            max_size=2,
        ),
        "lfs": st.lists(st.frozensets(_ints, max_size=3), max_size=3),
        "olll": st.none() | st.lists(st.lists(st.lists(st.binary(max_size=2)))),
        "llo": st.lists(st.lists(st.none() | st.sampled_from(list(Tone)), max_size=3)),
        "label": _ints,
    }
    leaf = _odd | nodes | st.sampled_from(list(Tone))
    misfit = st.recursive(
        leaf,
        lambda inner: (
            st.lists(inner, max_size=2)
            | st.lists(inner, max_size=2).map(tuple)
            | st.dictionaries(st.text(max_size=1), inner, max_size=2)
        ),
        max_leaves=6,
    )
    return st.one_of(fitting[name], fitting[name], fitting[name], misfit)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_values_of_every_kind(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 4))
    objs = [Nest(label=i) for i in range(n)]
    nodes = st.sampled_from(objs)
    names = list(ANNOTATIONS)
    for o in objs:
        for name in data.draw(st.lists(st.sampled_from(names), max_size=6, unique=True)):
            setattr(o, name, data.draw(_values(name, nodes), label=name))
    if data.draw(st.booleans()):  # an inner container in two places
        inner = data.draw(st.lists(_ints, max_size=2))
        objs[0].lll = [[inner], [inner]]
        objs[-1].dsll = {"s": [inner]}
    _check(objs)


# ---- Python code run mid-write changes a nested container -----------------------------

_meddle: list = []  # what reading a Sly member's value runs next (once)


class Sly(enum.Enum):
    """A compact enum whose ``_value_`` read runs code: the one way into Python while C
    writes a nested container of scalars and members."""

    A = 1
    B = 2

    def __getattribute__(self, name: str) -> Any:
        if name == "_value_" and _meddle:
            _meddle.pop()()
        return object.__getattribute__(self, name)


@state.savable(name="tests.native_save_nesting.Meddled")
@dataclass(eq=False)
class Meddled:
    rows: list[list[Sly]] = field(default_factory=list)


@pytest.mark.parametrize("change", ["shrink", "retype"])
def test_a_nested_list_changed_mid_write_is_a_state_error(change: str) -> None:
    """The array's length is written first: a list that shrinks, or an item that turns
    into another type, while C writes it is the save's StateError, never a short array
    or a value its node does not take (typed builds the list first, then encodes)."""
    state.dumps(Meddled([[Sly.B]]), engine="native")  # the plan reads every _value_
    first, later = [Sly.A, Sly.B, Sly.A], [Sly.B]
    act = first.clear if change == "shrink" else lambda: later.__setitem__(0, 5)
    _meddle[:] = [act]
    with pytest.raises(state.StateError, match="ValueError: a container changed while"):
        state.dumps(Meddled([first, later]), engine="native")
    assert _meddle == []


# ---- damage: malformed plans are errors; damaged streams StateError, never a crash -----


def _field(kop: int, arg: Any, op: int | None = None, vop: int = 0) -> tuple:
    return ("x", native.OP_LIST if op is None else op, 0, kop, 0, vop, 0, 0, None, arg, 0)


_LIST = native.SK_LIST
_INT = (native.SK_SCALAR, native._M_INT, None, -1, -1)


@pytest.mark.parametrize(
    "entry",
    [
        _field(native.E_NEST, None),  # no program
        _field(native.E_NEST, ((), None)),  # an empty one
        _field(native.E_NEST, (((_LIST, 0, None, 0, -1),), None)),  # its own item
        _field(native.E_NEST, (((_LIST, 0, None, 1, -1), (_LIST, 0, None, 0, -1)), None)),
        _field(native.E_NEST, (((_LIST, 0, None, 5, -1), _INT), None)),  # out of range
        _field(native.E_NEST, (((native.SK_DICT, 0, None, 1, -1), _INT), None)),  # no values
        _field(native.E_NEST, (((99, 0, None, -1, -1),), None)),  # no such node
        _field(native.E_NEST, (((native.SK_ENUM, 0, 5, -1, -1),), None)),  # not a class
        _field(native.E_NEST, (((native.SK_SCALAR, 0, Tone, -1, -1),), None)),
        _field(native.E_NEST, (((native.SK_REF, native._M_NONE, None, -1, -1),), None)),
        _field(native.E_NEST, (((native.SK_LIST, 4, None, 1, -1), _INT), None)),  # a bad mask
        _field(native.E_NEST, ((_INT,) * (native.MAX_ELEM_NODES + 1), None)),  # too many
        _field(native.E_NEST, ((("x",),), None)),
        _field(native.E_NEST, ((_INT,), None), op=native.OP_SET),  # no list in a set
        _field(native.E_NEST, ((_INT,), None), op=native.OP_DICT),  # ... nor as a key
        _field(0, (None, (_INT,)), op=native.OP_TUPLE, vop=native.E_NEST),
        _field(native.E_NEST, ((_INT,), (_INT,)), op=native.OP_DICT, vop=native.E_NEST),
    ],
)
def test_a_malformed_nest_plan_is_an_error(entry: tuple) -> None:
    with pytest.raises(SystemError):
        native._core.Plan(None, "n", False, False, (entry,))


def test_a_well_formed_nest_plan_is_taken() -> None:
    """The other side of the test above: the shapes it breaks, whole."""
    prog = ((_LIST, 0, None, 1, -1), (native.SK_DICT, 0, None, 2, 3), _INT, _INT)
    native._core.Plan(None, "n", False, False, (_field(native.E_NEST, (prog, None)),))


@pytest.fixture(scope="module")
def nested_stream() -> bytes:
    return state.dumps(_full(3), engine="native")


def test_truncated_at_every_length(nested_stream: bytes, watchdog: None) -> None:
    for n in range(len(nested_stream)):
        with pytest.raises(state.StateError):
            state.loads(nested_stream[:n], engine="native")


def _outcome(data: bytes, engine: str) -> tuple[str, Any]:
    try:
        return "value", state.loads(data, engine=engine)
    except state.StateError as exc:
        return "error", str(exc).removeprefix(f"{engine} load failed: ")


def test_byte_flips_inside_valid_frames(nested_stream: bytes, watchdog: None) -> None:
    """Each payload byte flipped, the frame made valid again: the native load gives a
    StateError or typed's graph, never another exception."""
    body = bytes(wire.check_frame(nested_stream))
    rng = random.Random("nesting")
    failures = []
    for i in range(len(body)):
        damaged = bytearray(body)
        damaged[i] ^= 1 << rng.randrange(8)
        header = wire._HEADER.pack(
            wire.MAGIC, wire.FORMAT_VERSION, zlib.crc32(damaged), len(damaged)
        )
        data = header + bytes(damaged)
        (nk, nv), (tk, tv) = _outcome(data, "native"), _outcome(data, "typed")
        if nk == tk == "value" and graph_diff(tv, nv) is not None:
            failures.append((i, graph_diff(tv, nv)))
    assert failures == []
