"""Savable classes shared by the state tests, declared at module level like real code.

Every class is registered under an explicit ``tests.state.*`` name, so the names streams
record do not depend on how pytest imports this package.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import uuid
from dataclasses import dataclass, field
from typing import Any

from ckpt import state


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2
    HUGE = 2**40


class Mode(enum.StrEnum):
    READ = "r"
    WRITE = "w"


@state.savable(name="tests.state.Leaf")
@dataclass(eq=False)
class Leaf:
    value: int = 0


@state.savable(name="tests.state.SLeaf")
@dataclass(eq=False, slots=True)
class SLeaf:
    value: int = 0
    label: str = ""


@state.savable(name="tests.state.PlainOverSlots")
@dataclass(eq=False)
class PlainOverSlots(SLeaf):
    """A plain (``__dict__``) class whose base keeps its fields in slots."""

    note: str = ""


@state.savable(name="tests.state.Shape")
@dataclass(eq=False)
class Shape:
    name: str = ""


@state.savable(name="tests.state.Circle")
@dataclass(eq=False)
class Circle(Shape):
    radius: float = 0.0


@state.savable(name="tests.state.Square")
@dataclass(eq=False)
class Square(Shape):
    side: int = 0
    color: Color = Color.RED


@state.savable(name="tests.state.SlotsSquare")
@dataclass(eq=False, slots=True)
class SlotsSquare(Shape):
    """A slots class whose base is a plain (``__dict__``) dataclass: fields live in both."""

    side: int = 0
    color: Color = Color.RED


@state.savable(name="tests.state.Node")
@dataclass(eq=False)
class Node:
    """A chain/tree node: a typed reference, a typed list of references, a polymorphic slot."""

    ident: int = 0
    label: str = ""
    next: Node | None = None
    kids: list[Node] = field(default_factory=list)
    payload: Any = None


@state.savable(name="tests.state.SNode")
@dataclass(eq=False, slots=True)
class SNode:
    ident: int = 0
    next: SNode | None = None
    link: object = None


@state.savable(name="tests.state.Pair")
@dataclass(eq=False)
class Pair:
    """Two polymorphic slots, for identity tests across any kind of value."""

    x: object = None
    y: object = None


@state.savable(name="tests.state.RefPair")
@dataclass(eq=False, slots=True)
class RefPair:
    """Two typed reference slots."""

    x: Leaf | None = None
    y: Leaf | None = None


@state.savable(name="tests.state.Containers")
@dataclass(eq=False)
class Containers:
    """Typed container fields, for sharing tests (defaults chosen non-empty on purpose)."""

    items: list[int] = field(default_factory=lambda: [1])
    table: dict[str, int] = field(default_factory=dict)
    members: set[int] = field(default_factory=set)
    buf: bytearray = field(default_factory=bytearray)
    nested: list[list[int]] = field(default_factory=list)


@state.savable(name="tests.state.Everything")
@dataclass(eq=False)
class Everything:
    """One object with a field of every kind, for whole-object round trips."""

    flag: bool = False
    small: int = 0
    big: int = 2**80
    ratio: float = 0.5
    text: str = ""
    blob: bytes = b""
    buf: bytearray = field(default_factory=bytearray)
    maybe: int | None = None
    nums: list[int] = field(default_factory=list)
    fixed: tuple[int, str, bytes] = (0, "", b"")
    var: tuple[int, ...] = ()
    table: dict[str, int] = field(default_factory=dict)
    by_tuple: dict[tuple[int, str], float] = field(default_factory=dict)
    by_obj: dict[Leaf, str] = field(default_factory=dict)
    members: set[str] = field(default_factory=set)
    frozen: frozenset[int] = frozenset()
    color: Color = Color.RED
    level: Level = Level.LOW
    mode: Mode = Mode.READ
    leaf: Leaf | None = None
    leaves: list[Leaf] = field(default_factory=list)
    shape: Shape | None = None
    either: Circle | Square | None = None
    anything: object = None
    whatever: Any = None


@state.savable(name="tests.state.Stamped")
@dataclass(eq=False)
class Stamped:
    """Fields annotated with stdlib value types (kind ``value:<codec>``)."""

    when: dt.datetime = dt.datetime(2000, 1, 1)
    key: uuid.UUID | None = None
    amount: decimal.Decimal = decimal.Decimal(0)
    count: int = 0


@state.savable(name="tests.state.Calendar")
@dataclass(eq=False)
class Calendar:
    """The kinds the native core reads in C beyond scalars and references: datetimes
    with no zone or UTC, dates, timedeltas, UUIDs, and lists of scalar tuples."""

    start: dt.datetime = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    end: dt.datetime | None = None
    day: dt.date = dt.date(2000, 1, 1)
    span: dt.timedelta = dt.timedelta()
    key: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))
    marks: list[tuple[int, int]] = field(default_factory=list)
