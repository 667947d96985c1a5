"""Field kinds the native core saves in C with no call into typed's per-field code:
``Optional`` containers and tuples, enums inside containers and tuples, frozensets of
references, ``bytearray``, sets and dicts of tuples, and enums typed never writes
compactly (member values that are tuples or floats, Flags).

typed is the byte-for-byte reference: for every value, fitting or not (a subclass, an
int beyond 64 bits, a wrong type, None where it is not allowed), the native stream must
equal typed's, and both engines must load it back to the same graph.  A value that does
not fit its op exactly goes to the slot function for that value alone.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, fields
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.state import native, schema

from .graph_equal import assert_graph_equal
from .requires import requires_native
from .test_native_bigint import python_slots

pytestmark = requires_native

# ruff: noqa: UP045 (Optional[...] is what these tests are about)


class Color(enum.Enum):
    RED = 1
    GREEN = 2
    BLUE = "blue"


class Point(enum.Enum):  # not compact: tuple values
    ORIGIN = (0, 0)
    ONE = (1, 1)


class Ratio(enum.Enum):  # not compact: float values
    HALF = 0.5
    INF = math.inf


class Odd(enum.Enum):  # a member whose value is NaN (test_enum_nan.py has more)
    NAN = math.nan


class Perm(enum.Flag):  # not compact: combinations are members too
    R = 1
    W = 2
    X = 4


class SubList(list):
    pass


class SubBytes(bytearray):
    pass


@state.savable(name="tests.native_save_kinds.Kinds")
@dataclass(eq=False, repr=False)  # a failing test prints no cyclic graph
class Kinds:
    # Optional containers, tuples and enums
    ol: Optional[list[int]] = None
    od: Optional[dict[str, int]] = None
    ot: Optional[tuple[int, int]] = None
    ovt: Optional[tuple[int, ...]] = None
    osr: Optional[set[Kinds]] = None
    olr: Optional[list[Kinds]] = None
    ofs: Optional[frozenset[str]] = None
    oba: Optional[bytearray] = None
    opt_point: Optional[Point] = None
    odc: Optional[dict[Color, float]] = None
    # enums in containers and tuples
    lc: list[Color] = field(default_factory=list)
    sc: set[Color] = field(default_factory=set)
    dsc: dict[str, Color] = field(default_factory=dict)
    dci: dict[Color, int] = field(default_factory=dict)
    tci: tuple[Color, int] = (Color.RED, 0)
    tic: tuple[int, Optional[Color]] = (0, None)
    tce: tuple[Color, ...] = ()
    loc: list[Optional[Color]] = field(default_factory=list)
    lp: list[Point] = field(default_factory=list)
    # references
    fr: frozenset[Kinds] = frozenset()
    for_: frozenset[Optional[Kinds]] = frozenset()
    trc: tuple[Kinds, Color] | None = None
    # bytes-like
    ba: bytearray = field(default_factory=bytearray)
    # tuples inside sets and dicts; tuples of Optional scalars
    st2: set[tuple[int, int]] = field(default_factory=set)
    dtk: dict[tuple[int, int], str] = field(default_factory=dict)
    dtv: dict[str, tuple[int, ...]] = field(default_factory=dict)
    fst: frozenset[tuple[str, int]] = frozenset()
    tos: tuple[int, Optional[str]] = (0, None)
    tvo: tuple[Optional[float], ...] = ()
    # enums typed always escapes
    point: Point = Point.ORIGIN
    ratio: Ratio = Ratio.HALF
    perm: Perm = Perm.R
    label: int = 0


ANNOTATIONS = {f.name: f.type for f in fields(Kinds)}


def test_every_kind_here_has_a_c_op() -> None:
    """The plan: no field of Kinds leaves the C path for typed's slot function."""
    sch = schema.schema_of(Kinds)
    py = [s.kind.descriptor for s in sch.fields if native._field_op(s.kind)[0] == native.OP_PY]
    assert py == []
    assert len(sch.fields) == len(ANNOTATIONS) > 30


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


