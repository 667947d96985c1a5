"""Source builders for the typed engine (one function per class, or per stream layout).

Each builder returns ``(source, globals)`` and never calls ``exec``; ``compile_function``
does that, registering the source with ``linecache`` under a name such as
``<ckpt generated save mod.Task>`` so tracebacks, pdb and ``inspect.getsource`` show it.
Everything the generated code needs from outside comes in through an explicit globals
dict whose names start with ``__ckpt_``, or through the per-walk context argument, so a
field name can never collide with them and the code never reads this module's globals.

The strategy for each field is decided once, from its kind, before any loop runs; the
generated loop then does no per-value type dispatch where the annotation already says
what the value is.  Python 3.11 builds a frame for every comprehension, so lists of
references are encoded and decoded with ``map`` over C callables instead.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from dataclasses import MISSING
from itertools import repeat
from typing import Any

from ckpt.errors import StateError
from ckpt.state import codecache
from ckpt.state import wire as w
from ckpt.state.dyn import EnumMembers
from ckpt.state.schema import IMMUTABLE_ZEROS, SCALARS, ZERO_LITERALS, K, Kind, Schema

_EMPTY_FACTORIES = {list: "[]", dict: "{}", set: "set()"}
_NONE = type(None)
_NO_ZERO = object()
# What MessagePack round-trips exactly in a slot of each scalar kind.  Anything else
# (an IntEnum in an int field, a str subclass, an int beyond 64 bits) makes the typed
# writer start again in "tagged" mode, where scalar slots may hold tagged values.
OK_TYPES = {
    K.BOOL: frozenset({bool, _NONE}),
    K.INT: frozenset({int, bool, _NONE}),
    K.FLOAT: frozenset({float, int, bool, _NONE}),
    K.STR: frozenset({str, _NONE}),
    K.BYTES: frozenset({bytes, _NONE}),
}


def _passes(kind: Kind, tagged: bool) -> bool:
    """A scalar that is its own encoding (checked, not converted) in this mode."""
    return kind.tag in SCALARS and not tagged


def _ok_types(kinds: Any) -> frozenset:
    return frozenset().union(*(OK_TYPES[k.tag] for k in kinds))


def compile_function(
    name: str, source: str, globs: dict, filename: str, qualname: str, doc: str
) -> Callable:
    """Compile generated source, register it with linecache, return the named function."""
    code = codecache.compiled(source, filename)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {}
    exec(code, globs, namespace)
    fn = namespace[name]
    fn.__qualname__ = qualname
    fn.__doc__ = doc
    return fn


def _ident(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


# --- element codecs for nested kinds (closures; used below the first level) ---------


def elem_encoder(kind: Kind, tagged: bool) -> Callable[[Any, Any, Any], Any]:
    """``enc(value, owner, ctx)`` for a value of ``kind`` nested inside a container."""
    tag = kind.tag
    if tag in SCALARS:
        if tagged:
            return lambda v, owner, ctx: ctx.scalar(v)
        ok = OK_TYPES[tag]

        def exact(v: Any, owner: Any, ctx: Any) -> Any:
            if type(v) not in ok:
                ctx.untyped(v)
            return v

        return exact
    if tag is K.REF:

        def ref(v: Any, owner: Any, ctx: Any) -> Any:
            r = ctx.ids_get(id(v))
            return ctx.discover(v) if r is None else r

        return ref
    if tag is K.ANY:
        return lambda v, owner, ctx: ctx.dyn(v, owner)
    if tag is K.ENUM:
        return lambda v, owner, ctx: v._value_
    if tag is K.OPT:
        inner = elem_encoder(kind.args[0], tagged)
        return lambda v, owner, ctx: None if v is None else inner(v, owner, ctx)
    if tag in (K.VARTUPLE, K.FROZENSET):
        inner = elem_encoder(kind.args[0], tagged)
        return lambda v, owner, ctx: [inner(x, owner, ctx) for x in v]
    if tag is K.TUPLE:
        inners = [elem_encoder(a, tagged) for a in kind.args]

        def fixed(v: Any, owner: Any, ctx: Any) -> Any:
            if len(v) != len(inners):
                raise StateError(f"a {kind.descriptor} value has {len(v)} items")
            return [enc(x, owner, ctx) for enc, x in zip(inners, v, strict=True)]

        return fixed
    if tag in (K.LIST, K.SET, K.DICT, K.BYTEARRAY):
        body = _container_body(kind, tagged)

        def tracked(v: Any, owner: Any, ctx: Any) -> Any:
            k = id(v)
            if k in ctx.cmemo:
                return ctx.seen_again(v)
            ctx.cmemo[k] = owner
            return body(v, owner, ctx)

        return tracked
    raise StateError(f"no encoder for field kind {kind.descriptor}")


def _container_body(kind: Kind, tagged: bool) -> Callable[[Any, Any, Any], Any]:
    tag = kind.tag
    if tag is K.BYTEARRAY:
        return lambda v, owner, ctx: bytes(v)
    if tag is K.DICT:
        kenc = elem_encoder(kind.args[0], tagged)
        venc = elem_encoder(kind.args[1], tagged)
        return lambda v, owner, ctx: [
            [kenc(x, owner, ctx) for x in v],
            [venc(x, owner, ctx) for x in v.values()],
        ]
    inner = elem_encoder(kind.args[0], tagged)
    return lambda v, owner, ctx: [inner(x, owner, ctx) for x in v]


def elem_decoder(kind: Kind) -> Callable[[Any, Any], Any]:
    """``dec(raw, ctx)`` for a value of ``kind`` nested inside a container."""
    tag = kind.tag
    if tag in SCALARS:
        return lambda raw, ctx: ctx.dyn(raw) if type(raw) is dict else raw
    if tag is K.REF:
        return lambda raw, ctx: ctx.oget(raw)
    if tag is K.ANY:
        return lambda raw, ctx: ctx.dyn(raw)
    if tag is K.ENUM:
        members = EnumMembers(kind.enum_cls)
        return lambda raw, ctx: members[raw]
    if tag is K.OPT:
        inner = elem_decoder(kind.args[0])
        return lambda raw, ctx: None if raw is None else inner(raw, ctx)
    if tag is K.BYTEARRAY:
        return lambda raw, ctx: bytearray() if raw is None else ctx.bytearray(raw)
    if tag is K.DICT:
        kdec = elem_decoder(kind.args[0])
        vdec = elem_decoder(kind.args[1])

        def dict_dec(raw: Any, ctx: Any) -> Any:
            if raw is None:
                return {}
            keys, values = raw
            return dict(
                zip([kdec(x, ctx) for x in keys], [vdec(x, ctx) for x in values], strict=True)
            )

        return dict_dec
    if tag is K.TUPLE:
        inners = [elem_decoder(a) for a in kind.args]

        def fixed(raw: Any, ctx: Any) -> Any:
            if len(raw) != len(inners):
                raise StateError(f"a {kind.descriptor} value has {len(raw)} items")
            return tuple(dec(x, ctx) for dec, x in zip(inners, raw, strict=True))

        return fixed
    inner = elem_decoder(kind.args[0])
    build = {K.LIST: list, K.SET: set, K.FROZENSET: frozenset, K.VARTUPLE: tuple}[tag]
    return lambda raw, ctx: build() if raw is None else build([inner(x, ctx) for x in raw])


# --- the save function of a class ---------------------------------------------------


class _Source:
    """Lines of generated source plus the globals they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.globs: dict[str, Any] = {}

    def add(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def const(self, name: str, value: Any) -> str:
        key = f"__ckpt_{name}"
        self.globs[key] = value
        return key

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def build_save(sch: Schema, tagged: bool) -> tuple[str, dict, str]:
    """Source of ``save_<Class>(batch, rows_append, ctx)``: encode a batch of objects."""
    fname = f"save_{_ident(sch.cls.__qualname__)}"
    src = _Source()
    src.globs["__ckpt_repeat"] = repeat
    src.add(0, f"def {fname}(__ckpt_batch, __ckpt_rows_append, __ckpt_ctx):")
    src.add(1, "__ckpt_ids_get = __ckpt_ctx.ids_get")
    src.add(1, "__ckpt_discover = __ckpt_ctx.discover")
    src.add(1, "__ckpt_cmemo = __ckpt_ctx.cmemo")
    src.add(1, "__ckpt_seen_again = __ckpt_ctx.seen_again")
    src.add(1, "__ckpt_fix_refs = __ckpt_ctx.fix_refs")
    src.add(1, "__ckpt_dyn = __ckpt_ctx.dyn")
    src.add(1, "__ckpt_scalar = __ckpt_ctx.scalar")
    src.add(1, "__ckpt_untyped = __ckpt_ctx.untyped")
    src.add(1, "for __ckpt_obj in __ckpt_batch:")
    if sch.before_save:
        # A save redone in tagged mode must not run a hook twice.
        src.add(2, "if id(__ckpt_obj) not in __ckpt_ctx.hooked:")
        src.add(3, "__ckpt_ctx.hooked.add(id(__ckpt_obj))")
        src.add(3, "__ckpt_obj.__before_save__()")
    outs = []
    for spec in sch.fields:
        _emit_save_field(src, spec, spec.index, tagged)
        outs.append(f"_e{spec.index}")
    src.add(2, f"__ckpt_rows_append([{', '.join(outs)}])")
    return src.text(), src.globs, fname


def _elide_immutable(src: _Source, spec: Any, i: int, value: str) -> None:
    """Write Nil for the kind's zero value, recognised by identity (CPython keeps one
    0, False, "", b"" and ())."""
    zero = IMMUTABLE_ZEROS.get(spec.kind.tag, _NO_ZERO)
    if zero is not _NO_ZERO:
        src.add(2, f"if {value} is {src.const(f'z{i}', zero)}:")
        src.add(3, f"{value} = None")


def _emit_save_field(src: _Source, spec: Any, i: int, tagged: bool) -> None:
    """Fetch field ``i`` of ``__ckpt_obj`` and leave its encoding in ``_e{i}``."""
    kind, tag, v, e = spec.kind, spec.kind.tag, f"_v{i}", f"_e{i}"
    if _passes(kind, tagged):
        # A plain scalar is its own encoding: fetch it straight into the row slot and
        # check its exact type.  Its zero stays as is: in MessagePack 0, "" and False
        # take one byte, as Nil does.
        src.add(2, f"{e} = __ckpt_obj.{spec.name}")
        src.add(2, f"if type({e}) not in {src.const(f'ok{i}', OK_TYPES[tag])}:")
        src.add(3, f"__ckpt_untyped({e})")
        return
    src.add(2, f"{v} = __ckpt_obj.{spec.name}")
    if tag is K.ENUM:
        src.add(2, f"{e} = {v}._value_")
        return
    if tag in SCALARS:  # tagged mode: zeros as Nil, anything else checked by scalar()
        src.add(2, f"{e} = {v}")
        _elide_immutable(src, spec, i, e)
        src.add(2, f"if {e} is not None:")
        src.add(3, f"{e} = __ckpt_scalar({e})")
        return
    if tag is K.REF or (tag is K.OPT and kind.args[0].tag is K.REF):
        src.add(2, f"{e} = __ckpt_ids_get(id({v}))")
        src.add(2, f"if {e} is None:")
        src.add(3, f"{e} = __ckpt_discover({v})")
        return
    if tag is K.ANY:
        # Polymorphic fields mostly hold None or an object already met: resolve those
        # inline (only savable objects and None are in the id table) and leave the
        # rest to the self-describing encoder.
        src.add(2, f"if {v} is None:")
        src.add(3, f"{e} = None")
        src.add(2, "else:")
        src.add(3, f"{e} = __ckpt_ids_get(id({v}))")
        src.add(3, f"{e} = __ckpt_dyn({v}, __ckpt_obj) if {e} is None else {{{w.T_REF}: {e}}}")
        return
    if tag is K.SAVE:
        fn = src.const(f"save{i}", spec.opts.save)
        if not kind.args:
            src.add(2, f"{e} = __ckpt_ctx.dyn_plain({fn}({v}), __ckpt_obj)")
            return
        # The return annotation says plain data: the saved value is its own encoding.
        src.add(2, f"{e} = {fn}({v})")
        if tagged:  # plain data always holds scalars, which tagged mode must check
            src.add(2, f"{e} = __ckpt_ctx.dyn_plain({e}, __ckpt_obj)")
        return
    if tag is K.OPT and _passes(kind.args[0], tagged):
        src.add(2, f"{e} = {v}")
        src.add(2, f"if type({v}) not in {src.const(f'ok{i}', OK_TYPES[kind.args[0].tag])}:")
        src.add(3, f"__ckpt_untyped({v})")
        return
    if tag is K.OPT:
        enc = src.const(f"enc{i}", elem_encoder(kind.args[0], tagged))
        src.add(2, f"{e} = None if {v} is None else {enc}({v}, __ckpt_obj, __ckpt_ctx)")
        return
    if tag in (K.TUPLE, K.VARTUPLE, K.FROZENSET):
        inner = kind.args
        if all(_passes(a, tagged) for a in inner):
            # MessagePack encodes a tuple as an array; a frozenset needs a list.
            src.add(2, f"{e} = {v}" if tag is not K.FROZENSET else f"{e} = [*{v}]")
            src.add(
                2, f"if not {src.const(f'ok{i}', _ok_types(inner))}.issuperset(map(type, {v})):"
            )
            src.add(3, f"__ckpt_untyped({v})")
        else:
            enc = src.const(f"enc{i}", elem_encoder(kind, tagged))
            src.add(2, f"{e} = {enc}({v}, __ckpt_obj, __ckpt_ctx)")
        _elide_immutable(src, spec, i, e)
        return
    # Mutable containers: identity-tracked, elided when empty and the default is empty.
    elide_empty = spec.elidable
    src.add(2, f"_k{i} = id({v})")
    src.add(2, f"if _k{i} in __ckpt_cmemo:")
    src.add(3, f"{e} = __ckpt_seen_again({v})")
    src.add(2, "else:")
    src.add(3, f"__ckpt_cmemo[_k{i}] = __ckpt_obj")
    body = _container_expr(src, kind, i, v, tagged)
    if elide_empty:
        src.add(3, f"if {v}:")
        for line in body:
            src.add(4, line)
        src.add(3, "else:")
        src.add(4, f"{e} = None")
    else:
        for line in body:
            src.add(3, line)


def _container_expr(src: _Source, kind: Kind, i: int, v: str, tagged: bool) -> list[str]:
    """Statements that set ``_e{i}`` to the compact encoding of container ``v``."""
    e = f"_e{i}"
    tag = kind.tag
    if tag is K.BYTEARRAY:
        return [f"{e} = bytes({v})"]
    if tag in (K.LIST, K.SET):
        inner = kind.args[0]
        return _seq_expr(src, inner, i, v, e, tagged, copy=tag is K.SET)
    # dict: [keys, values]
    kk, vk = kind.args
    lines = _seq_expr(src, kk, f"{i}k", v, f"_ek{i}", tagged, copy=True)
    lines += _seq_expr(src, vk, f"{i}v", f"{v}.values()", f"_ev{i}", tagged, copy=True)
    lines.append(f"{e} = [_ek{i}, _ev{i}]")
    return lines


def _seq_expr(
    src: _Source, inner: Kind, i: Any, v: str, e: str, tagged: bool, copy: bool
) -> list[str]:
    if _passes(inner, tagged):
        # The list itself is already its compact encoding; sets and views need a list.
        ok = src.const(f"ok{i}", OK_TYPES[inner.tag])
        return [
            f"{e} = [*{v}]" if copy else f"{e} = {v}",
            f"if not {ok}.issuperset(map(type, {e})):",
            f"    __ckpt_untyped({v})",
        ]
    if inner.tag is K.REF or (inner.tag is K.OPT and inner.args[0].tag is K.REF):
        return [
            f"{e} = [*map(__ckpt_ids_get, map(id, {v}))]",
            f"if None in {e}:",
            f"    {e} = __ckpt_fix_refs({v}, {e})",
        ]
    if inner.tag is K.ENUM:
        return [f"{e} = [x._value_ for x in {v}]"]
    enc = src.const(f"enc{i}", elem_encoder(inner, tagged))
    return [f"{e} = [*map({enc}, {v}, __ckpt_repeat(__ckpt_obj), __ckpt_repeat(__ckpt_ctx))]"]


# --- the load function of a stream layout -------------------------------------------


def build_load(plan: Any, encoding: str, tagged: bool) -> tuple[str, dict, str]:
    """Source of ``load_<Class>(shells, rows, ctx)``: fill a type's objects from its rows."""
    sch = plan.schema
    fname = f"load_{_ident(sch.cls.__qualname__)}"
    src = _Source()
    src.globs["__ckpt_osetattr"] = object.__setattr__
    targets = [f"_r{j}" for j in range(plan.nfields)]
    if plan.nfields == 0:
        unpack = "__ckpt_row"
    elif plan.nfields == 1:
        unpack = f"({targets[0]},)"
    else:
        unpack = f"({', '.join(targets)})"
    src.add(0, f"def {fname}(__ckpt_shells, __ckpt_rows, __ckpt_ctx):")
    src.add(1, "__ckpt_oget = __ckpt_ctx.oget")
    src.add(1, "__ckpt_dyn = __ckpt_ctx.dyn")
    src.add(1, f"for __ckpt_obj, {unpack} in zip(__ckpt_shells, __ckpt_rows):")
    values: list[tuple[str, str]] = []
    for spec, source in plan.sources:
        if source is None:
            values.append((spec.name, _default_expr(src, spec)))
        elif encoding == w.DYN:
            values.append((spec.name, _dyn_load_expr(src, spec, f"_r{source}")))
        else:
            values.append((spec.name, _load_expr(src, spec, f"_r{source}", tagged)))
    for spec in sch.unsaved:
        values.append((spec.name, _default_expr(src, spec)))
    if sch.has_dict:
        items = ", ".join(f"{name!r}: {expr}" for name, expr in values)
        if sch.frozen:
            src.add(2, f"__ckpt_osetattr(__ckpt_obj, '__dict__', {{{items}}})")
        else:
            src.add(2, f"__ckpt_obj.__dict__ = {{{items}}}")
    else:
        for name, expr in values:
            if sch.frozen:
                src.add(2, f"__ckpt_osetattr(__ckpt_obj, {name!r}, {expr})")
            else:
                src.add(2, f"__ckpt_obj.{name} = {expr}")
        if not values:
            src.add(2, "pass")
    return src.text(), src.globs, fname


def _default_expr(src: _Source, spec: Any) -> str:
    if spec.factory is not MISSING:
        literal = _EMPTY_FACTORIES.get(spec.factory)
        return literal or f"{src.const(f'f_{spec.name}', spec.factory)}()"
    return src.const(f"d_{spec.name}", spec.default)


def _with_default(src: _Source, spec: Any, raw: str, expr: str) -> str:
    """``expr``, or the kind's zero value where the writer put Nil."""
    if spec.elidable:
        return f"({ZERO_LITERALS[spec.kind.tag]} if {raw} is None else {expr})"
    return expr


def _dyn_load_expr(src: _Source, spec: Any, raw: str) -> str:
    expr = f"__ckpt_dyn({raw})"
    if spec.kind.tag is K.SAVE:
        expr = f"{src.const(f'load_{spec.name}', spec.opts.load)}({expr})"
    return _with_default(src, spec, raw, expr)


# Kinds whose only falsy values are None and the zero (an int field may hold False, a
# float field -0.0 or 0, so those keep the explicit ``is None`` test).
_FALSY_IS_ZERO = frozenset({K.STR, K.BOOL, K.BYTES})


def _load_expr(src: _Source, spec: Any, raw: str, tagged: bool) -> str:
    kind, tag = spec.kind, spec.kind.tag
    if tag in SCALARS and tagged:
        return _with_default(
            src, spec, raw, f"(__ckpt_dyn({raw}) if type({raw}) is dict else {raw})"
        )
    if tag in _FALSY_IS_ZERO and spec.elidable:
        return f"({raw} or {ZERO_LITERALS[tag]})"  # Nil and the zero both load as the zero
    if tag in SCALARS:
        return _with_default(src, spec, raw, raw)
    if tag is K.OPT and _passes(kind.args[0], tagged):
        return raw
    if tag is K.TUPLE and all(_passes(a, tagged) for a in kind.args):
        return _with_default(src, spec, raw, f"tuple({raw})")
    if tag is K.REF or (tag is K.OPT and kind.args[0].tag is K.REF):
        return f"__ckpt_oget({raw})"
    if tag is K.ANY:
        return f"__ckpt_dyn({raw})"
    if tag is K.SAVE:
        load = src.const(f"load_{spec.name}", spec.opts.load)
        if not kind.args or tagged:
            return f"{load}(__ckpt_dyn({raw}))"
        plain = kind.args[0].tag
        conv = f"tuple({raw})" if plain in (K.TUPLE, K.VARTUPLE) else raw
        return f"{load}({conv})"
    if tag is K.ENUM:
        members = src.const(f"members_{spec.name}", EnumMembers(kind.enum_cls))
        return _with_default(src, spec, raw, f"{members}[{raw}]")
    if tag in (K.LIST, K.SET, K.FROZENSET, K.VARTUPLE):
        inner = kind.args[0]
        build = {K.LIST: "", K.SET: "set", K.FROZENSET: "frozenset", K.VARTUPLE: "tuple"}[tag]
        if _passes(inner, tagged):
            expr = f"{build}({raw})" if build else raw
        elif inner.tag is K.REF or (inner.tag is K.OPT and inner.args[0].tag is K.REF):
            expr = f"{build}(map(__ckpt_oget, {raw}))" if build else f"[*map(__ckpt_oget, {raw})]"
        else:
            dec = src.const(f"dec_{spec.name}", elem_decoder(kind))
            return _with_default(src, spec, raw, f"{dec}({raw}, __ckpt_ctx)")
        # Nil: an empty container, or a shared container's other place (patched later).
        return _with_default(src, spec, raw, expr)
    if tag is K.DICT:
        kk, vk = kind.args
        simple_key = _passes(kk, tagged)
        if simple_key and _passes(vk, tagged):
            expr = f"dict(zip({raw}[0], {raw}[1], strict=True))"
        elif simple_key and vk.tag is K.REF:
            expr = f"dict(zip({raw}[0], map(__ckpt_oget, {raw}[1]), strict=True))"
        else:
            dec = src.const(f"dec_{spec.name}", elem_decoder(kind))
            return _with_default(src, spec, raw, f"{dec}({raw}, __ckpt_ctx)")
        return _with_default(src, spec, raw, expr)
    if tag is K.BYTEARRAY:
        return _with_default(src, spec, raw, f"__ckpt_ctx.bytearray({raw})")
    # OPT of a non-reference kind, TUPLE, and anything nested: a decoder closure.
    dec = src.const(f"dec_{spec.name}", elem_decoder(kind))
    return _with_default(src, spec, raw, f"{dec}({raw}, __ckpt_ctx)")


def scalar_encoder(walk: Any) -> Callable[[Any], Any]:
    """Tagged mode: a scalar slot's value as itself when MessagePack keeps it exactly,
    else self-describing (a big int, an enum member, a subclass instance)."""
    from ckpt.state import dyn

    plain = dyn.make_encoder(walk, track=False)
    exact = frozenset({bool, float, str, bytes, _NONE})

    def scalar(v: Any) -> Any:
        t = type(v)
        if t in exact or (t is int and w.INT_MIN <= v < w.INT_LIMIT):
            return v
        return plain(v, None)

    return scalar
