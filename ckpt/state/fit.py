"""Which values fit a field kind's compact form, and the compact encoders for them.

The per-slot rule (README, "Exact values"): a field value that fits its declared kind is
written compactly, anything else as an escape ``{T_SLOT: dyn value}`` in that slot
alone.  ``fits(kind)`` is the exact, side-effect-free test (``type(v) is T``, never
``isinstance``); ``compact(kind)`` encodes a value known to fit.  Generated code inlines
cheap versions of the test for scalars and references and calls ``slot(kind)`` (test,
then encode or escape) for everything else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ckpt.errors import StateError
from ckpt.state import dyn, registry
from ckpt.state.schema import INT64_LIMIT, INT64_MIN, K, Kind, compact_enum

Pred = Callable[[Any], bool]
Enc = Callable[[Any, Any, Any], Any]  # enc(value, owner, ctx) -> compact form

_SCALAR_TYPES = {K.BOOL: bool, K.STR: str, K.BYTES: bytes, K.BYTEARRAY: bytearray}
_SEQ_TYPES = {K.LIST: list, K.SET: set, K.FROZENSET: frozenset, K.VARTUPLE: tuple}


def _int_fits(v: Any) -> bool:
    t = type(v)
    return (t is int and INT64_MIN <= v < INT64_LIMIT) or t is bool


def fits(kind: Kind) -> Pred:
    """The exact test: does ``v`` have this kind's compact form?"""
    tag = kind.tag
    if tag is K.INT:
        return _int_fits
    if tag is K.FLOAT:
        return lambda v: type(v) is float or _int_fits(v)
    if tag in _SCALAR_TYPES:
        cls = _SCALAR_TYPES[tag]
        return lambda v: type(v) is cls
    if tag is K.OPT:
        inner = fits(kind.args[0])
        return lambda v: v is None or inner(v)
    if tag is K.REF:
        savable = registry._by_class
        return lambda v: v is None or type(v) in savable
    if tag is K.ENUM:
        cls = kind.enum_cls
        if not compact_enum(cls):
            return lambda v: False
        return lambda v: type(v) is cls
    if tag is K.VALUE:
        cls = kind.codec.cls
        return lambda v: type(v) is cls
    if tag in _SEQ_TYPES:
        cls = _SEQ_TYPES[tag]
        inner = fits(kind.args[0])
        return lambda v: type(v) is cls and all(map(inner, v))
    if tag is K.TUPLE:
        inners = [fits(a) for a in kind.args]
        n = len(inners)
        return lambda v: (
            type(v) is tuple and len(v) == n and all(f(x) for f, x in zip(inners, v, strict=True))
        )
    if tag is K.DICT:
        kf, vf = (fits(a) for a in kind.args)
        return lambda v: type(v) is dict and all(map(kf, v)) and all(map(vf, v.values()))
    if tag is K.ANY:
        return lambda v: True
    raise StateError(f"no fit test for field kind {kind.descriptor}")


def compact(kind: Kind) -> Enc:
    """The compact encoder for a value that fits (containers identity-tracked)."""
    tag = kind.tag
    if tag in (K.BOOL, K.INT, K.FLOAT, K.STR, K.BYTES):
        return lambda v, owner, ctx: v
    if tag is K.REF or (tag is K.OPT and kind.args[0].tag is K.REF):
        # None is object 0 in the id table.

        def ref(v: Any, owner: Any, ctx: Any) -> Any:
            r = ctx.ids_get(id(v))
            return ctx.discover(v) if r is None else r

        return ref
    if tag is K.ANY:
        return lambda v, owner, ctx: ctx.dyn(v, owner)
    if tag is K.ENUM:
        return lambda v, owner, ctx: v._value_
    if tag is K.VALUE:
        codec = kind.codec
        if codec.items is not None:  # a mutable container: identity-tracked

            def tracked_value(v: Any, owner: Any, ctx: Any) -> Any:
                k = id(v)
                if k in ctx.cmemo:
                    return ctx.seen_again(v)
                ctx.cmemo[k] = owner
                ctx.hold(v)
                return codec.items(v, lambda x: ctx.dyn(x, owner))

            return tracked_value
        return lambda v, owner, ctx: dyn.plain_items(codec, v, ctx.dyn_plain, owner)
    if tag is K.OPT:
        inner = compact(kind.args[0])
        return lambda v, owner, ctx: None if v is None else inner(v, owner, ctx)
    if tag in (K.VARTUPLE, K.FROZENSET):
        inner = compact(kind.args[0])
        return lambda v, owner, ctx: [inner(x, owner, ctx) for x in v]
    if tag is K.TUPLE:
        inners = [compact(a) for a in kind.args]
        return lambda v, owner, ctx: [enc(x, owner, ctx) for enc, x in zip(inners, v, strict=True)]
    if tag in (K.LIST, K.SET, K.DICT, K.BYTEARRAY):
        body = container_body(kind)

        def tracked(v: Any, owner: Any, ctx: Any) -> Any:
            k = id(v)
            if k in ctx.cmemo:
                return ctx.seen_again(v)
            ctx.cmemo[k] = owner
            ctx.hold(v)
            return body(v, owner, ctx)

        return tracked
    raise StateError(f"no encoder for field kind {kind.descriptor}")


def container_body(kind: Kind) -> Enc:
    """A mutable container's content, its identity already recorded by the caller."""
    tag = kind.tag
    if tag is K.BYTEARRAY:
        return lambda v, owner, ctx: bytes(v)
    if tag is K.DICT:
        kenc = compact(kind.args[0])
        venc = compact(kind.args[1])
        return lambda v, owner, ctx: [
            [kenc(x, owner, ctx) for x in v],
            [venc(x, owner, ctx) for x in v.values()],
        ]
    inner = compact(kind.args[0])
    return lambda v, owner, ctx: [inner(x, owner, ctx) for x in v]


def slot(kind: Kind) -> Enc:
    """A slot's encoding: compact when the value fits, else the escape."""
    test, enc = fits(kind), compact(kind)
    return lambda v, owner, ctx: enc(v, owner, ctx) if test(v) else ctx.esc(v, owner)


def reslot(kind: Kind) -> Enc:
    """For a mutable container whose identity the generated code already recorded and
    whose fast item check failed: the content if it fits after all, else forget the
    identity (the escape records it again) and escape."""
    test, body = fits(kind), container_body(kind)

    def again(v: Any, owner: Any, ctx: Any) -> Any:
        if test(v):
            return body(v, owner, ctx)
        k = id(v)
        if k in ctx.cmemo:  # the typed engine does not record a container held once
            del ctx.cmemo[k]
        return ctx.esc(v, owner)

    return again


def plain_slot(kind: Kind) -> Enc:
    """A ``save[X]`` slot: what the save function returned, compact or escaped.  The
    result is fresh data, so nothing in it is identity-tracked."""
    test = fits(kind)
    return lambda v, owner, ctx: v if test(v) else ctx.esc_plain(v, owner)
