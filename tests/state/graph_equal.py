"""Identity-aware structural equality of two object graphs (an isomorphism check).

``==`` is useless for checkpoint tests: savable classes use ``eq=False``, and even
structural ``==`` cannot see whether sharing and cycles survived.  ``graph_diff`` walks
both graphs side by side and keeps a bijection between their identity-bearing objects
(savable dataclass instances, ``list``, ``dict``, ``set``, ``bytearray``): the first time
an original object meets a loaded one they are paired, and every later meeting must pair
them again.  So lost sharing (one object loaded as two), spurious sharing (two objects
loaded as one) and broken cycles are all differences, besides different values or types.

Values compare by exact type (``True`` is not ``1``, ``1.0`` is not ``1``); floats compare
by bits of meaning (NaN equals NaN, ``-0.0`` differs from ``0.0``); enum members by
identity; dicts in insertion order; sets by a matching of their elements.  The walk is
iterative, so a 100000-long chain compares without recursion.  Dataclass fields declared
with ``compare=False`` are skipped (use that for ``nosave`` fields).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import math
from collections import Counter
from typing import Any

_SCALARS = (type(None), bool, int, str, bytes)
_IDENTITY_CONTAINERS = (list, dict, set, bytearray)

# A path is a linked list (parent, segment) so deep walks do not build long strings.
Path = tuple[Any, str] | None


def render_path(path: Path) -> str:
    parts: list[str] = []
    while path is not None:
        path, seg = path
        parts.append(seg)
    return "$" + "".join(reversed(parts))


_ABSENT = object()
# How to compare a value of a given type, decided once per type.
_SCALAR, _FLOAT, _ENUM, _TUPLE, _FROZENSET, _CONTAINER, _DATACLASS, _OTHER = (
    "scalar",
    "float",
    "enum",
    "tuple",
    "frozenset",
    "container",
    "dataclass",
    "other",
)
# Mutable containers saved through value codecs: identity-bearing, compared item by item.
_VSEQ, _VMAP = "value-sequence", "value-mapping"
_HOW: dict[type, str] = {}
_FIELDS: dict[type, list[str]] = {}


def _how(t: type) -> str:
    if t in _SCALARS:
        return _SCALAR
    if t is float:
        return _FLOAT
    if issubclass(t, enum.Enum):
        return _ENUM
    if issubclass(t, tuple):  # tuples and NamedTuples
        return _TUPLE
    if t is collections.deque:
        return _VSEQ
    if t in (collections.OrderedDict, collections.defaultdict, collections.Counter):
        return _VMAP
    if t is frozenset:
        return _FROZENSET
    if t in _IDENTITY_CONTAINERS:
        return _CONTAINER
    if dataclasses.is_dataclass(t):
        return _DATACLASS
    return _OTHER


def _compared_fields(t: type) -> list[str]:
    names = _FIELDS.get(t)
    if names is None:
        names = _FIELDS[t] = [f.name for f in dataclasses.fields(t) if f.compare]
    return names


def _value_key(x: Any) -> Any:
    """A hashable, type-exact key for a pure value, or None when x holds identities."""
    t = type(x)
    if t in _SCALARS:
        return (t, x)
    if t is float:
        if math.isnan(x):
            return (float, "nan")
        return (float, x, math.copysign(1.0, x))
    if isinstance(x, enum.Enum):
        return ("enum", id(x))
    if t is tuple or t is frozenset:
        keys = [_value_key(e) for e in x]
        if any(k is None for k in keys):
            return None
        return (t, tuple(keys)) if t is tuple else (t, frozenset(Counter(keys).items()))
    return None


class _Matcher:
    def __init__(self) -> None:
        self.fwd: dict[int, Any] = {}  # id(original) -> loaded
        self.back: dict[int, Any] = {}  # id(loaded) -> original
        self.stack: list[tuple[Any, Any, Path]] = []
        self.deferred: list[tuple[Any, Any, Path]] = []  # set/frozenset pairs

    def fork(self) -> _Matcher:
        other = _Matcher()
        other.fwd = dict(self.fwd)
        other.back = dict(self.back)
        return other

    def run(self, a: Any, b: Any, path: Path = None) -> str | None:
        self.stack.append((a, b, path))
        while self.stack or self.deferred:
            if not self.stack:
                # Sets last: by then most of their elements are paired through other paths.
                err = self._match_sets(*self.deferred.pop())
            else:
                err = self._step(*self.stack.pop())
            if err is not None:
                return err
        return None

    def _pair(self, a: Any, b: Any, path: Path) -> str | bool:
        """Pair two identity-bearing objects: False when new, True when already paired."""
        seen = self.fwd.get(id(a))
        if seen is not None:
            if seen is b:
                return True
            return (
                f"{render_path(path)}: sharing differs: this original {type(a).__name__} "
                "was already matched with a different loaded object (sharing lost)"
            )
        if id(b) in self.back:
            return (
                f"{render_path(path)}: sharing differs: this loaded {type(b).__name__} "
                "already stands for a different original object (spurious sharing)"
            )
        self.fwd[id(a)] = b
        self.back[id(b)] = a
        return False

    def _step(self, a: Any, b: Any, path: Path) -> str | None:
        ta, tb = type(a), type(b)
        if ta is not tb:
            return (
                f"{render_path(path)}: type differs: {ta.__qualname__} {a!r:.80} "
                f"vs {tb.__qualname__} {b!r:.80}"
            )
        how = _HOW.get(ta)
        if how is None:
            how = _HOW[ta] = _how(ta)
        if how is _SCALAR:
            if a != b:
                return f"{render_path(path)}: value differs: {a!r:.120} vs {b!r:.120}"
            return None
        if how is _DATACLASS:
            paired = self._pair(a, b, path)
            if paired is False:
                for name in reversed(_compared_fields(ta)):
                    va, vb = getattr(a, name, _ABSENT), getattr(b, name, _ABSENT)
                    if (va is _ABSENT) != (vb is _ABSENT):
                        return f"{render_path(path)}.{name}: attribute set on only one side"
                    if va is not _ABSENT:
                        self.stack.append((va, vb, (path, f".{name}")))
                return None
            return paired if isinstance(paired, str) else None
        if how is _FLOAT:
            if _value_key(a) != _value_key(b):
                return f"{render_path(path)}: float differs: {a!r} vs {b!r}"
            return None
        if how is _ENUM:
            if a is not b:
                return f"{render_path(path)}: enum member differs: {a!r} vs {b!r}"
            return None
        if how is _TUPLE:
            if len(a) != len(b):
                return f"{render_path(path)}: tuple length differs: {len(a)} vs {len(b)}"
            for i in range(len(a) - 1, -1, -1):
                self.stack.append((a[i], b[i], (path, f"[{i}]")))
            return None
        if how is _FROZENSET:
            self.deferred.append((a, b, path))
            return None
        if how is _CONTAINER:
            paired = self._pair(a, b, path)
            if paired is False:
                return self._contents(a, b, path)
            return paired if isinstance(paired, str) else None
        if how is _VSEQ or how is _VMAP:
            paired = self._pair(a, b, path)
            if paired is not False:
                return paired if isinstance(paired, str) else None
        if how is _VSEQ:
            if a.maxlen != b.maxlen or len(a) != len(b):
                return f"{render_path(path)}: deque differs: {a!r:.80} vs {b!r:.80}"
            for i in range(len(a) - 1, -1, -1):
                self.stack.append((a[i], b[i], (path, f"[{i}]")))
            return None
        if how is _VMAP:
            if getattr(a, "default_factory", None) is not getattr(b, "default_factory", None):
                return f"{render_path(path)}: default_factory differs: {a!r:.80} vs {b!r:.80}"
            if len(a) != len(b):
                return f"{render_path(path)}: {ta.__name__} length differs"
            items = list(zip(a.items(), b.items(), strict=True))
            for i in range(len(items) - 1, -1, -1):
                (ka, va), (kb, vb) = items[i]
                self.stack.append((va, vb, (path, f"[{ka!r:.40}]")))
                self.stack.append((ka, kb, (path, f".<key #{i}>")))
            return None
        # Other values (datetime, Decimal, UUID, paths, ...): the same value and the same
        # repr (an aware datetime equals the same instant in another zone; NaN != NaN).
        if repr(a) != repr(b):
            return f"{render_path(path)}: {ta.__qualname__} differs: {a!r:.80} vs {b!r:.80}"
        return None

    def _contents(self, a: Any, b: Any, path: Path) -> str | None:
        """Compare a list, dict, set or bytearray just paired with its counterpart."""
        ta = type(a)
        if ta is bytearray:
            if a != b:
                return f"{render_path(path)}: bytearray differs: {a!r:.80} vs {b!r:.80}"
            return None
        if ta is list:
            if len(a) != len(b):
                return f"{render_path(path)}: list length differs: {len(a)} vs {len(b)}"
            for i in range(len(a) - 1, -1, -1):
                self.stack.append((a[i], b[i], (path, f"[{i}]")))
            return None
        if ta is dict:
            if len(a) != len(b):
                return f"{render_path(path)}: dict length differs: {len(a)} vs {len(b)}"
            items = list(zip(a.items(), b.items(), strict=True))
            for i in range(len(items) - 1, -1, -1):
                (ka, va), (kb, vb) = items[i]
                label = f"[{ka!r:.40}]" if type(ka) in _SCALARS else f"[<key #{i}>]"
                self.stack.append((va, vb, (path, label)))
                self.stack.append((ka, kb, (path, f".<key #{i}>")))
            return None
        self.deferred.append((a, b, path))  # a set: matched once everything else is paired
        return None

    def _match_sets(self, a: Any, b: Any, path: Path) -> str | None:
        # (a set was paired with its counterpart in _step; a frozenset has no identity)
        if len(a) != len(b):
            return f"{render_path(path)}: {type(a).__name__} size differs: {len(a)} vs {len(b)}"
        pure_a: Counter = Counter()
        pure_b: Counter = Counter()
        shown: dict[Any, Any] = {}  # key -> an element, for messages
        rest_a: list[Any] = []
        rest_b: list[Any] = []
        for elements, pure, rest in ((a, pure_a, rest_a), (b, pure_b, rest_b)):
            for x in elements:
                key = _value_key(x)
                if key is None:
                    rest.append(x)
                else:
                    pure[key] += 1
                    shown.setdefault(key, x)
        if pure_a != pure_b:
            extra = [shown[k] for k in (pure_a - pure_b).elements()][:3]
            missing = [shown[k] for k in (pure_b - pure_a).elements()][:3]
            return (
                f"{render_path(path)}: {type(a).__name__} values differ: original only "
                f"{extra!r:.120}, loaded only {missing!r:.120}"
            )
        # Identity-bearing elements: those already paired elsewhere first ...
        unmatched: list[Any] = []
        for x in rest_a:
            y = self.fwd.get(id(x))
            if y is not None and any(y is z for z in rest_b):
                rest_b = [z for z in rest_b if z is not y]
            else:
                unmatched.append(x)
        # ... then a trial pairing for the others: a full sub-walk on a forked bijection.
        for x in unmatched:
            for j, y in enumerate(rest_b):
                trial = self.fork()
                if trial.run(x, y, (path, "{elem}")) is None:
                    self.fwd, self.back = trial.fwd, trial.back
                    del rest_b[j]
                    break
            else:
                return (
                    f"{render_path(path)}: {type(a).__name__} element {x!r:.80} has no "
                    "counterpart in the loaded graph"
                )
        return None


def graph_diff(original: Any, loaded: Any) -> str | None:
    """The first difference between two graphs (a path and what differs), or None."""
    return _Matcher().run(original, loaded)


def assert_graph_equal(original: Any, loaded: Any) -> None:
    """Fail with the path of the first difference unless the graphs are isomorphic."""
    diff = graph_diff(original, loaded)
    assert diff is None, diff
