"""The native load remembers resolved type tables by their bytes (``type_tables``): a
table met again is not matched again, but a changed registry is never served from the
cache, and each stream's own object counts are still checked."""

from __future__ import annotations

import dataclasses
import struct
import zlib

import msgspec
import pytest

from ckpt import state
from ckpt.state import graph, native, type_tables, wire

from .models import Color, Everything, Leaf

pytestmark = pytest.mark.skipif(
    not (state.native_status()[0] and native.reads_bytes()),
    reason=f"native byte reader: {state.native_status()[1]}",
)


def framed(payload: list) -> bytes:
    body = msgspec.msgpack.encode(payload)
    header = struct.pack("<4sBIQ", wire.MAGIC, wire.FORMAT_VERSION, zlib.crc32(body), len(body))
    return header + body


def test_a_table_met_again_is_not_matched_again(monkeypatch) -> None:
    data = state.dumps([Everything(color=Color.BLUE), Leaf(3)], engine="typed")
    first = state.loads(data, engine="native")
    calls = []
    real = graph.resolve_types
    monkeypatch.setattr(graph, "resolve_types", lambda *a: calls.append(a) or real(*a))
    again = state.loads(data, engine="native")
    assert calls == []
    assert again[0].color is Color.BLUE and again[1].value == 3
    assert first[1].value == 3


def test_a_class_registered_again_is_loaded_as_the_new_class() -> None:
    def define(extra: bool) -> type:
        @dataclasses.dataclass(eq=False)
        class Versioned:
            n: int = 0
            if extra:
                added: str = "new default"

        return state.savable(name="tests.type_tables.Versioned")(Versioned)

    old = define(False)
    data = state.dumps(old(5), engine="typed")
    assert type(state.loads(data, engine="native")) is old
    new = define(True)  # same stream name: the registry now maps it to `new`
    loaded = state.loads(data, engine="native")
    assert type(loaded) is new
    assert (loaded.n, loaded.added) == (5, "new default")


def test_each_stream_has_its_counts_checked_even_when_its_table_is_known() -> None:
    data = state.dumps(Everything(anything=Color.GREEN), engine="typed")  # lists the enum
    state.loads(data, engine="native")  # remembered
    payload = wire.unframe(data)
    enum_t = next(t for t, e in enumerate(payload[wire.TYPES]) if e[2] == ["enum"])
    payload[wire.TYPE_SEQ].append(enum_t)  # claims an object of an enum type ...
    payload[wire.ROWS][enum_t] = [[]]  # ... and gives it a row
    hostile = framed(payload)
    for engine in ("typed", "native"):
        with pytest.raises(state.StateError, match="cannot have objects"):
            state.loads(hostile, engine=engine)


def test_a_writable_buffer_loads() -> None:
    data = bytearray(state.dumps(Leaf(9), engine="typed"))
    assert state.loads(data, engine="native").value == 9
    assert state.loads(data, engine="native").value == 9


def test_the_cache_keeps_a_bounded_number_of_tables() -> None:
    for i in range(type_tables.MAX_TABLES + 5):
        cls = dataclasses.make_dataclass(f"Many{i}", [("n", int, 0)], eq=False)
        state.savable(name=f"tests.type_tables.Many{i}")(cls)
        assert state.loads(state.dumps(cls(i), engine="typed"), engine="native").n == i
    assert len(type_tables._tables) <= type_tables.MAX_TABLES
