"""Containers a getter builds afresh for each read: every object's own values come back.

Each engine's container memo knows a container by its address.  A container made for
one read is freed once written, and the next object's, allocated at the same address,
was taken for it: the second object loaded the first one's value, or None.  Each engine
now keeps what its memo records alive until the save ends (and the compiled engines
record no container that only its field holds)."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

import pytest

from ckpt import state

from .conftest import ENGINES


@state.savable(name="tests.state.fresh.Fresh")
@dataclass(eq=False)
class Fresh:
    n: int = 0
    anything: Any = None
    items: list[int] = field(default_factory=list)
    nested: list[list[int]] = field(default_factory=list)
    labels: set[str] = field(default_factory=set)
    table: dict[str, int] = field(default_factory=dict)
    raw: bytearray = field(default_factory=bytearray)
    queue: collections.deque = field(default_factory=collections.deque)


def _fresh(make: Any) -> property:
    return property(make, lambda self, value: None)


# Every read builds new containers, nested ones too.
Fresh.anything = _fresh(lambda self: {"n": self.n, "l": [self.n], "s": {self.n}})
Fresh.items = _fresh(lambda self: [self.n, self.n + 1])
Fresh.nested = _fresh(lambda self: [[self.n], [self.n, self.n]])
Fresh.labels = _fresh(lambda self: {f"n{self.n}"})
Fresh.table = _fresh(lambda self: {"n": self.n})
Fresh.raw = _fresh(lambda self: bytearray([self.n % 256]))
Fresh.queue = _fresh(lambda self: collections.deque([self.n]))

FIELDS = ("anything", "items", "nested", "labels", "table", "raw", "queue")


def _expected(n: int) -> dict[str, Any]:
    return {
        "anything": {"n": n, "l": [n], "s": {n}},
        "items": [n, n + 1],
        "nested": [[n], [n, n]],
        "labels": {f"n{n}"},
        "table": {"n": n},
        "raw": bytearray([n % 256]),
        "queue": collections.deque([n]),
    }


@pytest.mark.parametrize("engine", ENGINES)
def test_each_object_loads_its_own_fresh_containers(engine: str) -> None:
    roots = [Fresh(i) for i in range(80)]
    loaded = state.loads(state.dumps(roots, engine=engine), engine=engine)
    for i, obj in enumerate(loaded):
        got = {name: vars(obj)[name] for name in FIELDS}
        assert got == _expected(i), f"object {i}"


def test_typed_and_native_write_the_same_stream() -> None:
    if "native" not in ENGINES:
        pytest.skip(f"native engine: {state.native_status()[1]}")
    roots = [Fresh(i) for i in range(80)]
    assert state.dumps(roots, engine="native") == state.dumps(roots, engine="typed")
