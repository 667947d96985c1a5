"""The native engine writes and reads datetime, date, timedelta and UUID fields in C
(``OP_VALUE``/``L_VALUE``): the bytes stay typed's, every value comes back exactly, and
a payload C does not take (another time zone, a value out of range, a hostile item)
gets typed's own value or typed's own StateError."""

from __future__ import annotations

import datetime as dt
import uuid
import zoneinfo
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.state import wire

from .requires import requires_native

pytestmark = requires_native


@state.savable(name="tests.native_values.Stamp")
@dataclass(eq=False)
class Stamp:
    when: dt.datetime = dt.datetime(2000, 1, 1)
    maybe: Optional[dt.datetime] = None  # noqa: UP045
    day: dt.date = dt.date(2000, 1, 1)
    span: dt.timedelta = dt.timedelta()
    key: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))
    maybe_key: uuid.UUID | None = None


FIELDS = ("when", "maybe", "day", "span", "key", "maybe_key")
ZONES = [
    None,
    dt.UTC,
    dt.timezone(dt.timedelta(hours=2)),
    dt.timezone(dt.timedelta(0), "Z"),  # a named zero offset: not the UTC singleton
    zoneinfo.ZoneInfo("Europe/Paris"),
]

datetimes = st.builds(
    lambda d, tz, fold: d.replace(tzinfo=tz, fold=fold),
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59)),
    st.sampled_from(ZONES),
    st.integers(0, 1),
)
uuids = st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
stamps = st.builds(
    Stamp,
    when=datetimes,
    maybe=st.none() | datetimes,
    day=st.dates(),
    span=st.timedeltas(),
    key=uuids,
    maybe_key=st.none() | uuids,
)


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    assert a == b
    if isinstance(a, dt.datetime):
        assert a.fold == b.fold
        assert a.tzinfo is b.tzinfo or a.tzinfo == b.tzinfo
        assert a.tzinfo is not dt.UTC or b.tzinfo is dt.UTC
    if isinstance(a, uuid.UUID):
        assert a.is_safe is b.is_safe and hash(a) == hash(b) and str(a) == str(b)
        assert not hasattr(a, "__dict__")


@settings(max_examples=150, deadline=None)
@given(st.lists(stamps, min_size=1, max_size=6))
def test_native_writes_typed_bytes_and_reads_every_value_back(objs: list[Stamp]) -> None:
    data = state.dumps(objs, engine="native")
    assert data == state.dumps(objs, engine="typed")
    for engine in ("native", "typed"):
        back = state.loads(data, engine=engine)
        for a, b in zip(back, objs, strict=True):
            for name in FIELDS:
                _same(getattr(a, name), getattr(b, name))


def test_values_of_other_types_are_escaped_exactly() -> None:
    """A subclass, a date in a datetime field, a str in a UUID field: typed's escape."""

    class Later(dt.datetime):
        pass

    state.register_value(
        Later,
        name="tests.native_values.Later",
        to_plain=lambda v: [v.isoformat()],
        from_plain=lambda p: Later.fromisoformat(p[0]),
    )
    odd = Stamp(when=Later(2020, 5, 6), maybe=dt.date(2020, 1, 1), day=dt.datetime(2020, 1, 1, 5))
    odd.key = "not a uuid"  # type: ignore[assignment]
    odd.span = 3  # type: ignore[assignment]
    data = state.dumps([odd], engine="native")
    assert data == state.dumps([odd], engine="typed")
    (back,) = state.loads(data, engine="native")
    for name in FIELDS:
        _same(getattr(back, name), getattr(odd, name))


# -- hostile payloads in the compact slots -------------------------------------------


def _payload_with(field: str, value: Any) -> bytes:
    """A checksum-valid stream of one Stamp whose ``field`` slot holds ``value``."""
    data = state.dumps(Stamp(), engine="typed")
    payload = wire.unframe(data)
    index = FIELDS.index(field)
    rows = payload[wire.ROWS]
    (row_set,) = [r for r in rows if isinstance(r, list) and r and len(r[0]) == len(FIELDS)]
    row_set[0][index] = value
    return wire.frame(payload)


def _outcome(data: bytes, engine: str) -> tuple[str, Any]:
    try:
        (obj,) = [state.loads(data, engine=engine)]
    except state.StateError as exc:  # the message without its "<engine> load failed: "
        return "error", str(exc).removeprefix(f"{engine} load failed: ")
    return "value", obj


HOSTILE = {
    "when": [
        [2026, 13, 1, 0, 0, 0, 0, 0, None],  # month out of range
        [0, 1, 1, 0, 0, 0, 0, 0, None],  # year 0
        [2026, 1, 1, 0, 0, 0, 0, 2, None],  # fold 2
        [2026, 1, 1, 0, 0, 0, -1, 0, None],
        [2**31, 1, 1, 0, 0, 0, 0, 0, None],  # beyond a C int
        [2**63 - 1, 1, 1, 0, 0, 0, 0, 0, None],
        [2026, 1, 1, 0, 0, 0, 0, True, None],  # a bool is not an int here
        [2026, 1.5, 1, 0, 0, 0, 0, 0, None],
        [2026, 1, 1, 0, 0, 0, 0, 0],  # 8 items
        [2026, 1, 1, 0, 0, 0, 0, 0, None, None],  # 10 items
        [2026, 1, 1, 0, 0, 0, 0, 0, ["utc", 1]],
        [2026, 1, 1, 0, 0, 0, 0, 0, ["UTC"]],
        [2026, 1, 1, 0, 0, 0, 0, 0, ["fixed", 7200000000, None]],
        [2026, 1, 1, 0, 0, 0, 0, 0, ["zone", "No/Such_Zone"]],
        None,
        [],
        "2026-01-01",
        {9: ["datetime", [2026, 1, 1, 0, 0, 0, 0, 0, None]]},  # an escape, version 2
    ],
    "maybe": [None, [2026, 2, 30, 0, 0, 0, 0, 0, None], [1, 1, 1, 0, 0, 0, 0, 0, ["utc"]]],
    "day": [[2026, 2, 30], [2026, 1], [10**10, 1, 1], [-1, 1, 1], None, [2026, 1, 1, 1]],
    "span": [
        [10**10, 0, 0],
        [999999999, 86399, 999999],
        [-999999999, 0, 0],
        [1000000000, 0, 0],  # past timedelta.max: typed's OverflowError as StateError
        [0, 86400, 0],  # not normalised: typed normalises it
        [0, -1, 0],
        [0, 0, 10**6],
        [2**31 - 1, 2**31 - 1, 2**31 - 1],
        [0, 0],
    ],
    "key": [[b"short"], [b"x" * 17], [b"\xff" * 16], ["0" * 32], [b"\x00" * 16, 1], None, []],
    "maybe_key": [None, [b"\x01" * 16], [bytearray(16)], [b""]],
}


@pytest.mark.parametrize(
    ("field", "value"), [(f, v) for f, values in HOSTILE.items() for v in values]
)
def test_a_payload_c_does_not_take_gets_typed_outcome(field: str, value: Any) -> None:
    data = _payload_with(field, value)
    native, typed = _outcome(data, "native"), _outcome(data, "typed")
    assert native[0] == typed[0], (native, typed)
    if native[0] == "error":
        assert native[1] == typed[1]
    else:
        for name in FIELDS:
            _same(getattr(native[1], name), getattr(typed[1], name))
