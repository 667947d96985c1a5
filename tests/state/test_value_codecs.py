"""Stdlib value types and user-registered ones: saved exactly, by both engines, across.

Each value is saved in a polymorphic field, in a field annotated with its type (kind
``value:<codec>``), inside a list, and at the root.  Comparison is by exact type and
``repr`` (an aware datetime equals the same instant in another zone; ``==`` is not
enough), through ``graph_diff``.
"""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import fractions
import ipaddress
import pathlib
import uuid
import zoneinfo
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pytest

from ckpt import state
from ckpt.state import wire
from ckpt.state.schema import schema_of

from .conftest import ENGINE_PAIRS, pair_id, roundtrip
from .graph_equal import graph_diff
from .models import Leaf

UTC = dt.UTC
PARIS = zoneinfo.ZoneInfo("Europe/Paris")


@state.savable(name="tests.state.values.Point")
class Point(NamedTuple):
    x: int
    y: int = 0
    label: str = ""


def _samples() -> dict[str, list[Any]]:
    """The 17 stdlib value types, each with a few awkward values."""
    return {
        "datetime": [
            dt.datetime(2026, 12, 1, 7, 5, 3, 123456),
            dt.datetime(2026, 12, 1, 7, 5, tzinfo=UTC),
            dt.datetime(2026, 3, 29, 2, 30, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
            dt.datetime(2026, 1, 1, tzinfo=dt.timezone(-dt.timedelta(seconds=1), "odd")),
            dt.datetime(2026, 10, 25, 2, 30, tzinfo=PARIS, fold=1),
            dt.datetime.min,
            dt.datetime.max,
        ],
        "date": [dt.date(2026, 2, 28), dt.date.min, dt.date.max],
        "time": [dt.time(23, 59, 59, 999999), dt.time(1, 2, tzinfo=UTC), dt.time(fold=1)],
        "timedelta": [dt.timedelta(0), dt.timedelta(days=-3, microseconds=5), dt.timedelta.max],
        "Decimal": [
            decimal.Decimal("-0.00"),
            decimal.Decimal("1E+999"),
            decimal.Decimal("NaN"),
            decimal.Decimal("-Infinity"),
            decimal.Decimal("3.14159265358979323846264338327950288"),
        ],
        "UUID": [uuid.UUID(int=0), uuid.UUID("12345678-1234-5678-1234-567812345678")],
        "path": [
            pathlib.PurePosixPath("/a/b"),
            pathlib.PosixPath("rel/x.txt"),
            pathlib.PureWindowsPath("C:/Windows"),
        ],
        "complex": [0j, complex(1.5, -2), complex(float("inf"), -0.0)],
        "Fraction": [fractions.Fraction(1, 3), fractions.Fraction(-(2**80), 7)],
        "ip address": [ipaddress.IPv4Address("10.0.0.1"), ipaddress.IPv6Address("fe80::1%eth0")],
        "ip network": [
            ipaddress.IPv4Network("10.0.0.0/8"),
            ipaddress.IPv6Network("2001:db8::/32"),
            ipaddress.IPv4Interface("10.1.2.3/24"),
        ],
        "deque": [collections.deque(), collections.deque([1, "a", (2,)], maxlen=5)],
        "OrderedDict": [collections.OrderedDict([("b", 1), ("a", [2])])],
        "defaultdict": [
            collections.defaultdict(list, {"a": [1]}),
            collections.defaultdict(dict),
            collections.defaultdict(set, {1: {2}}),
            collections.defaultdict(int, {"n": 3}),
            collections.defaultdict(None, {"x": 1}),
            collections.defaultdict(Leaf),
        ],
        "Counter": [collections.Counter("hello"), collections.Counter({"neg": -2, "zero": 0})],
        "range": [range(0), range(-5, 2**70, 3)],
        "NamedTuple": [Point(1), Point(2, 3, "p")],
    }


SAMPLES = _samples()
assert len(SAMPLES) == 17


@state.savable(name="tests.state.values.Box")
@dataclass(eq=False)
class Box:
    value: Any = None
    items: list[Any] = field(default_factory=list)


def _typed_holder(cls: type) -> type:
    name = f"tests.state.values.Typed_{cls.__module__}.{cls.__qualname__}"
    holder = type(f"Hold_{cls.__name__}", (), {"__annotations__": {"v": cls | None}, "v": None})
    holder.__module__ = __name__
    return state.savable(name=name)(dataclass(eq=False)(holder))


_HOLDERS: dict[type, type] = {}


def holder_for(value: Any) -> Any:
    cls = type(value)
    if cls not in _HOLDERS:
        _HOLDERS[cls] = _typed_holder(cls)
    return _HOLDERS[cls](value)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
def test_stdlib_value_types_round_trip_exactly(kind: str, engines: tuple[str, str]) -> None:
    for value in SAMPLES[kind]:
        root = [value, Box(value, [value, value]), holder_for(value), (value,)]
        loaded = roundtrip(root, engines)
        diff = graph_diff(root, loaded)
        assert diff is None, f"{value!r}: {diff}"


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_annotated_value_fields_get_a_value_kind(kind: str) -> None:
    value = SAMPLES[kind][0]
    desc = schema_of(type(holder_for(value))).descriptors[0]
    assert desc.startswith("opt[value:"), desc


def test_annotated_value_is_compact_and_a_misfit_is_escaped() -> None:
    h = holder_for(dt.date(2026, 1, 2))
    other = type(h)("not a date")
    payload = wire.unframe(state.dumps([h, other], "typed"))
    (rows,) = [r for r in payload[wire.ROWS] if r]
    assert rows[0] == [[2026, 1, 2]]
    assert rows[1] == [{wire.T_SLOT: "not a date"}]
    loaded = state.loads(wire.frame(payload), "reflect")
    assert loaded[1].v == "not a date"


def test_subclass_of_a_value_type_is_not_silently_saved_as_the_base() -> None:
    class MyDate(dt.date):
        pass

    with pytest.raises(state.StateError, match="MyDate"):
        state.dumps(Box(MyDate(2026, 1, 1)), "typed")


def test_unsavable_tzinfo_and_factory_are_state_errors() -> None:
    class Tz(dt.tzinfo):
        def utcoffset(self, d: Any) -> dt.timedelta:
            return dt.timedelta(0)

    for bad in (dt.datetime(2026, 1, 1, tzinfo=Tz()), collections.defaultdict(lambda: 0)):
        for engine in ("typed", "reflect"):
            with pytest.raises(state.StateError, match=r"\$\.value"):
                state.dumps(Box(bad), engine)


class Money:
    """A user value type (not a dataclass)."""

    def __init__(self, cents: int, currency: str) -> None:
        self.cents, self.currency = cents, currency

    def __repr__(self) -> str:
        return f"Money({self.cents}, {self.currency!r})"


state.register_value(
    Money,
    name="tests.state.values.Money",
    to_plain=lambda m: [m.cents, m.currency],
    from_plain=lambda p: Money(p[0], p[1]),
)


@state.savable(name="tests.state.values.Wallet")
@dataclass(eq=False)
class Wallet:
    balance: Money | None = None
    history: list[Money] = field(default_factory=list)


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
def test_user_registered_value_type(engines: tuple[str, str]) -> None:
    w = Wallet(Money(2**70, "EUR"), [Money(1, "USD"), Money(-2, "JPY")])
    assert schema_of(Wallet).descriptors == (
        "opt[value:tests.state.values.Money]",
        "list[value:tests.state.values.Money]",
    )
    loaded = roundtrip([w, Box(Money(5, "GBP"))], engines)
    assert repr(loaded[0].balance) == "Money(1180591620717411303424, 'EUR')"
    assert repr(loaded[0].history) == "[Money(1, 'USD'), Money(-2, 'JPY')]"
    assert type(loaded[1].value) is Money


def test_unregistered_codec_name_in_a_stream_is_refused() -> None:
    payload = wire.unframe(state.dumps(Box(Money(1, "X")), "reflect"))
    text = repr(payload)
    assert "tests.state.values.Money" in text
    row = payload[wire.ROWS][0][0]
    row[0] = {wire.T_VALUE: ["os.system", ["echo hi"]]}
    for engine in ("typed", "reflect"):
        with pytest.raises(state.StateError, match="not a known value type"):
            state.loads(wire.frame(payload), engine)


def test_register_value_refuses_builtin_names() -> None:
    with pytest.raises(state.StateError, match="built in"):
        state.register_value(Money, name="datetime", to_plain=list, from_plain=list)


def test_inspect_shows_values_readably() -> None:
    root = Box(
        dt.datetime(2026, 1, 2, tzinfo=UTC), [uuid.UUID(int=1), Money(3, "EUR"), Point(1, 2)]
    )
    for engine in ("typed", "reflect"):
        view = state.inspect_stream(state.dumps([root, holder_for(decimal.Decimal("1.5"))], engine))
        text = repr([o.fields for o in view.objects()])
        assert "datetime.datetime(2026, 1, 2, 0, 0, tzinfo=datetime.timezone.utc)" in text
        assert "UUID('00000000-0000-0000-0000-000000000001')" in text
        assert "Money(3, 'EUR')" in text
        assert "Point(1, 2, '')" in text
        assert "Decimal('1.5')" in text


def test_value_module_imports_are_lazy() -> None:
    import subprocess
    import sys

    # (msgspec itself imports decimal, uuid and ipaddress; fractions only we would.)
    code = "import sys; from ckpt import state; print('fractions' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@state.savable(name="tests.state.values.Queues")
@dataclass(eq=False)
class Queues:
    q: collections.deque | None = None
    waiting: Any = None
    index: collections.OrderedDict | None = None


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
def test_mutable_value_containers_keep_identity(engines: tuple[str, str]) -> None:
    inner = [1, 2]
    q = collections.deque([inner, Leaf(1)], maxlen=4)
    od = collections.OrderedDict(a=inner)
    counts = collections.Counter(x=1)
    a = Queues(q, counts, od)
    b = Queues(q, [q, counts], od)
    root = [a, b, inner]
    loaded = roundtrip(root, engines)
    assert graph_diff(root, loaded) is None
    la, lb, linner = loaded
    assert la.q is lb.q is lb.waiting[0]
    assert la.index is lb.index
    assert la.waiting is lb.waiting[1]
    assert la.q[0] is linner is la.index["a"]
    assert la.q.maxlen == 4
