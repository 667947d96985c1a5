"""Where in the graph an unsavable value sits: ``$.tasks[3].fd_table.files[7]``.

Built only after a save has failed, by a breadth-first search from the root for the
first value that cannot be saved, so the fast path pays nothing for it (as cattrs
builds its error paths only when a structure fails).  The search follows exactly what
a save follows: the saved fields of savable objects, list/tuple/set items, dict keys
and values, and the items of value-codec values.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any

from ckpt.state import registry, values

_PLAIN = (type(None), bool, int, float, str, bytes, bytearray)
_LIMIT = 2_000_000  # values visited before giving up (a path is a courtesy, not a must)


def _children(v: Any) -> list[tuple[str, Any]] | None:
    """(path step, child) pairs of a savable value, or None if ``v`` cannot be saved."""
    t = type(v)
    if t in _PLAIN:
        return []
    if t is list or t is tuple:
        return [(f"[{i}]", x) for i, x in enumerate(v)]
    if t is dict:
        out = [(f".keys()[{i}]", k) for i, k in enumerate(v)]
        return out + [(f"[{k!r}]", x) for k, x in v.items()]
    if t is set or t is frozenset:
        return [(f".<item {i}>", x) for i, x in enumerate(v)]
    info = registry.type_info(t)
    if info is not None:
        try:
            sch = info.schema
        except Exception:
            return None
        return [
            (f".{spec.name}", getattr(v, spec.name, None))
            for spec in sch.fields
            if spec.opts.save is None
        ]
    if isinstance(v, enum.Enum):
        return []
    codec = values.codec_for(t)
    if codec is not None:
        try:
            plain = codec.to_plain(v)
        except Exception:
            return None
        if codec.flat:
            return []
        return [(f".<{codec.name} {i}>", x) for i, x in enumerate(plain)]
    return None


def path_to_unsavable(root: Any) -> str | None:
    """The path from the root to the first value (breadth first) that cannot be saved."""
    seen: set[int] = set()
    queue: deque[tuple[Any, str]] = deque([(root, "$")])
    visited = 0
    while queue and visited < _LIMIT:
        v, path = queue.popleft()
        visited += 1
        if type(v) not in _PLAIN:
            if id(v) in seen:
                continue
            seen.add(id(v))
        kids = _children(v)
        if kids is None:
            return path
        for step, child in kids:
            queue.append((child, path + step))
    return None
