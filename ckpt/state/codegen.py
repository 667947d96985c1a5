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
import sys
from collections.abc import Callable
from dataclasses import MISSING
from itertools import repeat
from typing import Any

from ckpt.errors import StateError
from ckpt.state import codecache, fit, registry, values
from ckpt.state import wire as w
from ckpt.state.dyn import EnumMembers
from ckpt.state.schema import (
    IMMUTABLE_ZEROS,
    INT64_LIMIT,
    INT64_MIN,
    SCALARS,
    ZERO_LITERALS,
    K,
    Kind,
    Schema,
    compact_enum,
)
from ckpt.state.stats import setup_timer

_EMPTY_FACTORIES = {list: "[]", dict: "{}", set: "set()"}
_NONE = type(None)
_NO_ZERO = object()
_M, _L = INT64_MIN, INT64_LIMIT
# The fast, inline form of the fit test for scalars (README, "the per-slot rule"): it
# may send a fitting value to the slow path (a bool in an int field), never the reverse.
_FAST_TYPE = {K.BOOL: "bool", K.INT: "int", K.FLOAT: "float", K.STR: "str", K.BYTES: "bytes"}
_FAST_SETS = {
    K.BOOL: frozenset({bool}),
    K.INT: frozenset({int, bool}),
    K.FLOAT: frozenset({float}),
    K.STR: frozenset({str}),
    K.BYTES: frozenset({bytes}),
}


def _misfit(tag: K, x: str) -> str:
    """A condition true when scalar ``x`` may not fit (then the slow path decides)."""
    if tag is K.INT:
        return f"type({x}) is not int or not {_M} <= {x} < {_L}"
    return f"type({x}) is not {_FAST_TYPE[tag]}"


def _seq_misfit(src: _Source, tag: K, name: str, x: str) -> str:
    """A condition true when some item of the non-empty sequence ``x`` may not fit."""
    ok = src.const(name, _FAST_SETS[tag])
    cond = f"not {ok}.issuperset(map(type, {x}))"
    if tag is K.INT:
        cond += f" or min({x}) < {_M} or max({x}) >= {_L}"
    return cond


def _passes(kind: Kind, tagged: bool) -> bool:
    """A compact scalar slot holding its value itself (a version-1 tagged stream's
    scalar slots may hold self-describing values instead)."""
    return kind.tag in SCALARS and not tagged


def _is_ref(kind: Kind) -> bool:
    return kind.tag is K.REF or (kind.tag is K.OPT and kind.args[0].tag is K.REF)


def compile_function(
    name: str, source: str, globs: dict, filename: str, qualname: str, doc: str
) -> Callable:
    """Compile generated source, register it with linecache, return the named function."""
    with setup_timer():
        return _compile(name, source, globs, filename, qualname, doc)


def _compile(
    name: str, source: str, globs: dict, filename: str, qualname: str, doc: str
) -> Callable:
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


# --- element decoders for nested kinds (closures; used below the first level) ------


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
    if tag is K.VALUE:
        codec = kind.codec

        def value_dec(raw: Any, ctx: Any) -> Any:
            if raw is None and codec.items is not None:
                return None  # a shared container's other place (patched after loading)
            if type(raw) is not list:
                raise StateError(f"a {codec.name} value must be stored as an array")
            return values.from_plain(codec, [*map(ctx.dyn, raw)])

        return value_dec
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


