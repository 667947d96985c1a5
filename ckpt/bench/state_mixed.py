"""The ``mixed`` shape of ``ckpt bench state``: N objects of one class whose fields span
every common field kind at once.

Each ``MNode`` holds a reference, an ``Optional`` self-reference, a list of references,
a ``dict[str, int]``, an ``Any`` field (another node, an int or None), a fixed and a
variable tuple, a ``set[int]``, ``bytes``, a ``float`` that is now and then infinite, an
enum, and an ``int`` that now and then needs more than 64 bits.  Where ``flat`` isolates
the kinds an engine handles best, ``mixed`` shows what one class with every kind costs:
a single kind that leaves an engine's fast path slows every object of the class.
The shape is held out: measured, never tuned for.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Optional

from ckpt import state
from ckpt.bench.state_models import Mode


@state.savable(name="bench.MNode")
@dataclass(eq=False)
class MNode:
    ident: int = 0  # beyond 64 bits in about one node in 50
    weight: float = 0.0  # +inf or -inf in about one node in 20
    mode: Mode = Mode.OFF
    raw: bytes = b""
    pair: tuple[int, str] = (0, "")
    path: tuple[int, ...] = ()
    tags: set[int] = field(default_factory=set)
    attrs: dict[str, int] = field(default_factory=dict)
    peer: MNode = None  # type: ignore[assignment]  # set on every node once built
    next: Optional["MNode"] = None  # noqa: UP037, UP045
    kids: list[MNode] = field(default_factory=list)
    extra: Any = None  # another node, an int, or None


@state.savable(name="bench.MixedRoot")
@dataclass(eq=False)
class MixedRoot:
    nodes: list[MNode] = field(default_factory=list)


def _ident(rng: random.Random, i: int) -> int:
    if rng.random() < 0.02:
        return (1 << rng.randrange(64, 130)) + i  # beyond int64 and uint64
    return i


def _weight(rng: random.Random) -> float:
    if rng.random() < 0.05:
        return rng.choice((math.inf, -math.inf))
    return rng.random() * 100


def make_mixed(nodes: int = 20000, seed: int = 11) -> MixedRoot:
    """A seeded random graph of ``nodes`` MNodes, cross-linked, every field kind set."""
    rng = random.Random(seed)
    objs = [
        MNode(
            ident=_ident(rng, i),
            weight=_weight(rng),
            mode=Mode(rng.randrange(3)),
            raw=rng.randbytes(rng.choice((0, 4, 16))),
            pair=(i, f"m{i % 100}"),
            path=tuple(rng.randrange(1000) for _ in range(rng.randrange(4))),
            tags={rng.randrange(64) for _ in range(rng.randrange(4))},
            attrs={f"a{j}": rng.randrange(1 << 20) for j in range(rng.randrange(3))},
        )
        for i in range(nodes)
    ]
    for node in objs:
        node.peer = rng.choice(objs)
        node.next = rng.choice(objs) if rng.random() < 0.7 else None
        node.kids = [rng.choice(objs) for _ in range(rng.choice((0, 0, 1, 2, 3)))]
        pick = rng.random()
        if pick < 0.4:
            node.extra = rng.choice(objs)
        elif pick < 0.7:
            node.extra = rng.randrange(-1000, 1000)
    rng.shuffle(objs)
    return MixedRoot(objs)