def _full(n: int) -> list[Kinds]:
    objs = [Kinds(label=i) for i in range(n)]
    for i, o in enumerate(objs):
        other = objs[(i + 1) % n]
        o.ol = [i, -i, 2**63] if i % 3 else ([] if i % 2 else None)
        o.od = {"a": i, "b": 2**64 - 1} if i % 2 else ({} if i % 3 else None)
        o.ot = (i, i + 1) if i % 2 else None
        o.ovt = tuple(range(i % 4)) if i % 3 != 1 else None
        o.osr = {other, o} if i % 2 else (set() if i % 3 else None)
        o.olr = [other, other, None] if i % 3 else None
        o.ofs = frozenset({"x", str(i)}) if i % 2 else (frozenset() if i % 3 else None)
        o.oba = bytearray(b"o" * i) if i % 2 else (bytearray() if i % 3 else None)
        o.opt_point = [None, Point.ONE, Point.ORIGIN][i % 3]
        o.odc = {Color.RED: 0.5, Color.BLUE: -math.inf} if i % 2 else None
        o.lc = [Color.RED, Color.BLUE, Color.RED][: i % 4]
        o.sc = {Color.GREEN, Color.BLUE} if i % 2 else set()
        o.dsc = {"k": Color.GREEN, str(i): Color.BLUE} if i % 3 else {}
        o.dci = {Color.RED: i, Color.BLUE: -(2**63)}
        o.tci = (Color.BLUE, i)
        o.tic = (i, None if i % 2 else Color.RED)
        o.tce = (Color.RED,) * (i % 3)
        o.loc = [None, Color.GREEN]
        o.lp = []  # an empty list of a non-compact enum fits (Nil)
        o.fr = frozenset({other, objs[0]})
        o.for_ = frozenset({None, other}) if i % 2 else frozenset()
        o.trc = (other, Color.GREEN) if i % 2 else None
        o.ba = bytearray(b"ab" * i)
        o.st2 = {(i, 1), (2, i)}
        o.dtk = {(i, 0): "x", (1, 2): "y"}
        o.dtv = {"a": (), "b": (1, 2, 2**63)}
        o.fst = frozenset({("a", i)})
        o.tos = (i, None if i % 2 else "s")
        o.tvo = (math.nan, None, math.inf, -0.0)[: i % 5]
        o.point = [Point.ORIGIN, Point.ONE][i % 2]
        o.ratio = [Ratio.HALF, Ratio.INF][i % 2]
        o.perm = [Perm.R, Perm.R | Perm.W, Perm(0)][i % 3]
    return objs


def test_every_kind_is_typed_s_bytes_with_no_python_slot() -> None:
    objs = _full(12)
    with python_slots() as calls:
        _check(objs)
    assert not [k for k in calls if k.startswith("save ")], calls


def test_shared_containers_in_optional_fields_stay_shared() -> None:
    """An Optional field's list met again is written Nil and recorded as shared, after
    its items were checked (typed's compact form checks first)."""
    objs = _full(4)
    shared_list, shared_set = [1, 2], {objs[1]}
    objs[0].ol = objs[1].ol = shared_list
    objs[2].osr = objs[3].osr = shared_set
    objs[0].oba = objs[2].oba = bytearray(b"shared")
    objs[1].ba = objs[3].ba = bytearray(b"both")
    objs[0].od = objs[3].od = {}
    _check(objs)
    back = state.loads(state.dumps(objs, engine="native"), engine="native")
    assert back[0].ol is back[1].ol and back[2].osr is back[3].osr
    assert back[0].oba is back[2].oba and back[1].ba is back[3].ba


