"""Seed inputs made at start from real streams and images the engines write.

Generated, not committed: whenever the wire or image format changes, the seeds follow.
Small graphs on purpose (a few hundred bytes each): libFuzzer mutates short inputs far
faster, and each seed still holds every kind of value, sharing and a cycle.
"""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ckpt import state, statefile
from ckpt.statefile.format import CHECKPOINT_IMG, PAGE_SIZE, PAGES_IMG, PAGES_META_IMG

from .models import STATE_DATA, models
from .targets import KEY, statefile_pack

Color, Containers, Everything, Leaf = (
    models.Color,
    models.Containers,
    models.Everything,
    models.Leaf,
)
Level, Mode, Node, Pair = models.Level, models.Mode, models.Node, models.Pair
RefPair, SLeaf, SNode, Stamped = models.RefPair, models.SLeaf, models.SNode, models.Stamped
Calendar = models.Calendar
V1_STREAMS = STATE_DATA


def graphs() -> Iterator[tuple[str, Any]]:
    """Small graphs that between them reach every decoder path the engines have."""
    shared = Leaf(3)
    head = Node(1, "head", kids=[Node(2, payload=shared)], payload={"k": (1, 2.5), 9: [shared]})
    head.next = head.kids[0]
    head.kids[0].next = head
    yield "nodes", [head, Pair(shared, {1, 2}), Pair(collections.deque([1, shared], 4), None)]
    yield (
        "everything",
        Everything(
            flag=True,
            small=-4,
            text="ü",
            blob=b"\x00\xff",
            buf=bytearray(b"ab"),
            maybe=7,
            nums=[1, 2, 3],
            fixed=(1, "a", b"b"),
            var=(4, 5),
            table={"a": 1},
            by_tuple={(1, "x"): 0.5},
            by_obj={shared: "s"},
            members={"m"},
            frozen=frozenset({9}),
            color=Color.BLUE,
            level=Level.HUGE,
            mode=Mode.WRITE,
            leaf=shared,
            leaves=[shared, Leaf(4)],
            anything=[1, (2,), {3}, frozenset({4}), {"d": b"e"}, 2**70, bytearray(b"f")],
            whatever=Color.GREEN,
        ),
    )
    items = [1, 2]
    yield (
        "shared-containers",
        [Containers(items=items), Containers(items=items, buf=bytearray(b"x"))],
    )
    misfits = Everything(small=None, nums=[1, None], leaf=Leaf(1), text=5)  # type: ignore[arg-type]
    yield "escapes", misfits
    s1 = SNode(1)
    s1.next = SNode(2, s1, link=SLeaf(5, "l"))
    yield "slots-cycle", s1
    yield "refpair", RefPair(shared, shared)
    yield (
        "values",
        Stamped(
            dt.datetime(2026, 3, 4, 5, 6, 7, 8, tzinfo=dt.timezone(dt.timedelta(hours=2), "X")),
            uuid.UUID(int=7),
            decimal.Decimal("-1.50"),
            count=None,  # type: ignore[arg-type]
        ),
    )
    yield (
        "calendar",  # values the native core reads in C (UTC, no zone, a tuple list)
        Calendar(
            dt.datetime(2026, 3, 4, 5, 6, 7, 8, tzinfo=dt.UTC),
            dt.datetime(1999, 12, 31, fold=1),
            dt.date(2026, 2, 28),
            dt.timedelta(days=-3, seconds=7),
            uuid.UUID(int=2**127 + 5),
            [(1, 2), (-3, 2**40)],
        ),
    )
    yield (
        "dyn-values",
        Pair(
            [
                dt.date(2026, 1, 2),
                dt.time(1, 2, 3, tzinfo=dt.UTC),
                dt.timedelta(days=1),
                complex(1, 2),
                range(1, 9, 2),
                collections.OrderedDict(a=1),
                collections.Counter("aab"),
                collections.defaultdict(list, {1: [2]}),
            ],
            {"nested": {"deep": [[[]]]}},
        ),
    )
    chain = Node(0)
    tail = chain
    for i in range(1, 30):
        tail.next = Node(i)
        tail = tail.next
    yield "chain", chain


def state_seeds() -> dict[str, bytes]:
    """``state`` inputs: each graph's payload (framed by the target), each engine's
    stream whole, and the committed version-1 streams."""
    seeds: dict[str, bytes] = {}
    for name, root in graphs():
        for engine in state.ENGINES:
            stream = state.dumps(root, engine=engine)
            seeds[f"{name}-{engine}-payload"] = b"\x01" + stream[state.wire.HEADER_SIZE :]
            if name == "nodes":
                seeds[f"{name}-{engine}-stream"] = b"\x00" + stream
    for path in sorted(V1_STREAMS.glob("*.ckst")):
        seeds[f"v1-{path.stem}"] = b"\x00" + path.read_bytes()
    return seeds


def _pages() -> list[tuple[int, bytes]]:
    """Two stored runs (one compressible, one not), zero pages between and after."""
    noise = bytes((i * 7919 + 13) % 251 for i in range(PAGE_SIZE))
    return [
        (0, b"A" * PAGE_SIZE),
        (1, noise),
        (2, bytes(PAGE_SIZE)),
        (3, bytes(PAGE_SIZE)),
        (5, noise[::-1]),
        (6, bytes(PAGE_SIZE)),
    ]


def statefile_seeds() -> dict[str, bytes]:
    """``statefile`` inputs: small images of every compression, keyed and not, with
    several chunks (a 256-byte chunk size), pages and metadata."""
    seeds: dict[str, bytes] = {}
    root = dict(graphs())["nodes"]
    with tempfile.TemporaryDirectory(prefix="ckpt-fuzz-seeds-") as tmp:
        for compression in statefile.COMPRESSIONS:
            for keyed in (False, True):
                for chunk_size, pages in ((256, _pages()), (1 << 20, [])):
                    name = f"{compression}-{'keyed' if keyed else 'crc'}-{chunk_size}"
                    d = Path(tmp) / name
                    with statefile.ImageWriter(
                        d,
                        compression=compression,
                        key=KEY if keyed else None,
                        chunk_size=chunk_size,
                        metadata={"workload": "fuzz"},
                    ) as img:
                        result = state.save(root, img.state_file, engine="typed")
                        img.note_save(result, "typed")
                        img.write_pages(pages)
                    seeds[name] = statefile_pack(
                        (d / CHECKPOINT_IMG).read_bytes(),
                        (d / PAGES_META_IMG).read_bytes(),
                        (d / PAGES_IMG).read_bytes(),
                    )
    return seeds


SEEDS = {"state": state_seeds, "statefile": statefile_seeds}


def write_seeds(target: str, directory: Path) -> int:
    """Write ``target``'s generated seeds into ``directory``; return how many."""
    directory.mkdir(parents=True, exist_ok=True)
    seeds = SEEDS[target]()
    for name, data in seeds.items():
        (directory / f"seed-{name}").write_bytes(data)
    return len(seeds)
