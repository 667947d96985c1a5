"""The object shapes of ``ckpt bench state``, after gVisor's pkg/state benchmarks.

``fields``: a struct-heavy type with many fields of mixed kinds and a nested struct.
``ptr``: chains of references.  ``map``: a dict int -> one shared object.  ``slice``: a
list of one shared object.  Each is 1024 elements.  ``root-list``/``root-dict``: the
root itself is a 1024-element list or dict (the prototype's regression case).
``graph``: a seeded random graph of N nodes with references, interior lists, dicts,
polymorphic fields and values saved through functions.  ``bigint graph``: the same graph
with a handful of ints beyond 64 bits.  ``people``: a random graph written the way
people write dataclasses: quoted forward references inside ``Optional``/``list``/``dict``,
enums, ``Optional`` scalars, the odd None in an ``int`` field, datetimes and UUIDs.
"""

from __future__ import annotations

import datetime as dt
import enum
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from ckpt import state

N = 1024


class Mode(enum.Enum):
    OFF = 0
    READ = 1
    WRITE = 2


@state.savable(name="bench.Inner")
@dataclass(eq=False)
class Inner:
    a: int = 0
    b: int = 0
    c: str = ""
    d: float = 0.0


@state.savable(name="bench.Fields")
@dataclass(eq=False)
class Fields:
    i0: int = 0
    i1: int = 0
    i2: int = 0
    i3: int = 0
    u0: int = 0
    u1: int = 0
    f0: float = 0.0
    f1: float = 0.0
    b0: bool = False
    b1: bool = False
    s0: str = ""
    s1: str = ""
    raw: bytes = b""
    mode: Mode = Mode.OFF
    pair: tuple[int, int] = (0, 0)
    small: list[int] = field(default_factory=list)
    inner: Inner | None = None
    opt: int | None = None


@state.savable(name="bench.Holder")
@dataclass(eq=False)
class Holder:
    items: list[Any] = field(default_factory=list)


@state.savable(name="bench.FieldsHolder")
@dataclass(eq=False)
class FieldsHolder:
    items: list[Fields] = field(default_factory=list)


@state.savable(name="bench.Ptr")
@dataclass(eq=False)
class Ptr:
    value: int = 0
    next: Ptr | None = None


@state.savable(name="bench.Target")
@dataclass(eq=False)
class Target:
    value: int = 0


@state.savable(name="bench.MapHolder")
@dataclass(eq=False)
class MapHolder:
    entries: dict[int, Target] = field(default_factory=dict)


@state.savable(name="bench.SliceHolder")
@dataclass(eq=False)
class SliceHolder:
    entries: list[Target] = field(default_factory=list)


@state.savable(name="bench.Small")
@dataclass(eq=False)
class Small:
    value: int = 0
    name: str = ""


# --- the random graph ----------------------------------------------------------------


def _save_complex(value: complex) -> list[float]:
    return [value.real, value.imag]


def _load_complex(plain: list[float]) -> complex:
    return complex(plain[0], plain[1])


@state.savable(name="bench.GNode")
@dataclass(eq=False)
class GNode:
    ident: int = 0
    name: str = ""
    weight: float = 0.0
    flags: int = 0
    next: GNode | None = None
    kids: list[GNode] = field(default_factory=list)
    attrs: dict[str, int] = field(default_factory=dict)
    peer: Any = None  # polymorphic: a node, a leaf, a hub, or plain data
    phase: complex = state.field(save=_save_complex, load=_load_complex, default=0j)


@state.savable(name="bench.GLeaf")
@dataclass(eq=False)
class GLeaf:
    value: int = 0
    data: bytes = b""
    owner: GNode | None = None


@state.savable(name="bench.GHub")
@dataclass(eq=False)
class GHub:
    ident: int = 0
    members: dict[int, GNode] = field(default_factory=dict)
    items: list[GNode | GLeaf] = field(default_factory=list)
    labels: set[str] = field(default_factory=set)


