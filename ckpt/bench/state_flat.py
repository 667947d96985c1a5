"""The ``flat`` shape of ``ckpt bench state``: N objects of a 12-field dataclass whose
references point into a pool of shared leaf objects.

It isolates the per-object cost of plain fields and references, with no polymorphic
fields and no ``save=`` functions, where a compiled engine's gain is largest.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ckpt import state
from ckpt.bench.state_models import Mode


@state.savable(name="bench.FlatLeaf")
@dataclass(eq=False)
class FlatLeaf:
    value: int = 0
    tag: str = ""


@state.savable(name="bench.Flat")
@dataclass(eq=False)
class Flat:
    ident: int = 0
    count: int = 0
    weight: float = 0.0
    name: str = ""
    note: str = ""
    live: bool = False
    raw: bytes = b""
    mode: Mode = Mode.OFF
    opt: int | None = None
    first: FlatLeaf | None = None
    second: FlatLeaf | None = None
    items: list[int] = field(default_factory=list)


@state.savable(name="bench.FlatRoot")
@dataclass(eq=False)
class FlatRoot:
    objects: list[Flat] = field(default_factory=list)


def make_flat(nodes: int = 20000, pool: int = 256, seed: int = 7) -> FlatRoot:
    rng = random.Random(seed)
    leaves = [FlatLeaf(i, f"leaf-{i}") for i in range(pool)]
    return FlatRoot(
        [
            Flat(
                ident=i,
                count=rng.randrange(1 << 16),
                weight=rng.random(),
                name=f"flat-{i % 1000}",
                note="" if i % 3 else "n",
                live=bool(i & 1),
                raw=bytes([i & 0xFF]) * (i % 5),
                mode=Mode(i % 3),
                opt=i if i % 2 else None,
                first=rng.choice(leaves),
                second=rng.choice(leaves) if i % 4 else None,
                items=[i, i + 1] if i % 2 else [],
            )
            for i in range(nodes)
        ]
    )
