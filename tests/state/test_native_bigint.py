"""Ints beyond 64 bits in scalar slots, written and read by the native core in C.

A compact int slot holding an int MessagePack cannot (below -2**63 or from 2**64) is
escaped as ``{T_SLOT: {T_BIGINT: "decimal"}}`` and its type listed as holding escapes;
an ``Any`` slot writes ``{T_BIGINT: "decimal"}``.  The native core writes both and reads
the slot escape back itself, with no call into typed's generated code: the bytes stay
typed's, every value comes back exactly, and a damaged escape gets typed's own value or
typed's own StateError.
"""

from __future__ import annotations

import collections
import itertools
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state
from ckpt.state import native, wire

from .requires import requires_native
from .test_native_damage import body_of, framed

pytestmark = requires_native


@state.savable(name="tests.native_bigint.Big")
@dataclass(eq=False)
class Big:
    n: int = 0
    maybe: Optional[int] = None  # noqa: UP045
    any: Any = None
    peer: Optional["Big"] = None  # noqa: UP037, UP045


EDGES = [0, 1, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**40, -(10**60)]
big_ints = st.one_of(
    st.sampled_from(EDGES),
    st.integers(-(2**200), 2**200),
    st.integers(-(2**64), 2**64),
)


@contextmanager
def python_slots() -> Iterator[collections.Counter]:
    """Count the calls into typed's generated per-field code (save and load slots)."""
    calls: collections.Counter = collections.Counter()
    save, load = native._LazySlot.__call__, native._LazyLoadSlot.__call__

    def counted_save(self: Any, obj: Any, ctx: Any) -> Any:
        calls["save " + self.spec.name] += 1
        return save(self, obj, ctx)

    def counted_load(self: Any, raw: Any, ctx: Any) -> Any:
        calls["load " + self.spec.name] += 1
        return load(self, raw, ctx)

    native._LazySlot.__call__ = counted_save  # type: ignore[method-assign]
    native._LazyLoadSlot.__call__ = counted_load  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        native._LazySlot.__call__ = save  # type: ignore[method-assign]
        native._LazyLoadSlot.__call__ = load  # type: ignore[method-assign]


def _check(objs: list[Big]) -> bytes:
    data = state.dumps(objs, engine="native")
    assert data == state.dumps(objs, engine="typed")
    for engine in ("native", "typed"):
        back = state.loads(data, engine=engine)
        for a, b in zip(back, objs, strict=True):
            for name in ("n", "maybe", "any"):
                x, y = getattr(a, name), getattr(b, name)
                assert type(x) is type(y) and x == y, (engine, name, x, y)
    return data


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(big_ints, st.none() | big_ints, st.none() | big_ints), max_size=8))
def test_native_writes_typed_bytes_and_reads_every_int_back(rows: list) -> None:
    objs = [Big(n, m, a) for n, m, a in rows]
    for a, b in itertools.pairwise(objs):
        a.peer = b
    _check(objs)


def test_big_ints_take_no_python_slot() -> None:
    objs = [Big(n=v, maybe=-v, any=v) for v in EDGES]
    with python_slots() as calls:
        data = _check(objs)
    assert not calls, calls
    assert b"\x81\x08\x81\x07" in data  # the slot escape is there to be read


def test_a_big_int_in_another_slot_kind_is_typed_s_escape() -> None:
    """A big int in a list[int] or a str slot: typed's slot function, the same bytes."""

    @state.savable(name="tests.native_bigint.Other")
    @dataclass(eq=False)
    class Other:
        items: list[int]
        name: str = ""

    objs = [Other([1, 2**70]), Other([], 2**80)]  # type: ignore[arg-type]
    data = state.dumps(objs, engine="native")
    assert data == state.dumps(objs, engine="typed")
    back = state.loads(data, engine="native")
    assert [(o.items, o.name) for o in back] == [([1, 2**70], ""), ([], 2**80)]


def test_an_int_str_refuses_fails_as_typed_fails() -> None:
    limit = sys.get_int_max_str_digits()
    if limit == 0:
        pytest.skip("this interpreter has no int string limit")
    huge = 10 ** (limit + 5)
    said = []
    for engine in ("typed", "native"):
        with pytest.raises(state.StateError, match=r"ValueError.*digits") as caught:
            state.dumps([Big(n=huge)], engine=engine)
        said.append(str(caught.value).removeprefix(f"{engine} save failed: "))
    assert said[0] == said[1]


# -- damaged escapes ------------------------------------------------------------------


def _with_slot(value: Any, escaped: bool = True) -> bytes:
    """A checksum-valid stream of one Big whose ``n`` slot holds ``value``; ``escaped``:
    the type listed as holding escapes, as a stream with a real escape lists it."""
    data = state.dumps([Big(n=2**70 if escaped else 5)], engine="typed")
    payload = wire.unframe(data)
    rows = payload[wire.ROWS]
    (row_set,) = [r for r in rows if isinstance(r, list) and r and len(r[0]) == 4]
    row_set[0][0] = value
    return wire.frame(payload)


def _outcome(data: bytes, engine: str) -> tuple[str, Any]:
    try:
        (obj,) = state.loads(data, engine=engine)
    except state.StateError as exc:
        return "error", str(exc).removeprefix(f"{engine} load failed: ")
    except ValueError as exc:
        return "value error", str(exc)
    return "value", (type(obj.n), obj.n)


@pytest.mark.parametrize(
    "value",
    [
        {8: {7: "12345678901234567890123"}},
        {8: {7: "-1"}},
        {8: {7: " 42 "}},  # int() takes surrounding spaces
        {8: {7: "1_000"}},  # and underscores
        {8: {7: "٣"}},  # and other decimal digits
        {8: {7: "x12"}},
        {8: {7: ""}},
        {8: {7: 12}},
        {8: {7: b"12"}},
        {8: {7: None}},
        {8: {7: ["1"]}},
        {8: {7: "1" * 5000}},  # beyond int()'s digit limit
        {8: 5},
        {8: {6: "1"}},
        {7: "99"},
    ],
)
def test_a_damaged_escape_gets_typed_s_outcome(value: Any) -> None:
    data = _with_slot(value)
    assert _outcome(data, "native") == _outcome(data, "typed")


def test_an_escape_in_a_type_not_listed_as_escaped_is_typed_s_business() -> None:
    """Only a type the stream lists as holding escapes has its maps read as escapes."""
    data = _with_slot({8: {7: "123"}}, escaped=False)
    want = _outcome(data, "typed")
    assert want != ("value", (int, 123))
    assert _outcome(data, "native") == want


def test_a_truncated_escape_fails_as_typed_fails() -> None:
    data = state.dumps([Big(n=-(10**30), maybe=2**65)], engine="typed")
    body = body_of(data)
    for cut in range(len(body)):
        want, got = _outcome(framed(body[:cut]), "typed"), _outcome(framed(body[:cut]), "native")
        assert got[0] == want[0] == "error", (cut, want, got)