@state.savable(name="bench.GraphRoot")
@dataclass(eq=False)
class GraphRoot:
    hubs: list[GHub] = field(default_factory=list)
    nodes: list[GNode] = field(default_factory=list)
    leaves: list[GLeaf] = field(default_factory=list)


def make_fields() -> FieldsHolder:
    rng = random.Random(1)
    return FieldsHolder(
        [
            Fields(
                i0=i,
                i1=-i,
                i2=rng.randrange(1 << 20),
                i3=rng.randrange(1 << 40),
                u0=i * 7,
                u1=0,
                f0=i / 3,
                f1=0.0,
                b0=bool(i & 1),
                b1=False,
                s0=f"field-{i}",
                s1="",
                raw=bytes([i & 0xFF]) * 4,
                mode=Mode(i % 3),
                pair=(i, i + 1),
                small=[i, i + 1, i + 2],
                inner=Inner(i, i * 2, f"inner-{i % 16}", i * 0.5),
                opt=i if i % 2 else None,
            )
            for i in range(N)
        ]
    )


def make_ptr() -> Ptr:
    head = None
    for i in range(N):
        head = Ptr(i, head)
    return head


def make_map() -> MapHolder:
    target = Target(7)
    return MapHolder({i: target for i in range(N)})


def make_slice() -> SliceHolder:
    target = Target(7)
    return SliceHolder([target] * N)


def make_root_list() -> list:
    return [Small(i, f"s{i % 32}") for i in range(N)]


def make_root_dict() -> dict:
    return {i: Small(i, f"s{i % 32}") for i in range(N)}


