"""Self-describing ("dyn") values: the reflective encoder and decoder.

This is the reflect engine's whole value codec: it dispatches on each value's run-time
type, as pickle's ``dispatch`` table does.  The typed engine uses it only where an
annotation says nothing useful (``Any``, unions of plain types, ``save=`` results) and
for the root value.
"""

from __future__ import annotations

import enum
import struct
import weakref
from collections.abc import Callable
from typing import Any

from ckpt.errors import StateError
from ckpt.state import registry, values
from ckpt.state.wire import (
    INT_LIMIT,
    INT_MIN,
    T_BIGINT,
    T_BYTEARRAY,
    T_DICT,
    T_ENUM,
    T_FROZENSET,
    T_REF,
    T_SET,
    T_SLOT,
    T_TUPLE,
    T_VALUE,
)

_PASS = (type(None), bool, float, str, bytes)


def _ignore(value: Any) -> None:
    pass


class _Forgetful(dict):
    """A container memo that remembers nothing (untracked encoding)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def make_encoder(walk: Any, track: bool = True) -> Callable[[Any, Any], Any]:
    """An encoder bound to one save walk: ``encode(value, owner)``.

    ``owner`` is the object whose row is being built (or the walk's root marker): the
    first object to hold a mutable container owns its content, which is what lets a
    container shared by several fields be restored as one object.  With
    ``track=False`` containers are plain values (for what ``save=`` functions return:
    those are fresh values whose identity means nothing).
    """
    ids_get = walk.ids.get
    discover = walk.discover
    cmemo = walk.cmemo if track else _Forgetful()
    hold = walk.hold if track else _ignore  # what cmemo records stays alive (SaveWalk.held)
    seen_again = walk.seen_again
    enum_index = walk.enum_index
    codec_for = values.codec_for
    savable = registry._by_class
    untracked: list = []  # the untracked twin, built on first use (value codec items)

    def codec_value(v: Any, codec: Any, owner: Any) -> Any:
        if not untracked:
            untracked.append(encode if not track else make_encoder(walk, track=False))
        return {T_VALUE: [codec.name, plain_items(codec, v, untracked[0], owner)]}

    def encode(v: Any, owner: Any) -> Any:
        t = type(v)
        if t in _PASS:
            return v
        if t is int:
            if INT_MIN <= v < INT_LIMIT:
                return v
            return {T_BIGINT: str(v)}
        if t is list:
            k = id(v)
            if k in cmemo:
                return seen_again(v)
            cmemo[k] = owner
            hold(v)
            return [encode(x, owner) for x in v]
        if t is dict:
            k = id(v)
            if k in cmemo:
                return seen_again(v)
            cmemo[k] = owner
            hold(v)
            return {T_DICT: [[encode(x, owner) for x in v], [encode(x, owner) for x in v.values()]]}
        if t is tuple:
            return {T_TUPLE: [encode(x, owner) for x in v]}
        r = ids_get(id(v))
        if r is not None:
            return {T_REF: r}
        if t in savable:
            return {T_REF: discover(v)}
        if t is set or t is frozenset:
            if t is set:
                k = id(v)
                if k in cmemo:
                    return seen_again(v)
                cmemo[k] = owner
                hold(v)
            return {T_SET if t is set else T_FROZENSET: [encode(x, owner) for x in v]}
        if t is bytearray:
            k = id(v)
            if k in cmemo:
                return seen_again(v)
            cmemo[k] = owner
            hold(v)
            return {T_BYTEARRAY: bytes(v)}
        if isinstance(v, enum.Enum):
            if v in nan_twins(t):
                raise twin_error(v)
            return {T_ENUM: [enum_index(t), encode(v.value, owner)]}
        codec = codec_for(t)
        if codec is not None:
            if codec.items is not None:  # a mutable container: identity-tracked
                k = id(v)
                if k in cmemo:
                    return seen_again(v)
                cmemo[k] = owner
                hold(v)
                return {T_VALUE: [codec.name, codec.items(v, lambda x: encode(x, owner))]}
            return codec_value(v, codec, owner)
        return {T_REF: discover(v)}  # raises StateError for a non-savable type

    return encode


def plain_items(codec: Any, v: Any, encode: Callable[[Any, Any], Any], owner: Any) -> list:
    """A value codec's payload: ``to_plain(v)``, each item self-describing (untracked)."""
    try:
        plain = codec.to_plain(v)
    except StateError:
        raise
    except Exception as exc:
        raise StateError(f"the {codec.name} value codec failed on {v!r}: {exc!r}") from exc
    if codec.flat:
        return plain
    if type(plain) not in (list, tuple):
        raise StateError(
            f"the {codec.name} value codec returned {type(plain).__name__}, not a list"
        )
    return [encode(x, owner) for x in plain]


def as_bytearray(raw: Any) -> bytearray:
    """``bytearray(raw)`` for bytes only: ``bytearray(2**31)`` would allocate 2 GiB."""
    if type(raw) is not bytes:
        raise StateError(f"a bytearray must be stored as bytes, not {type(raw).__name__}")
    return bytearray(raw)


class EnumMembers(dict):
    """value -> member of one enum; a value the enum no longer has is a StateError."""

    def __init__(self, cls: type) -> None:
        super().__init__((m._value_, m) for m in cls)
        self.cls = cls

    def __missing__(self, value: Any) -> Any:
        return enum_member(self.cls, value)


_NAN = object()  # marks a NaN in a _nan_key


def _nan_key(v: Any) -> Any:
    """``v`` with every NaN (through tuples, lists and frozensets) replaced by its bits:
    ``nan != nan``, so ``Enum(nan)`` finds no member, but two NaNs with the same bits
    are the same value as far as a stream can tell.  Other values are left as they are,
    so 0.0 and -0.0 stay equal, as they are to Enum."""
    t = type(v)
    if t is float:
        return (_NAN, struct.pack("<d", v)) if v != v else v
    if t is tuple or t is list:
        return (t, *map(_nan_key, v))
    if t is frozenset:
        return (t, frozenset(map(_nan_key, v)))
    return v


def _holds_nan(v: Any) -> bool:
    t = type(v)
    if t is float:
        return v != v
    if t is tuple or t is list or t is frozenset:
        return any(map(_holds_nan, v))
    return False


def enum_member(cls: type, value: Any) -> Any:
    """The member of ``cls`` whose value is ``value``, a NaN matching a NaN with the same
    bits; a value the enum no longer has is a StateError naming the enum."""
    try:
        return cls(value)
    except ValueError:
        pass
    if _holds_nan(value):
        key = _nan_key(value)
        found = [m for m in cls.__members__.values() if _nan_key(m._value_) == key]
        if len(found) == 1:
            return found[0]
    raise StateError(
        f"enum {cls.__module__}.{cls.__qualname__} has no member with value "
        f"{value!r} (was it removed or renumbered?)"
    )


_twins: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def nan_twins(cls: type) -> frozenset:
    """The members of an enum whose value holds a NaN and has the same bits as another
    member's (``A = math.nan; B = float("nan")`` are two members): a stream holds the
    value only, so such a member could not be told apart on loading."""
    found = _twins.get(cls)
    if found is None:
        keys: dict = {}
        for m in cls.__members__.values():
            if _holds_nan(m._value_):
                keys.setdefault(_nan_key(m._value_), []).append(m)
        found = frozenset(m for ms in keys.values() if len(ms) > 1 for m in ms)
        _twins[cls] = found
    return found


def twin_error(member: Any) -> StateError:
    cls = type(member)
    return StateError(
        f"enum {cls.__module__}.{cls.__qualname__} member {member.name} has the same NaN "
        "value as another member, so a checkpoint cannot tell them apart; give each "
        "member a distinct value"
    )


def make_decoder(objs: list, enums: list, shared_placeholder: Any = None) -> Callable[[Any], Any]:
    """A decoder bound to one load: references resolve into ``objs`` (index = object id)."""
    nobjs = len(objs)

    def decode(raw: Any) -> Any:
        t = type(raw)
        if t is list:
            return [decode(x) for x in raw]
        if t is not dict:
            return raw
        # References are by far the most common tag: resolve them first.
        ref = raw.get(T_REF)
        if type(ref) is int and 0 <= ref < nobjs and len(raw) == 1:
            return objs[ref]
        if len(raw) != 1:
            raise StateError(f"malformed tagged value with {len(raw)} keys")
        ((tag, payload),) = raw.items()
        if tag == T_REF:
            if type(payload) is not int or not 0 <= payload < nobjs:
                raise StateError(
                    f"reference to object #{payload!r}, which the stream does not hold"
                )
            return objs[payload]
        if tag == T_DICT:
            keys, values = payload
            if len(keys) != len(values):
                raise StateError("malformed dict: key and value counts differ")
            return dict(zip(map(decode, keys), map(decode, values), strict=True))
        if tag == T_TUPLE:
            return tuple(map(decode, payload))
        if tag == T_SET:
            return set(map(decode, payload))
        if tag == T_FROZENSET:
            return frozenset(map(decode, payload))
        if tag == T_BYTEARRAY:
            return as_bytearray(payload)
        if tag == T_ENUM:
            index, value = payload
            cls = enums[index] if 0 <= index < len(enums) else None
            if cls is None:
                raise StateError(f"enum value refers to type #{index}, which is not an enum type")
            return enum_member(cls, decode(value))
        if tag == T_BIGINT:
            return as_bigint(payload)
        if tag == T_SLOT:
            return decode(payload)
        if tag == T_VALUE:
            return decode_value(payload, decode)
        raise StateError(f"unknown value tag {tag!r}")

    return decode


def as_bigint(payload: Any) -> int:
    """A big int from its decimal string (int() itself bounds the digits: 4300)."""
    if type(payload) is not str:
        raise StateError(f"a big int must be stored as a decimal string, not {payload!r}")
    return int(payload)


def decode_value(payload: Any, decode: Callable[[Any], Any]) -> Any:
    """``{9: [name, items]}``: look the codec up by name (never import), decode, rebuild."""
    if type(payload) is not list or len(payload) != 2 or type(payload[0]) is not str:
        raise StateError("malformed value-codec record")
    name, items = payload
    codec = values.codec_named(name)
    if codec is None:
        raise StateError(
            f"the stream holds a {name!r} value, which is not a known value type "
            "(register it with state.register_value before loading)"
        )
    if type(items) is not list:
        raise StateError(f"a {name} value must be stored as an array")
    return values.from_plain(codec, [*map(decode, items)])
