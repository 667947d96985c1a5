"""Reading a stream without its classes: the type table, per-type sizes, the objects.

This is what ``ckpt inspect`` and ``runsc statefile``-style tools need: it uses only
the stream's own type table and field kind descriptors, never imports or instantiates
anything, so it works on an image written by another version of ckpt.  References
show as ``Ref(id)`` (printed ``→#id``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from ckpt.errors import StateError
from ckpt.state import values
from ckpt.state import wire as w
from ckpt.state.dyn import as_bigint, as_bytearray
from ckpt.state.schema import SCALARS, ZERO_FACTORIES, K, Kind, parse_descriptor

_MALFORMED = (ValueError, TypeError, IndexError, KeyError, AttributeError, RecursionError)


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to object ``id`` in the stream."""

    id: int

    def __repr__(self) -> str:
        return f"→#{self.id}"


@dataclass(frozen=True, slots=True)
class EnumValue:
    type: str
    value: Any

    def __repr__(self) -> str:
        return f"{self.type.rsplit('.', 1)[-1]}({self.value!r})"


@dataclass(frozen=True, slots=True)
class ValueView:
    """A value of a codec this reader does not rebuild (user-registered, NamedTuple)."""

    codec: str
    items: tuple

    def __repr__(self) -> str:
        return f"{self.codec.rsplit('.', 1)[-1]}({', '.join(map(repr, self.items))})"


@dataclass(frozen=True)
class TypeView:
    name: str
    fields: tuple[str, ...]
    count: int
    nbytes: int
    kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class ObjectView:
    id: int
    type: str
    fields: dict[str, Any]