def make_graph(nodes: int = 20000, seed: int = 42) -> GraphRoot:
    """A seeded random graph: ~80% GNode, ~15% GLeaf, ~5% GHub, all cross-linked."""
    rng = random.Random(seed)
    n_hubs = max(1, nodes // 20)
    n_leaves = max(1, nodes * 3 // 20)
    n_nodes = nodes - n_hubs - n_leaves
    gnodes = [
        GNode(
            ident=i,
            name=f"node-{i % 500}",
            weight=rng.random(),
            flags=rng.choice((0, 0, 1, 2, 4)),
            phase=complex(i, -i) if i % 7 == 0 else 0j,
        )
        for i in range(n_nodes)
    ]
    leaves = [
        GLeaf(value=rng.randrange(1 << 30), data=rng.randbytes(rng.choice((0, 8, 16))))
        for _ in range(n_leaves)
    ]
    hubs = [
        GHub(ident=i, labels={f"l{rng.randrange(10)}" for _ in range(rng.randrange(3))})
        for i in range(n_hubs)
    ]
    for node in gnodes:
        node.next = rng.choice(gnodes) if rng.random() < 0.8 else None
        node.kids = [rng.choice(gnodes) for _ in range(rng.choice((0, 0, 1, 2, 3, 4)))]
        if rng.random() < 0.3:
            node.attrs = {f"k{j}": rng.randrange(100) for j in range(rng.randrange(1, 4))}
        pick = rng.random()
        if pick < 0.3:
            node.peer = rng.choice(gnodes)
        elif pick < 0.45:
            node.peer = rng.choice(leaves)
        elif pick < 0.5:
            node.peer = rng.choice(hubs)
        elif pick < 0.6:
            node.peer = (rng.randrange(100), f"p{rng.randrange(10)}")
        elif pick < 0.65:
            node.peer = [rng.randrange(100) for _ in range(3)]
    for leaf in leaves:
        leaf.owner = rng.choice(gnodes)
    for hub in hubs:
        hub.members = {j: rng.choice(gnodes) for j in range(rng.randrange(1, 12))}
        hub.items = [
            rng.choice(leaves) if rng.random() < 0.5 else rng.choice(gnodes)
            for _ in range(rng.randrange(1, 12))
        ]
    rng.shuffle(gnodes)
    return GraphRoot(hubs=hubs, nodes=gnodes, leaves=leaves)


def make_bigint_graph(nodes: int = 20000, seed: int = 42, count: int = 5) -> GraphRoot:
    """``make_graph`` with ``count`` node flags beyond 64 bits (spread over the nodes)."""
    root = make_graph(nodes, seed)
    step = max(1, len(root.nodes) // count)
    for i in range(0, step * count, step):
        root.nodes[i].flags = (1 << 70) + i
    return root


# --- the "people" graph: dataclasses as people write them ---------------------------


class Status(enum.Enum):
    ACTIVE = "active"
    IDLE = "idle"
    DONE = "done"


class Priority(enum.IntEnum):
    LOW = 0
    NORMAL = 1
    HIGH = 2


@state.savable(name="bench.PUser")
@dataclass(eq=False)
class PUser:
    uid: int
    name: str
    email: Optional[str] = None  # noqa: UP045
    manager: Optional["PUser"] = None  # noqa: UP037, UP045
    tasks: list["PTask"] = field(default_factory=list)  # noqa: UP037
    joined: dt.datetime = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    key: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))


@state.savable(name="bench.PTask")
@dataclass(eq=False)
class PTask:
    tid: int
    title: str
    status: Status = Status.IDLE
    priority: Priority = Priority.NORMAL
    owner: Optional["PUser"] = None  # noqa: UP037, UP045
    parent: Optional["PTask"] = None  # noqa: UP037, UP045
    children: list["PTask"] = field(default_factory=list)  # noqa: UP037
    links: dict[str, "PTask"] = field(default_factory=dict)  # noqa: UP037
    estimate: Optional[float] = None  # noqa: UP045
    retries: Optional[int] = None  # noqa: UP045
    exit_code: int = 0  # now and then None: "not finished yet"
    created: dt.datetime = dt.datetime(2020, 1, 1)
    due: Optional[dt.date] = None  # noqa: UP045
    ref: Optional[uuid.UUID] = None  # noqa: UP045


@state.savable(name="bench.PRoot")
@dataclass(eq=False)
class PRoot:
    users: list[PUser] = field(default_factory=list)
    tasks: list[PTask] = field(default_factory=list)


def make_people(nodes: int = 20000, seed: int = 7) -> PRoot:
    """A seeded random graph of ~10% users and ~90% tasks, cross-linked."""
    rng = random.Random(seed)
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    n_users = max(1, nodes // 10)
    users = [
        PUser(
            uid=i,
            name=f"user{i}",
            email=f"u{i}@example.org" if rng.random() < 0.7 else None,
            joined=base - dt.timedelta(days=rng.randrange(3000)),
            key=uuid.UUID(int=rng.getrandbits(128)),
        )
        for i in range(n_users)
    ]
    for u in users:
        u.manager = rng.choice(users) if rng.random() < 0.6 else None
    tasks = []
    for i in range(nodes - n_users):
        t = PTask(
            tid=i,
            title=f"task {i % 1000}",
            status=rng.choice(list(Status)),
            priority=rng.choice(list(Priority)),
            owner=rng.choice(users) if rng.random() < 0.9 else None,
            estimate=rng.random() * 10 if rng.random() < 0.5 else None,
            retries=rng.randrange(5) if rng.random() < 0.3 else None,
            exit_code=None if rng.random() < 0.02 else rng.choice((0, 0, 0, 1, 2)),
            created=base + dt.timedelta(seconds=rng.randrange(10**7)),
            due=dt.date(2026, 1 + rng.randrange(12), 1) if rng.random() < 0.3 else None,
            ref=uuid.UUID(int=rng.getrandbits(128)) if rng.random() < 0.4 else None,
        )
        tasks.append(t)
        if t.owner is not None and rng.random() < 0.5:
            t.owner.tasks.append(t)
    for t in tasks:
        if rng.random() < 0.7:
            t.parent = rng.choice(tasks)
            t.parent.children.append(t)
        if rng.random() < 0.2:
            t.links = {f"see{j}": rng.choice(tasks) for j in range(rng.randrange(1, 3))}
    rng.shuffle(tasks)
    return PRoot(users=users, tasks=tasks)


SHAPES = {
    "fields": make_fields,
    "ptr": make_ptr,
    "map": make_map,
    "slice": make_slice,
    "root-list": make_root_list,
    "root-dict": make_root_dict,
}