def _unique_refs() -> int | None:
    """What ``sys.getrefcount`` says, inside a generated loop, of a container that only
    the field just read holds; None where counts cannot tell (no refcounts, or no GIL).

    Measured on code of the generated shape, with a dict-backed and a slot-backed field,
    and checked against a container held twice, rather than assumed: interpreters
    differ in which references the loop itself holds."""
    refs = getattr(sys, "getrefcount", None)
    gil = getattr(sys, "_is_gil_enabled", None)
    if refs is None or (gil is not None and not gil()):
        return None
    source = (
        "def probe(batch, out):\n"
        "    for o in batch:\n"
        "        v = o.x\n"
        "        out.append(__ckpt_refs(v))\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, "<ckpt refcount probe>", "exec"), {"__ckpt_refs": refs}, namespace)

    class Plain:
        pass

    class Slotted:
        __slots__ = ("x",)

    objs = [Plain(), Slotted(), Plain(), Slotted()]
    objs[0].x, objs[1].x = [], {}
    objs[2].x = objs[3].x = []
    counts: list[int] = []
    namespace["probe"](objs, counts)
    unique, slotted, shared, shared2 = counts
    return unique if unique == slotted and shared == shared2 == unique + 1 else None


UNIQUE_REFS = _unique_refs()


def build_save(sch: Schema) -> tuple[str, dict, str]:
    """Source of ``save_<Class>(batch, rows_append, ctx)``: encode a batch of objects."""
    fname = f"save_{_ident(sch.cls.__qualname__)}"
    src = _Source()
    src.globs["__ckpt_repeat"] = repeat
    src.globs["__ckpt_refs"] = sys.getrefcount if UNIQUE_REFS is not None else None
    src.globs["__ckpt_savable"] = registry._by_class
    src.add(0, f"def {fname}(__ckpt_batch, __ckpt_rows_append, __ckpt_ctx):")
    src.add(1, "__ckpt_ids_get = __ckpt_ctx.ids_get")
    src.add(1, "__ckpt_discover = __ckpt_ctx.discover")
    src.add(1, "__ckpt_fix_refs = __ckpt_ctx.fix_refs")
    src.add(1, "__ckpt_cmemo = __ckpt_ctx.cmemo")
    src.add(1, "__ckpt_hold = __ckpt_ctx.hold")
    src.add(1, "__ckpt_seen_again = __ckpt_ctx.seen_again")
    src.add(1, "__ckpt_dyn = __ckpt_ctx.dyn")
    src.add(1, "__ckpt_esc = __ckpt_ctx.esc")
    src.add(1, "for __ckpt_obj in __ckpt_batch:")
    if sch.before_save:
        src.add(2, "__ckpt_obj.__before_save__()")
    outs = []
    for spec in sch.fields:
        _emit_save_field(src, spec, spec.index, UNIQUE_REFS)
        outs.append(f"_e{spec.index}")
    # A row is a tuple (MessagePack writes it as the same array, and it is smaller).
    src.add(2, f"__ckpt_rows_append(({''.join(o + ', ' for o in outs)}))")
    return src.text(), src.globs, fname


def _elide_immutable(src: _Source, spec: Any, i: int, value: str, indent: int = 2) -> None:
    """Write Nil for the kind's zero value, recognised by identity (CPython keeps one
    0, False, "", b"" and ())."""
    zero = IMMUTABLE_ZEROS.get(spec.kind.tag, _NO_ZERO)
    if zero is not _NO_ZERO:
        src.add(indent, f"if {value} is {src.const(f'z{i}', zero)}:")
        src.add(indent + 1, f"{value} = None")


def _emit_save_field(src: _Source, spec: Any, i: int, unique_refs: int | None = None) -> None:
    """Fetch field ``i`` of ``__ckpt_obj`` and leave its slot encoding in ``_e{i}``.

    Every emitter ends with a value that fits written compactly and anything else
    escaped (``fit.slot`` decides whenever the inline test is not sure).
    ``unique_refs``: the reference count of a container held only by this field, seen
    from the loop (``UNIQUE_REFS``); None records every container's identity."""
    if spec.kind.tag in SCALARS:
        _save_scalar(src, spec, i, unique_refs)
        return
    src.add(2, f"_v{i} = __ckpt_obj.{spec.name}")
    _save_emitter(spec.kind)(src, spec, i, unique_refs)


_Emitter = Callable[[_Source, Any, int, "int | None"], None]
_MUTABLE = {K.LIST: "list", K.SET: "set", K.DICT: "dict", K.BYTEARRAY: "bytearray"}


def _save_emitter(kind: Kind) -> _Emitter:
    """How a field of ``kind`` is written: the first rule that matches, decided once per
    field before any code is generated."""
    tag = kind.tag
    if tag is K.ENUM:
        return _save_enum
    if _is_ref(kind):
        return _save_ref
    if tag is K.ANY:
        return _save_any
    if tag is K.SAVE:
        return _save_hook
    if tag is K.OPT and kind.args[0].tag in SCALARS:
        return _save_optional_scalar
    if tag in (K.VARTUPLE, K.FROZENSET) and kind.args[0].tag in SCALARS:
        return _save_scalar_sequence
    if tag is K.TUPLE and all(a.tag in SCALARS for a in kind.args):
        return _save_scalar_tuple
    value = kind if tag is K.VALUE else kind.args[0] if tag is K.OPT else None
    if value is not None and value.tag is K.VALUE and value.codec.flat:
        return _save_flat_value
    if tag not in _MUTABLE:
        return _save_checked
    return _save_container


def _save_scalar(src: _Source, spec: Any, i: int, unique_refs: int | None) -> None:
    """A plain scalar is its own encoding: fetched straight into the row slot.  Its zero
    stays as is: in MessagePack 0, "" and False take one byte, as Nil does."""
    e, slow = f"_e{i}", f"__ckpt_slot{i}"
    src.globs[slow] = fit.slot(spec.kind)
    src.add(2, f"{e} = __ckpt_obj.{spec.name}")
    src.add(2, f"if {_misfit(spec.kind.tag, e)}:")
    src.add(3, f"{e} = {slow}({e}, __ckpt_obj, __ckpt_ctx)")


def _save_enum(src: _Source, spec: Any, i: int, unique_refs: int | None) -> None:
    v, e, enum_cls = f"_v{i}", f"_e{i}", spec.kind.enum_cls
    if compact_enum(enum_cls):
        src.add(2, f"if type({v}) is {src.const(f'enum{i}', enum_cls)}:")
        src.add(3, f"{e} = {v}._value_")
        src.add(2, "else:")
        src.add(3, f"{e} = __ckpt_esc({v}, __ckpt_obj)")
    else:
        src.add(2, f"{e} = __ckpt_esc({v}, __ckpt_obj)")


def _save_ref(src: _Source, spec: Any, i: int, unique_refs: int | None) -> None:
    v, e = f"_v{i}", f"_e{i}"
    src.add(2, f"{e} = __ckpt_ids_get(id({v}))")
    src.add(2, f"if {e} is None:")
    src.add(3, f"if type({v}) in __ckpt_savable:")
    src.add(4, f"{e} = __ckpt_discover({v})")
    src.add(3, "else:")
    src.add(4, f"{e} = __ckpt_esc({v}, __ckpt_obj)")


def _save_any(src: _Source, spec: Any, i: int, unique_refs: int | None) -> None:
    """Polymorphic fields mostly hold None or an object already met: those are resolved
    inline (only savable objects and None are in the id table) and the rest left to the
    self-describing encoder."""
    v, e = f"_v{i}", f"_e{i}"
    src.add(2, f"if {v} is None:")
    src.add(3, f"{e} = None")
    src.add(2, "else:")
    src.add(3, f"{e} = __ckpt_ids_get(id({v}))")
    src.add(3, f"{e} = __ckpt_dyn({v}, __ckpt_obj) if {e} is None else {{{w.T_REF}: {e}}}")


def _save_hook(src: _Source, spec: Any, i: int, unique_refs: int | None) -> None:
    """A field with its own save function; a return annotation that says plain data
    lets what fits be its own encoding."""
    kind, v, e, slow = spec.kind, f"_v{i}", f"_e{i}", f"__ckpt_slot{i}"
    fn = src.const(f"save{i}", spec.opts.save)
    if not kind.args:
        src.add(2, f"{e} = __ckpt_ctx.dyn_plain({fn}({v}), __ckpt_obj)")
        return
    plain = kind.args[0]
    src.globs[slow] = fit.plain_slot(plain)
    src.add(2, f"{e} = {fn}({v})")
    if plain.tag in SCALARS:
        cond = _misfit(plain.tag, e)
    elif plain.tag is K.OPT:
        cond = f"{e} is not None and ({_misfit(plain.args[0].tag, e)})"
    elif plain.tag in (K.LIST, K.VARTUPLE):
        py = "list" if plain.tag is K.LIST else "tuple"
        cond = f"type({e}) is not {py} or ({e} and ({_seq_misfit(src, plain.args[0].tag, f'ok{i}', e)}))"
    else:
        cond = "True"
    src.add(2, f"if {cond}:")
    src.add(3, f"{e} = {slow}({e}, __ckpt_obj, __ckpt_ctx)")


def _save_optional_scalar(src: _Source, spec: Any, i: int, unique_refs: int | None) -> None:
    v, e, slow = f"_v{i}", f"_e{i}", f"__ckpt_slot{i}"
    src.globs[slow] = fit.slot(spec.kind)
    src.add(2, f"{e} = {v}")
    src.add(2, f"if {v} is not None and ({_misfit(spec.kind.args[0].tag, v)}):")
    src.add(3, f"{e} = {slow}({v}, __ckpt_obj, __ckpt_ctx)")


def _save_scalar_sequence(src: _Source, spec: Any, i: int, unique_refs: int | None) -> None:
    """``tuple[int, ...]`` or ``frozenset[str]``: MessagePack encodes a tuple as an
    array; a frozenset needs a list."""
    kind, v, e, slow = spec.kind, f"_v{i}", f"_e{i}", f"__ckpt_slot{i}"
    src.globs[slow] = fit.slot(kind)
    py = "tuple" if kind.tag is K.VARTUPLE else "frozenset"
    cond = _seq_misfit(src, kind.args[0].tag, f"ok{i}", v)
    src.add(2, f"if type({v}) is not {py} or ({v} and ({cond})):")
    src.add(3, f"{e} = {slow}({v}, __ckpt_obj, __ckpt_ctx)")
    src.add(2, "else:")
    src.add(3, f"{e} = {v}" if kind.tag is K.VARTUPLE else f"{e} = [*{v}]")
    _elide_immutable(src, spec, i, e, 3)


def _save_scalar_tuple(src: _Source, spec: Any, i: int, unique_refs: int | None) -> None:
    kind, v, e, slow = spec.kind, f"_v{i}", f"_e{i}", f"__ckpt_slot{i}"
    src.globs[slow] = fit.slot(kind)
    conds = [f"type({v}) is not tuple", f"len({v}) != {len(kind.args)}"]
    conds += [f"{_misfit(a.tag, f'{v}[{j}]')}" for j, a in enumerate(kind.args)]
    src.add(2, f"if {' or '.join(conds)}:")
    src.add(3, f"{e} = {slow}({v}, __ckpt_obj, __ckpt_ctx)")
    src.add(2, "else:")
    src.add(3, f"{e} = {v}")


def _save_flat_value(src: _Source, spec: Any, i: int, unique_refs: int | None) -> None:
    """A stdlib value (or an Optional one) of exactly its annotated type: its payload,
    built inline."""
    kind, v, e, slow = spec.kind, f"_v{i}", f"_e{i}", f"__ckpt_slot{i}"
    value = kind if kind.tag is K.VALUE else kind.args[0]
    src.globs[slow] = fit.slot(kind)
    cls = src.const(f"cls{i}", value.codec.cls)
    plain = src.const(f"plain{i}", value.codec.to_plain)
    if kind.tag is K.OPT:
        src.add(2, f"if {v} is None:")
        src.add(3, f"{e} = None")
        src.add(2, f"elif type({v}) is {cls}:")
    else:
        src.add(2, f"if type({v}) is {cls}:")
    src.add(3, f"{e} = {plain}({v})")
    src.add(2, "else:")
    src.add(3, f"{e} = {slow}({v}, __ckpt_obj, __ckpt_ctx)")


def _save_checked(src: _Source, spec: Any, i: int, unique_refs: int | None) -> None:
    """OPT of a non-scalar, TUPLE of non-scalars, VALUE, nested kinds: test, encode."""
    src.globs[f"__ckpt_slot{i}"] = fit.slot(spec.kind)
    src.add(2, f"_e{i} = __ckpt_slot{i}(_v{i}, __ckpt_obj, __ckpt_ctx)")
    _elide_immutable(src, spec, i, f"_e{i}")


def _save_container(src: _Source, spec: Any, i: int, unique_refs: int | None) -> None:
    """Mutable containers: exact type first (anything else is escaped), then identity
    (a container met again is shared), then the items; empty ones are written Nil."""
    kind, v, e, k = spec.kind, f"_v{i}", f"_e{i}", f"_k{i}"
    py = _MUTABLE[kind.tag]
    if unique_refs is None:
        src.add(2, f"{k} = id({v})")
        src.add(2, f"if type({v}) is not {py}:")
        src.add(3, f"{e} = __ckpt_esc({v}, __ckpt_obj)")
        src.add(2, f"elif {k} in __ckpt_cmemo:")
        src.add(3, f"{e} = __ckpt_seen_again({v})")
        src.add(2, "else:")
        src.add(3, f"__ckpt_cmemo[{k}] = __ckpt_obj")
        src.add(3, f"__ckpt_hold({v})")
    else:
        # A container whose only references are this field and the local variable is
        # reachable from nowhere else, so it cannot be met again: its identity need not
        # be recorded (on a large graph the memo is the biggest table of the walk).
        src.add(2, f"{k} = None")
        src.add(2, f"if type({v}) is not {py}:")
        src.add(3, f"{e} = __ckpt_esc({v}, __ckpt_obj)")
        src.add(2, f"elif __ckpt_refs({v}) > {unique_refs} and ({k} := id({v})) in __ckpt_cmemo:")
        src.add(3, f"{e} = __ckpt_seen_again({v})")
        src.add(2, "else:")
        src.add(3, f"if {k} is not None:")
        src.add(4, f"__ckpt_cmemo[{k}] = __ckpt_obj")
        src.add(4, f"__ckpt_hold({v})")
    src.add(3, f"if {v}:")
    for line in _container_expr(src, kind, i, v, unique_refs is not None):
        src.add(4, line)
    src.add(3, "else:")
    src.add(4, f"{e} = None")


def _container_expr(src: _Source, kind: Kind, i: int, v: str, maybe: bool = False) -> list[str]:
    """Statements that set ``_e{i}`` to the compact encoding of the non-empty container
    ``v`` (identity recorded, or when ``maybe`` recorded if ``_k{i}`` is not None), or
    to its escape when an item does not fit."""
    e = f"_e{i}"
    tag = kind.tag
    if tag is K.BYTEARRAY:
        return [f"{e} = bytes({v})"]
    again = src.const(f"again{i}", fit.reslot(kind))
    if tag in (K.LIST, K.SET):
        inner = kind.args[0]
        if inner.tag in SCALARS:
            # The list itself is already its compact encoding; a set needs a list.
            return [
                f"{e} = {v}" if tag is K.LIST else f"{e} = [*{v}]",
                f"if {_seq_misfit(src, inner.tag, f'ok{i}', e)}:",
                f"    {e} = {again}({v}, __ckpt_obj, __ckpt_ctx)",
            ]
        if _is_ref(inner):
            forget = (
                [f"        if _k{i} is not None:", f"            del __ckpt_cmemo[_k{i}]"]
                if maybe
                else [f"        del __ckpt_cmemo[_k{i}]"]
            )
            return [
                f"{e} = [*map(__ckpt_ids_get, map(id, {v}))]",
                f"if None in {e}:",
                f"    {e} = __ckpt_fix_refs({v}, {e})",
                f"    if {e} is None:",
                *forget,
                f"        {e} = __ckpt_esc({v}, __ckpt_obj)",
            ]
        return [f"{e} = {again}({v}, __ckpt_obj, __ckpt_ctx)"]
    kk, vk = kind.args
    if kk.tag in SCALARS and (vk.tag in SCALARS or _is_ref(vk)):
        lines = [f"_ek{i} = [*{v}]"]
        if vk.tag in SCALARS:
            lines.append(f"_ev{i} = [*{v}.values()]")
            check = f"{_seq_misfit(src, kk.tag, f'okk{i}', f'_ek{i}')} or " + _seq_misfit(
                src, vk.tag, f"okv{i}", f"_ev{i}"
            )
        else:
            lines += [
                f"_ev{i} = [*map(__ckpt_ids_get, map(id, {v}.values()))]",
                f"if None in _ev{i}:",
                f"    _ev{i} = __ckpt_fix_refs({v}.values(), _ev{i})",
            ]
            check = f"_ev{i} is None or {_seq_misfit(src, kk.tag, f'okk{i}', f'_ek{i}')}"
        lines += [
            f"if {check}:",
            f"    {e} = {again}({v}, __ckpt_obj, __ckpt_ctx)",
            "else:",
            f"    {e} = [_ek{i}, _ev{i}]",
        ]
        return lines
    return [f"{e} = {again}({v}, __ckpt_obj, __ckpt_ctx)"]


# --- the load function of a stream layout -------------------------------------------


def build_load(
    plan: Any, encoding: str, tagged: bool, checked: bool = False, version: int = w.FORMAT_VERSION
) -> tuple[str, dict, str]:
    """Source of ``load_<Class>(shells, rows, ctx)``: fill a type's objects from its rows.

    ``checked``: the stream lists this type as holding slot escapes, so every compact
    slot is first tested for one (a map); other types load with no such test.
    ``version`` 1 dyn streams mean the zero by Nil in a zero-kind slot; version 2 None.
    """
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
            values.append((spec.name, _dyn_load_expr(src, spec, f"_r{source}", version)))
        else:
            raw = f"_r{source}"
            expr = _load_expr(src, spec, raw, tagged)
            if checked and not _self_describing(spec.kind):
                escape = f"__ckpt_dyn({raw})"
                if spec.kind.tag is K.SAVE:
                    escape = f"{src.const(f'load_{spec.name}', spec.opts.load)}({escape})"
                expr = f"({escape} if type({raw}) is dict else {expr})"
            values.append((spec.name, expr))
    for spec in sch.unsaved:
        values.append((spec.name, _default_expr(src, spec)))
    if sch.has_dict and _plain_stores(sch.cls, [name for name, _ in values]):
        # Plain attribute stores fill the instance's own inline values (keys shared
        # with every instance of the class) instead of replacing them with a new dict
        # per object: on a large graph about 40% less memory per object, and faster.
        for name, expr in values:
            src.add(2, f"__ckpt_obj.{name} = {expr}")
        if not values:
            src.add(2, "pass")
    elif sch.has_dict:
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


def _plain_stores(cls: type, names: list[str]) -> bool:
    """``obj.name = value`` does exactly what assigning the instance dict would: the
    class keeps ``object.__setattr__`` and no class in its MRO has a data descriptor
    (property, slot, ...) of any of these names."""
    if cls.__setattr__ is not object.__setattr__:
        return False
    for name in names:
        if not name.isidentifier():
            return False
        for klass in cls.__mro__:
            if name in klass.__dict__:
                kind = type(klass.__dict__[name])
                if hasattr(kind, "__set__") or hasattr(kind, "__delete__"):
                    return False
                break
    return True


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


def _self_describing(kind: Kind) -> bool:
    """Slots written self-describing anyway (never escaped)."""
    return kind.tag is K.ANY or (kind.tag is K.SAVE and not kind.args)


def _dyn_load_expr(src: _Source, spec: Any, raw: str, version: int) -> str:
    expr = f"__ckpt_dyn({raw})"
    if spec.kind.tag is K.SAVE:
        expr = f"{src.const(f'load_{spec.name}', spec.opts.load)}({expr})"
    if version >= 2:
        return expr  # Nil is None in a dyn slot
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
    if tag is K.VALUE:
        dec = src.const(f"dec_{spec.name}", elem_decoder(kind))
        return f"{dec}({raw}, __ckpt_ctx)"
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