class StreamView:
    """A decoded but not instantiated stream."""

    def __init__(self, data: Any) -> None:
        payload = w.unframe(data)
        version, engine, encoding, types, type_seq, rows, root, shared, flags = payload
        if encoding not in (w.COMPACT, w.DYN) or not isinstance(types, list):
            raise StateError("state stream payload has the wrong shape")
        if not isinstance(rows, list) or len(rows) != len(types) or not isinstance(type_seq, list):
            raise StateError("state stream type table and rows do not match")
        self.version: int = version
        self.engine: str = engine
        self.encoding: str = encoding
        self.flags: dict = flags if isinstance(flags, dict) else {}
        escaped = self.flags.get("escaped", [])
        self._escaped = frozenset(escaped if isinstance(escaped, list) else [])
        self.shared: list = shared if isinstance(shared, list) else []
        self._type_seq = type_seq
        self._rows = rows
        self._raw_root = root
        self._entries: list[tuple[str, tuple[str, ...], tuple[Kind, ...], tuple[str, ...]]] = []
        encoder = msgspec.msgpack.Encoder()
        views = []
        for t, entry in enumerate(types):
            name, names, descriptors, is_enum = w.type_entry(t, entry)
            kinds: tuple[Kind, ...] = () if is_enum else tuple(map(parse_descriptor, descriptors))
            self._entries.append((name, tuple(names), kinds, tuple(descriptors)))
            if not isinstance(rows[t], list):
                raise StateError(f"rows of type {name!r} are malformed")
            views.append(
                TypeView(
                    name,
                    tuple(names),
                    len(rows[t]),
                    len(encoder.encode(rows[t])),
                    tuple(descriptors),
                )
            )
        self.types: list[TypeView] = views
        self.root: int = root.get(w.T_REF, 0) if isinstance(root, dict) and len(root) == 1 else 0

    @property
    def object_count(self) -> int:
        return len(self._type_seq)

    @property
    def root_value(self) -> Any:
        try:
            return self._dyn(self._raw_root)
        except StateError:
            raise
        except _MALFORMED as exc:
            raise StateError(
                f"state stream root is malformed: {type(exc).__name__}: {exc}"
            ) from exc

    def objects(self) -> Iterator[ObjectView]:
        """Every object in id order, its fields decoded to plain values and ``Ref``s."""
        try:
            yield from self._objects()
        except StateError:
            raise
        except _MALFORMED as exc:
            raise StateError(f"state stream is malformed: {type(exc).__name__}: {exc}") from exc

    def _objects(self) -> Iterator[ObjectView]:
        cursor = [0] * len(self._rows)
        for index, t in enumerate(self._type_seq):
            if not isinstance(t, int) or not 0 <= t < len(self._entries):
                raise StateError(f"object #{index + 1} has an unknown type index {t!r}")
            name, names, kinds, _ = self._entries[t]
            rows = self._rows[t]
            if cursor[t] >= len(rows):
                raise StateError(f"type {name!r} has fewer rows than objects")
            row = rows[cursor[t]]
            cursor[t] += 1
            if not isinstance(row, list) or len(row) != len(names):
                raise StateError(f"object #{index + 1} ({name}) has a malformed row")
            if self.encoding == w.DYN:
                fields = {n: self._dyn(v) for n, v in zip(names, row, strict=True)}
            elif t in self._escaped:
                fields = {
                    n: self._dyn(v) if isinstance(v, dict) else self._compact(k, v)
                    for n, k, v in zip(names, kinds, row, strict=True)
                }
            else:
                fields = {n: self._compact(k, v) for n, k, v in zip(names, kinds, row, strict=True)}
            yield ObjectView(index + 1, name, fields)

    def verify(self) -> None:
        """Decode everything; raise StateError if any part is malformed."""
        for _ in self.objects():
            pass
        self.root_value  # noqa: B018 - decoding is the check
        counts = Counter(self._type_seq)
        for t, entry in enumerate(self._entries):
            if counts.get(t, 0) != len(self._rows[t]):
                raise StateError(f"type {entry[0]!r}: object count and row count disagree")

    # --- decoding without classes ---------------------------------------------------

    def _ref(self, raw: Any) -> Any:
        if raw == 0 or raw is None:
            return None
        if not isinstance(raw, int) or not 0 < raw <= len(self._type_seq):
            raise StateError(f"reference to object #{raw!r}, which the stream does not hold")
        return Ref(raw)

    def _dyn(self, raw: Any) -> Any:
        t = type(raw)
        if t is list:
            return [self._dyn(x) for x in raw]
        if t is not dict:
            return raw
        if len(raw) != 1:
            raise StateError("malformed tagged value")
        ((tag, payload),) = raw.items()
        if tag == w.T_REF:
            return self._ref(payload)
        if tag == w.T_DICT:
            keys, values = payload
            return {
                _hashable(self._dyn(k)): self._dyn(v) for k, v in zip(keys, values, strict=True)
            }
        if tag == w.T_TUPLE:
            return tuple(self._dyn(x) for x in payload)
        if tag in (w.T_SET, w.T_FROZENSET):
            return {_hashable(self._dyn(x)) for x in payload}
        if tag == w.T_BYTEARRAY:
            return as_bytearray(payload)
        if tag == w.T_ENUM:
            index, value = payload
            if not isinstance(index, int) or not 0 <= index < len(self._entries):
                raise StateError("enum value refers to an unknown type")
            return EnumValue(self._entries[index][0], self._dyn(value))
        if tag == w.T_BIGINT:
            return as_bigint(payload)
        if tag == w.T_SLOT:
            return self._dyn(payload)
        if tag == w.T_VALUE:
            if not (isinstance(payload, list) and len(payload) == 2):
                raise StateError("malformed value-codec record")
            return self._value(payload[0], payload[1])
        raise StateError(f"unknown value tag {tag!r}")

    def _value(self, name: Any, items: Any) -> Any:
        """A codec value: built-in ones (stdlib types) rebuilt, others shown as a view."""
        if not isinstance(name, str) or not isinstance(items, list):
            raise StateError("malformed value-codec record")
        plain = [self._dyn(x) for x in items]
        codec = values.codec_named(name)
        if codec is not None and codec.builtin and not _has_views(plain):
            return values.from_plain(codec, plain)
        return ValueView(name, tuple(plain))

    def _compact(self, kind: Kind, raw: Any) -> Any:
        tag = kind.tag
        if tag is K.REF:
            return self._ref(raw)
        if (
            tag is K.ANY
            or (tag is K.SAVE and not kind.args)
            or (isinstance(raw, dict) and (tag in SCALARS or tag is K.SAVE))
        ):
            return self._dyn(raw)
        if tag is K.SAVE:
            return self._compact(kind.args[0], raw)
        if tag is K.VALUE:
            return self._value(kind.codec, raw)
        if raw is None:
            # Nil in a field of a kind with a zero value is that zero, not None.
            factory = ZERO_FACTORIES.get(tag)
            return None if factory is None else factory()
        if tag in SCALARS or tag is K.ENUM:
            return raw
        if tag is K.OPT:
            return self._compact(kind.args[0], raw)
        if tag is K.BYTEARRAY:
            return as_bytearray(raw)
        if tag is K.DICT:
            keys, values = raw
            kk, vk = kind.args
            return {
                _hashable(self._compact(kk, k)): self._compact(vk, v)
                for k, v in zip(keys, values, strict=True)
            }
        if tag is K.TUPLE:
            return tuple(self._compact(k, x) for k, x in zip(kind.args, raw, strict=True))
        items = [self._compact(kind.args[0], x) for x in raw]
        if tag in (K.SET, K.FROZENSET):
            return {_hashable(x) for x in items}
        return tuple(items) if tag is K.VARTUPLE else items


def _has_views(items: Any) -> bool:
    """Whether decoded items hold references or views a stdlib constructor would choke on
    (a deque of objects is shown as a view: its items are references)."""
    if isinstance(items, Ref | EnumValue | ValueView):
        return True
    if isinstance(items, list | tuple | set):
        return any(map(_has_views, items))
    if isinstance(items, dict):
        return _has_views(list(items)) or _has_views(list(items.values()))
    return False


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(x) for x in value)
    if isinstance(value, dict | set):
        return repr(value)
    return value


def inspect_stream(data: Any) -> StreamView:
    """Open a stream for inspection (checks the frame; decodes lazily)."""
    try:
        return StreamView(data)
    except StateError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, RecursionError) as exc:
        raise StateError(f"state stream is malformed: {type(exc).__name__}: {exc}") from exc
