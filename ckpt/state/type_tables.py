"""Stream type tables already resolved in this process, remembered by their bytes.

Every restore of an image, and every image of the same program, carries the same type
table. Checking it and matching it to the registered classes (``graph.resolve_types``)
took 0.22 ms of a 3.2 ms native load of the nginx kernel (44 types). A table met
before is taken from here instead, once a few dict lookups show that every class and
enum it names is still registered as it was: registering a class again gives it a new
``TypeInfo``, and with it a new schema, so a changed registry is always a miss.

Only what does not depend on the stream's rows is kept; each load still checks its
own object counts (``resolve``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ckpt.state import graph, registry, schema

MAX_TABLES = 16  # distinct tables kept (a process meets a few: one per program version)
MAX_TABLE_BYTES = 1 << 16  # larger tables are resolved every time, never kept


@dataclass(frozen=True, slots=True)
class _Resolved:
    names: tuple[str, ...]  # per stream type: its name
    plans: tuple[graph.TypePlan | None, ...]  # templates: index, schema, fields (count 0)
    classes: tuple[type, ...]
    enums: tuple[type | None, ...]
    infos: tuple[Any, ...]  # per class: the TypeInfo it had (None for an enum)

    def current(self) -> bool:
        """Whether the registry still maps every name here to the same class and info."""
        for name, cls, enum_cls, info in zip(
            self.names, self.classes, self.enums, self.infos, strict=True
        ):
            if enum_cls is not None:
                if schema.enum_named(name) is not enum_cls:
                    return False
            elif registry.class_named(name) is not cls or registry.type_info(cls) is not info:
                return False
        return True


_tables: dict[bytes, _Resolved] = {}


def lookup(raw: bytes) -> _Resolved | None:
    """The resolved table for these type-table bytes, if it is still current."""
    hit = _tables.get(raw)
    if hit is not None and not hit.current():
        _tables.pop(raw, None)  # it holds classes the registry has let go
        return None
    return hit


def remember(raw: bytes, types: list, plans: list, classes: list, enums: list) -> None:
    """Keep what ``graph.resolve_types`` made of ``types`` (decoded from ``raw``)."""
    if len(raw) > MAX_TABLE_BYTES:
        return
    for oldest in list(_tables)[: max(0, len(_tables) - MAX_TABLES + 1)]:
        _tables.pop(oldest, None)
    _tables[raw] = _Resolved(
        names=tuple(entry[0] for entry in types),
        plans=tuple(plans),
        classes=tuple(classes),
        enums=tuple(enums),
        infos=tuple(
            None if e is not None else registry.type_info(c)
            for c, e in zip(classes, enums, strict=True)
        ),
    )


def resolve(
    table: _Resolved, count_of: Callable[[int, str], int]
) -> tuple[list[graph.TypePlan | None], list[type], list[type | None]]:
    """``graph.resolve_types``' result for a remembered table, with this stream's
    object counts (``count_of(t, name)`` raises when they disagree with its rows)."""
    plans: list[graph.TypePlan | None] = []
    for t, (name, plan) in enumerate(zip(table.names, table.plans, strict=True)):
        count = count_of(t, name)
        if plan is None:
            graph.check_enum_count(name, count)
            plans.append(None)
        else:
            plans.append(
                graph.TypePlan(t, plan.schema, plan.stream_names, plan.sources, plan.nfields, count)
            )
    return plans, list(table.classes), list(table.enums)