MISFITS: list[tuple[str, Any]] = [
    ("ol", SubList([1])),
    ("ol", [1, 2**70]),
    ("ol", [1, "x"]),
    ("ol", (1, 2)),
    ("od", {"a": 2**64}),
    ("od", {1: 1}),
    ("ot", (1, 2, 3)),
    ("ot", (1, 2.0)),
    ("ot", [1, 2]),
    ("ovt", (1, None)),
    ("osr", {1}),
    ("osr", frozenset()),
    ("olr", [object.__new__(Kinds), 5]),
    ("ofs", frozenset({1})),
    ("oba", SubBytes(b"x")),
    ("oba", b"bytes"),
    ("opt_point", Color.RED),
    ("opt_point", 3),
    ("odc", {Color.RED: "x"}),
    ("lc", [Color.RED, 1]),
    ("lc", [Point.ONE]),
    ("sc", {Color.RED, None}),
    ("dsc", {"a": Point.ONE}),
    ("dci", {Color.RED: 2**64}),
    ("dci", {1: 1}),
    ("tci", (1, Color.RED)),
    ("tci", (Color.RED,)),
    ("tic", (1, Point.ONE)),
    ("tce", (Color.RED, None)),
    ("tce", [Color.RED]),
    ("loc", [Color.RED, 0]),
    ("lp", [Point.ONE]),
    ("fr", frozenset({1})),
    ("fr", {object.__new__(Kinds)}),
    ("for_", frozenset({"x"})),
    ("trc", (None, Color.RED)),
    ("trc", (1, Color.RED)),
    ("ba", SubBytes(b"s")),
    ("ba", None),
    ("ba", b"x"),
    ("st2", {(1, 2, 3)}),
    ("st2", {(1, 2**64)}),
    ("dtk", {(1,): "a"}),
    ("dtk", {(1, 2): 3}),
    ("dtv", {"a": [1]}),
    ("dtv", {"a": (1, "x")}),
    ("fst", frozenset({("a", 2**70)})),
    ("tos", (1, 2)),
    ("tvo", (1.5, "x")),
    ("point", None),
    ("point", (0, 0)),
    ("ratio", 0.5),
    ("perm", 1),
    ("label", 2**80),
]


@pytest.mark.parametrize(
    ("name", "value"), MISFITS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(MISFITS)]
)
def test_a_misfit_is_typed_s_escape(name: str, value: Any) -> None:
    objs = _full(3)
    setattr(objs[1], name, value)
    _check(objs)


def test_a_shared_misfit_in_an_optional_field_escapes_after_the_memo() -> None:
    """A list met before that does not fit an Optional[list[int]]: typed tests the items
    first, so the second place is an escape of a container seen again, not Nil."""
    objs = _full(3)
    shared = [1, "x"]
    objs[0].ol = objs[2].ol = shared
    _check(objs)


def test_enum_members_and_the_empty_and_the_odd() -> None:
    objs = [Kinds(label=i) for i in range(3)]
    objs[0].perm = Perm.R | Perm.W | Perm.X
    objs[1].ratio = Ratio.INF
    objs[2].tvo = (math.nan, -math.inf)
    objs[2].od = {}
    objs[2].ovt = ()
    _check(objs)


def test_the_empty_forms_match() -> None:
    """Empty plain containers are Nil; empty Optional ones their compact form."""
    o = Kinds(
        ol=[],
        od={},
        ovt=(),
        osr=set(),
        olr=[],
        ofs=frozenset(),
        oba=bytearray(),
        odc={},
    )
    data = _check(o)
    back = state.loads(data, engine="native")
    assert back.ol == [] and back.od == {} and back.ovt == () and back.oba == bytearray()


def test_a_nan_valued_member_is_typed_s_bytes() -> None:
    """Enum(nan) finds no member (nan != nan); the bytes are still typed's, and both
    engines load the member back as itself."""
    o = Kinds(ratio=Odd.NAN)  # type: ignore[arg-type]
    data = state.dumps(o, engine="native")
    assert data == state.dumps(o, engine="typed")
    for engine in ("native", "typed"):
        assert state.loads(data, engine=engine).ratio is Odd.NAN


# ---- hypothesis: random values of every kind, fitting or not ----------------------

_ints = st.one_of(st.integers(-5, 5), st.sampled_from([2**63, -(2**63), 2**64, -(2**63) - 1]))
_floats = st.floats(allow_nan=True, allow_infinity=True) | _ints
_scalar = st.one_of(st.none(), st.booleans(), _ints, _floats, st.text(max_size=3))
_colors = st.sampled_from(list(Color))
_odd = st.one_of(_scalar, _colors, st.sampled_from([*Point, *Ratio, Perm.R | Perm.X]))


def _values(name: str, nodes: st.SearchStrategy) -> st.SearchStrategy:
    """Values that fit the field most of the time, and sometimes do not."""
    node_or_none = st.none() | nodes
    fitting: dict[str, st.SearchStrategy] = {
        "ol": st.none() | st.lists(_ints, max_size=4),
        "od": st.none() | st.dictionaries(st.text(max_size=2), _ints, max_size=3),
        "ot": st.none() | st.tuples(_ints, _ints),
        "ovt": st.none() | st.lists(_ints, max_size=3).map(tuple),
        "osr": st.none() | st.sets(nodes, max_size=3),
        "olr": st.none() | st.lists(node_or_none, max_size=3),
        "ofs": st.none() | st.frozensets(st.text(max_size=2), max_size=3),
        "oba": st.none() | st.binary(max_size=4).map(bytearray),
        "opt_point": st.none() | st.sampled_from(list(Point)),
        "odc": st.none() | st.dictionaries(_colors, _floats, max_size=3),
        "lc": st.lists(_colors, max_size=4),
        "sc": st.sets(_colors),
        "dsc": st.dictionaries(st.text(max_size=2), _colors, max_size=3),
        "dci": st.dictionaries(_colors, _ints, max_size=3),
        "tci": st.tuples(_colors, _ints),
        "tic": st.tuples(_ints, st.none() | _colors),
        "tce": st.lists(_colors, max_size=3).map(tuple),
        "loc": st.lists(st.none() | _colors, max_size=3),
        "lp": st.lists(st.sampled_from(list(Point)), max_size=2),
        "fr": st.frozensets(nodes, max_size=3),
        "for_": st.frozensets(node_or_none, max_size=3),
        "trc": st.none() | st.tuples(nodes, _colors),
        "ba": st.binary(max_size=4).map(bytearray),
        "st2": st.sets(st.tuples(_ints, _ints), max_size=3),
        "dtk": st.dictionaries(st.tuples(_ints, _ints), st.text(max_size=2), max_size=3),
        "dtv": st.dictionaries(st.text(max_size=2), st.lists(_ints, max_size=3).map(tuple)),
        "fst": st.frozensets(st.tuples(st.text(max_size=2), _ints), max_size=3),
        "tos": st.tuples(_ints, st.none() | st.text(max_size=2)),
        "tvo": st.lists(st.none() | _floats, max_size=3).map(tuple),
        "point": st.sampled_from(list(Point)),
        "ratio": st.sampled_from(list(Ratio)),
        "perm": st.sampled_from([Perm.R, Perm.W | Perm.X, Perm(0)]),
        "label": _ints,
    }
    misfit = st.one_of(
        _odd,
        st.lists(_odd, max_size=2),
        st.lists(_odd, max_size=2).map(tuple),
        st.frozensets(_odd, max_size=2),
        nodes,
    )
    return st.one_of(fitting[name], fitting[name], fitting[name], misfit)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_values_of_every_kind(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 5))
    objs = [Kinds(label=i) for i in range(n)]
    nodes = st.sampled_from(objs)
    names = list(ANNOTATIONS)
    for o in objs:
        for name in data.draw(st.lists(st.sampled_from(names), max_size=8, unique=True)):
            setattr(o, name, data.draw(_values(name, nodes), label=name))
    if n > 1 and data.draw(st.booleans()):  # a container in two places
        shared = data.draw(st.sampled_from(["ol", "osr", "oba", "ba", "lc", "od"]))
        setattr(objs[-1], shared, getattr(objs[0], shared))
    _check(objs)


def _field(op: int, kop: int = 0, vop: int = 0, arg: Any = None, mask: int = 0) -> tuple:
    return ("x", op, mask, kop, 0, vop, 0, 0, None, arg, 0)


@pytest.mark.parametrize(
    "entry",
    [
        _field(native.OP_ENUM_DYN, arg=5),  # not a class
        _field(native.OP_LIST, kop=native.E_ENUM, arg=(5, None)),
        _field(native.OP_LIST, kop=native.E_SCALAR, arg=(Color, None)),  # arg without an op
        _field(native.OP_DICT, kop=native.E_TUPLE, vop=native.E_TUPLE, arg=((4, 4), (4,))),
        _field(native.OP_SET, kop=native.E_ENUM, arg=(Color,)),  # not a pair
        _field(native.OP_TUPLE, vop=native.E_REF, arg=((native._M_ENUM | 4, Color),)),
        _field(native.OP_TUPLE, vop=native.E_REF, arg=((native._M_ENUM, 5),)),
        _field(native.OP_TUPLE, vop=native.E_REF, arg=("x",)),
    ],
)
def test_a_malformed_plan_for_these_kinds_is_an_error(entry: tuple) -> None:
    with pytest.raises(SystemError):
        native._core.Plan(None, "n", False, False, (entry,))
