"""The native engine's per-class plans: what the C core does with each field of a class
when it saves one (``_plan_for``: an op code, masks, an element or nest program, and the
typed engine's own slot function for whatever C does not take) and when it fills one
from a stream layout (``_load_plan``: op, zero, element program, slot decoder).

A plan is built once per class (per stream layout, for loads) and cached on its
TypeInfo; every choice here mirrors one the typed engine's code builder makes, so the
native stream stays typed's byte for byte.
"""

from __future__ import annotations

import enum
import inspect
import sys
from dataclasses import MISSING
from itertools import repeat
from typing import Any

from ckpt.state import codegen, dyn, graph, schema
from ckpt.state import wire as w
from ckpt.state.dyn import EnumMembers
from ckpt.state.native_core import (
    _M_ANY,
    _M_BOOL,
    _M_BYTES,
    _M_ENUM,
    _M_FLOAT,
    _M_INT,
    _M_NONE,
    _M_REF,
    _M_STR,
    _VALUE_KINDS,
    B_FROZENSET,
    B_LIST,
    B_SET,
    B_TUPLE,
    E_ANY,
    E_ENUM,
    E_LIST,
    E_LIST_REF,
    E_NEST,
    E_NONE,
    E_REF,
    E_SCALAR,
    E_TUPLE,
    EK_ANY,
    EK_BYTEARRAY,
    EK_DICT,
    EK_ENUM,
    EK_OPT,
    EK_PASS,
    EK_REF,
    EK_SEQ,
    EK_TUPLE,
    L_ANY,
    L_DEFAULT,
    L_DICT,
    L_DICT_REF,
    L_ELEM,
    L_ENUM,
    L_FACTORY,
    L_FALSY_ZERO,
    L_NONE_ZERO,
    L_PY,
    L_RAW,
    L_REF,
    L_SAVE,
    L_SEQ,
    L_SEQ_REF,
    L_SEQ_TUPLE,
    L_TUPLE,
    L_VALUE,
    MAX_ELEM_DEPTH,
    MAX_ELEM_NODES,
    MAX_TUPLE_ITEMS,
    OP_ANY,
    OP_BYTEARRAY,
    OP_DICT,
    OP_ENUM,
    OP_ENUM_DYN,
    OP_FROZENSET,
    OP_LIST,
    OP_PY,
    OP_REF,
    OP_SAVE,
    OP_SCALAR,
    OP_SET,
    OP_TUPLE,
    OP_VALUE,
    SK_DICT,
    SK_ENUM,
    SK_FROZENSET,
    SK_LIST,
    SK_REF,
    SK_SCALAR,
    SK_SET,
    Z_CALL,
    Z_DICT,
    Z_LIST,
    Z_OBJECT,
    Z_SET,
    _core,
)
from ckpt.state.schema import SCALARS, K, Kind, Schema


def _typed_save_source(sch: Schema) -> tuple[str, dict, str]:
    return codegen.build_save(sch)


def _emit_field(src: Any, spec: Any) -> None:
    codegen._emit_save_field(src, spec, spec.index)


def _fast_types(tag: K) -> frozenset:
    """Exact types a scalar slot takes as is on the fast path (a subset of what fits)."""
    return codegen._FAST_SETS[tag]


# save: what the C core takes of a field, its nest program's containers, scalar bits
_SK_CONTAINERS = {K.LIST: SK_LIST, K.SET: SK_SET, K.FROZENSET: SK_FROZENSET, K.DICT: SK_DICT}
_BITS = {type(None): _M_NONE, bool: _M_BOOL, int: _M_INT, float: _M_FLOAT, str: _M_STR}
_BITS[bytes] = _M_BYTES
_NONE = frozenset({type(None)})


def _mask(types_: frozenset) -> int:
    m = 0
    for t in types_:
        m |= _BITS[t]
    return m


def _elem_op(kind: Kind) -> tuple[int, int]:
    """The C element op for items of a container field (E_NONE: not handled in C)."""
    tag = kind.tag
    if tag in SCALARS:
        return E_SCALAR, _mask(_fast_types(tag))
    if tag is K.OPT and kind.args[0].tag in SCALARS:
        return E_SCALAR, _mask(_fast_types(kind.args[0].tag) | _NONE)
    if tag is K.REF or (tag is K.OPT and kind.args[0].tag is K.REF):
        return E_REF, 0
    if tag is K.ANY:
        return E_ANY, 0
    if tag is K.ENUM:  # C takes only a compact enum's members (_elem_arg)
        return E_ENUM, 0
    if tag is K.OPT and kind.args[0].tag is K.ENUM:
        return E_ENUM, _M_NONE
    if _scalar_tuple(kind):
        return E_TUPLE, _mask(frozenset().union(*(_fast_types(a.tag) for a in kind.args)))
    if _pos_tuple(kind):  # tuple[Node, int]: per position, its masks in the element arg
        return E_TUPLE, 0
    if tag is K.LIST:  # one level: a list of scalars or of references (lists, dict values)
        inner = kind.args[0]
        if inner.tag in SCALARS:
            return E_LIST, _mask(_fast_types(inner.tag))
        if inner.tag is K.OPT and inner.args[0].tag in SCALARS:
            return E_LIST, _mask(_fast_types(inner.args[0].tag) | _NONE)
        if _is_ref(inner):
            return E_LIST_REF, 0
    if _nest_prog(kind) is not None:  # containers deeper: the field's nest program
        return E_NEST, 0
    return E_NONE, 0  # other nested kinds inside containers: the slot function


def _nest_prog(kind: Kind) -> tuple | None:
    """The nest program (SK_* nodes ``(code, mask, enum class or None, a, b)``, a
    container's nodes below it after it, node 0 the root) by which C tests and writes a
    value of ``kind`` as typed's ``fit.fits`` and ``fit.compact`` do; None where a node
    has no C writing (Any, tuples, bytearray, value codecs, an enum typed escapes) or
    the annotation is deeper or larger than C takes."""
    nodes: list = []

    def add(k: Kind, depth: int) -> bool:
        if depth >= MAX_ELEM_DEPTH or len(nodes) >= MAX_ELEM_NODES:
            return False
        if _is_ref(k):  # None is object 0
            nodes.append((SK_REF, 0, None, -1, -1))
            return True
        none = 0
        if k.tag is K.OPT:
            k, none = k.args[0], _M_NONE
        tag = k.tag
        if tag in SCALARS:
            nodes.append((SK_SCALAR, _mask(_fast_types(tag)) | none, None, -1, -1))
            return True
        if tag is K.ENUM:
            if not _compact_enum(k.enum_cls):
                return False
            nodes.append((SK_ENUM, none, k.enum_cls, -1, -1))
            return True
        if tag not in _SK_CONTAINERS:
            return False
        at = len(nodes)
        nodes.append(None)
        below = []
        for arg in k.args:
            below.append(len(nodes))
            if not add(arg, depth + 1):
                return False
        a, b = (*below, -1)[:2]  # items; or keys and values
        nodes[at] = (_SK_CONTAINERS[tag], none, None, a, b)
        return True

    return tuple(nodes) if add(kind, 0) else None


def _elem_arg(kind: Kind, op: int) -> Any:
    """An element op's extra: an enum's class (None where no member fits: typed escapes
    every member of an enum that is not compact), or a fixed tuple's per-item masks."""
    if op == E_ENUM:
        cls = (kind.args[0] if kind.tag is K.OPT else kind).enum_cls
        return cls if _compact_enum(cls) else None
    if op == E_TUPLE and kind.tag is K.TUPLE:
        return tuple(map(_pos, kind.args))
    if op == E_NEST:
        return _nest_prog(kind)
    return None


def _scalar_tuple(kind: Kind) -> bool:
    """``tuple[A, B, ...]`` (at most MAX_TUPLE_ITEMS) or ``tuple[X, ...]`` of scalars."""
    if kind.tag is K.TUPLE:
        n = len(kind.args)
        if not 0 < n <= MAX_TUPLE_ITEMS:
            return False
    elif kind.tag is not K.VARTUPLE:
        return False
    return all(a.tag in SCALARS for a in kind.args)


def _pos_tuple(kind: Kind) -> bool:
    """``tuple[A, B, ...]`` (at most MAX_TUPLE_ITEMS) whose positions are scalars,
    Optional scalars, references or enums: what the per-position element writer takes
    (no Any: its self-describing items have side effects a dict's in-place pass would
    repeat)."""
    if kind.tag is not K.TUPLE or not 0 < len(kind.args) <= MAX_TUPLE_ITEMS:
        return False
    pos = [_pos(a) for a in kind.args]
    return None not in pos and _M_ANY not in pos


def _compact_enum(cls: type) -> bool:
    """Every member's value is a 64-bit int or a str and no combination can exist (not
    a Flag): ``_value_`` is the compact form."""
    compact = getattr(schema, "compact_enum", None)
    if compact is not None:
        return compact(cls)
    return not issubclass(cls, enum.Flag) and all(
        type(m._value_) is str or (type(m._value_) is int and w.INT_MIN <= m._value_ < w.INT_LIMIT)
        for m in cls.__members__.values()
    )


_ENUM_VALUE = inspect.getattr_static(enum.Enum, "value")


def _dyn_enum(cls: type) -> bool:
    """An enum typed always escapes (not compact), whose members dyn writes as
    ``{T_ENUM: [index, v.value]}``: C writes that with ``_value_``, which is what
    ``v.value`` returns while the class keeps enum's own ``value``.  An enum with NaN
    twins is typed's: dyn refuses to save those members (``dyn.nan_twins``)."""
    return (
        not _compact_enum(cls)
        and inspect.getattr_static(cls, "value", None) is _ENUM_VALUE
        and not dyn.nan_twins(cls)
    )


def _pos(kind: Kind) -> Any:
    """A tuple position's entry for the per-position path: a scalar mask, M_REF, M_ANY or
    ``(M_ENUM [| M_NONE], enum class or None)``; None where C does not take the kind."""
    tag = kind.tag
    if tag in SCALARS:
        return _mask(_fast_types(tag))
    if tag is K.OPT and kind.args[0].tag in SCALARS:
        return _mask(_fast_types(kind.args[0].tag) | _NONE)
    if _is_ref(kind):
        return _M_REF
    if tag is K.ANY:  # written as typed's compact form of Any: ctx.dyn's
        return _M_ANY
    op, mask = _elem_op(kind)
    if op == E_ENUM:
        return (_M_ENUM | mask, _elem_arg(kind, op))
    return None


def _field_arg(kind: Kind, op: int) -> Any:
    """The op's extra: the enum class; a tuple's per-position entries (``_pos``) or, for
    ``tuple[E, ...]``, E's class; a container's ``(item or key arg, value arg)``
    (``_elem_arg``) where one is not None."""
    if kind.tag is K.OPT and kind.args[0].tag is not K.REF:
        kind = kind.args[0]
    if op in (OP_ENUM, OP_ENUM_DYN):
        return kind.enum_cls
    if op == OP_VALUE:
        return _value_kind(kind.codec)
    if op == OP_TUPLE:
        if kind.tag is K.TUPLE:
            return tuple(map(_pos, kind.args))
        pos = _pos(kind.args[0])
        return pos[1] if type(pos) is tuple else None
    if op in (OP_LIST, OP_SET, OP_FROZENSET, OP_DICT):
        args = tuple(_elem_arg(a, _elem_op(a)[0]) for a in kind.args)
        return None if args.count(None) == len(args) else (*args, None)[:2]
    return None


# element ops of nested containers (list items, dict values): none is a set item or key
_NESTED_OPS = (E_LIST, E_LIST_REF, E_NEST)
_OPTIONAL_OPS = (K.LIST, K.SET, K.FROZENSET, K.DICT, K.TUPLE, K.VARTUPLE, K.BYTEARRAY, K.ENUM)


def _field_op(kind: Kind) -> tuple[int, int, int, int, int, int]:
    """(op, mask, key op, key mask, value op, value mask) for one saved field.

    Each op takes in C only values that fit its kind exactly (exact types, ints within
    64 bits, references to registered classes); the slot function gets every other.
    ``M_NONE`` in the mask of a container, tuple or enum op: ``Optional[X]``, None
    written Nil and anything else as typed's compact form of X (``fit.compact``: its
    items checked before its identity, an empty one written empty, not Nil).
    """
    tag = kind.tag
    py = (OP_PY, 0, 0, 0, 0, 0)
    if tag in SCALARS:
        return OP_SCALAR, _mask(_fast_types(tag)), 0, 0, 0, 0
    value = kind.args[0] if tag is K.OPT else kind
    if value.tag is K.VALUE and _value_kind(value.codec):
        return OP_VALUE, _BITS[type(None)] if tag is K.OPT else 0, 0, 0, 0, 0
    if tag is K.OPT:
        inner = kind.args[0]
        if inner.tag in SCALARS:
            return OP_SCALAR, _mask(_fast_types(inner.tag) | _NONE), 0, 0, 0, 0
        if inner.tag is K.REF:
            return OP_REF, 0, 0, 0, 0, 0
        if inner.tag is K.ENUM and _compact_enum(inner.enum_cls):
            return OP_ENUM, _BITS[type(None)], 0, 0, 0, 0
        if inner.tag not in _OPTIONAL_OPS:
            return py
        op = _kind_op(inner, True)
        return (op[0], op[1] | _M_NONE, *op[2:]) if op[0] != OP_PY else py
    return _kind_op(kind, False)


def _kind_op(kind: Kind, optional: bool) -> tuple[int, int, int, int, int, int]:
    """``_field_op`` of a kind that is not a scalar, a value or an Optional."""
    tag = kind.tag
    py = (OP_PY, 0, 0, 0, 0, 0)
    if tag is K.REF:
        return OP_REF, 0, 0, 0, 0, 0
    if tag is K.ENUM:
        if _compact_enum(kind.enum_cls):
            return OP_ENUM, 0, 0, 0, 0, 0
        return (OP_ENUM_DYN, 0, 0, 0, 0, 0) if _dyn_enum(kind.enum_cls) else py
    if tag is K.ANY:
        return OP_ANY, 0, 0, 0, 0, 0
    if tag is K.BYTEARRAY:
        return OP_BYTEARRAY, 0, 0, 0, 0, 0
    if tag in (K.LIST, K.SET, K.FROZENSET):
        op, mask = _elem_op(kind.args[0])
        if op == E_NONE or (op in _NESTED_OPS and tag is not K.LIST):  # unhashable items
            return py
        return {K.LIST: OP_LIST, K.SET: OP_SET, K.FROZENSET: OP_FROZENSET}[tag], 0, op, mask, 0, 0
    if tag is K.DICT:
        kop, kmask = _elem_op(kind.args[0])
        vop, vmask = _elem_op(kind.args[1])
        if E_NONE in (kop, vop) or (kop == E_TUPLE and vop == E_TUPLE):  # one tuple side
            return py
        if kop in _NESTED_OPS:  # an unhashable key (or a frozenset: not in C)
            return py
        return OP_DICT, 0, kop, kmask, vop, vmask
    if tag in (K.TUPLE, K.VARTUPLE):
        scalars = all(a.tag in SCALARS for a in kind.args)
        if scalars and not optional:  # typed's scalar tuple: the tuple as is, () Nil
            mask = _mask(frozenset().union(*(_fast_types(a.tag) for a in kind.args)))
            return OP_TUPLE, 0, 0, mask, 0, 0
        pos = [_pos(a) for a in kind.args]
        if None in pos or (tag is K.TUPLE and len(pos) > MAX_TUPLE_ITEMS):
            return py
        # per position (references, enums, Optional scalars, Any; any Optional[tuple]):
        # typed's compact form, an array of the items', the empty tuple an empty array
        kmask = 0 if tag is K.TUPLE else pos[0] if type(pos[0]) is int else pos[0][0]
        return OP_TUPLE, 0, 0, kmask, E_REF, 0
    if tag is K.SAVE and kind.args:
        return OP_SAVE, 0, 0, 0, 0, 0  # plain data: save(value) is its own encoding
    return py  # self-describing save=/load= fields, nested containers: the slot function


class _LazySlot:
    """A slot function compiled on first use: most fields never leave the C path."""

    __slots__ = ("fn", "sch", "spec")

    def __init__(self, sch: Schema, spec: Any) -> None:
        self.sch, self.spec, self.fn = sch, spec, None

    def __call__(self, obj: Any, ctx: Any) -> Any:
        if self.fn is None:
            self.fn = slot_function(self.sch, self.spec)
        return self.fn(obj, ctx)


def slot_function(sch: Schema, spec: Any) -> Any:
    """``slot(obj, ctx) -> wire value``: the typed engine's generated code for one field.

    The prelude (the context bindings) is taken from the typed engine's save function
    and the body comes from the same per-field emitter, so this is exactly what the
    typed engine runs for that field.
    """
    source, globs, _ = _typed_save_source(sch)
    lines = source.splitlines()
    end = next(i for i, line in enumerate(lines) if line.strip().startswith("for __ckpt_obj in"))
    src = codegen._Source()
    src.globs.update(globs)
    src.globs.setdefault("__ckpt_repeat", repeat)
    name = f"slot_{codegen._ident(sch.cls.__qualname__)}_{spec.index}"
    src.add(0, f"def {name}(__ckpt_obj, __ckpt_ctx):")
    body = codegen._Source()
    _emit_field(body, spec)
    src.globs.update(body.globs)
    text = "\n".join(body.lines)
    for line in lines[1:end]:  # only the context bindings this field's code uses
        bound = line.strip().split(" = ")[0]
        if not (bound.startswith("__ckpt_") and " = __ckpt_ctx." in line) or bound in text:
            src.lines.append(line)
    src.add(1, "if True:")
    src.lines.extend(body.lines)
    src.add(2, f"return _e{spec.index}")
    return codegen.compile_function(
        name,
        src.text(),
        src.globs,
        f"<ckpt generated slot {sch.name}.{spec.name}>",
        name,
        f"Encode {sch.name}.{spec.name} (the typed engine's code, called by the native one).",
    )


def _dict_ok(cls: type, name: str) -> bool:
    """Reading ``name`` from the instance dict is what getattr does: no data descriptor
    (property, slot, ...) of that name anywhere in the class's MRO."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            kind = type(klass.__dict__[name])
            return not (hasattr(kind, "__set__") or hasattr(kind, "__delete__"))
    return True


def _plan_for(cls: type) -> Any:
    """The C plan of a class (a ``_native.Plan``, cached on its TypeInfo, where the C
    core finds it without calling back); StateError if not savable."""
    sch = schema.schema_of(cls)
    plan = sch.info.__dict__.get("_native_plan")
    if plan is None:
        fields = []
        for spec in sch.fields:
            op = _field_op(spec.kind)
            slot = slot_function(sch, spec) if op[0] == OP_PY else _LazySlot(sch, spec)
            arg = spec.opts.save if op[0] == OP_SAVE else _field_arg(spec.kind, op[0])
            name = sys.intern(spec.name)  # dict keys are interned: compared by identity
            fields.append((name, *op, spec.elidable, slot, arg, _dict_ok(cls, name)))
        plain_getattr = cls.__getattribute__ is object.__getattribute__
        plan = _core.Plan(sch, sch.name, sch.before_save, plain_getattr, tuple(fields))
        sch.info.__dict__["_native_plan"] = plan
    return plan


def _enum_plan(cls: type) -> str:
    return schema.register_enum(cls)


# --- loading: the fill plan of one stream layout of a class ----------------------------

_BUILD = {K.LIST: B_LIST, K.SET: B_SET, K.FROZENSET: B_FROZENSET, K.VARTUPLE: B_TUPLE}
_FALSY_ZERO = {K.STR: "", K.BOOL: False, K.BYTES: b""}


def _is_ref(kind: Kind) -> bool:
    return kind.tag is K.REF or (kind.tag is K.OPT and kind.args[0].tag is K.REF)


def _load_op(spec: Any) -> tuple[int, int, Any, bool, Any]:
    """(op, build, zero, zero is a factory, arg) for a field the stream holds.

    Mirrors the choices of ``codegen._load_expr`` for compact streams; the C fast path
    takes only the wire shapes those expressions expect and calls the field's slot
    decoder (that same expression) for anything else.
    """
    kind, tag = spec.kind, spec.kind.tag
    factory = schema.ZERO_FACTORIES.get(tag)
    if tag in SCALARS:
        if tag in _FALSY_ZERO:
            return L_FALSY_ZERO, 0, _FALSY_ZERO[tag], False, None
        return L_NONE_ZERO, 0, factory(), False, None
    if tag is K.OPT and kind.args[0].tag in SCALARS:
        return L_RAW, 0, None, False, None
    if tag is K.TUPLE and all(a.tag in SCALARS for a in kind.args):
        return L_TUPLE, 0, (), False, None
    if _is_ref(kind):
        return L_REF, 0, None, False, None
    if tag is K.ANY:
        return L_ANY, 0, None, False, None
    if tag is K.SAVE:
        if kind.args and kind.args[0].tag not in (K.TUPLE, K.VARTUPLE):
            return L_SAVE, 0, None, False, spec.opts.load
        return L_PY, 0, None, False, None
    if tag is K.ENUM:
        return L_ENUM, 0, None, False, EnumMembers(kind.enum_cls)
    value = kind.args[0] if tag is K.OPT else kind
    if value.tag is K.VALUE and (vk := _value_kind(value.codec)):
        return L_VALUE, int(tag is K.OPT), None, False, vk
    if tag in _BUILD:
        inner = kind.args[0]
        if inner.tag in SCALARS:
            return L_SEQ, _BUILD[tag], factory, True, None
        if _is_ref(inner):
            return L_SEQ_REF, _BUILD[tag], factory, True, None
        if tag is K.LIST and _scalar_tuple(inner) and inner.tag is K.TUPLE:
            return L_SEQ_TUPLE, _BUILD[tag], factory, True, len(inner.args)
    elif tag is K.DICT:
        kk, vk = kind.args
        if kk.tag in SCALARS and vk.tag in SCALARS:
            return L_DICT, 0, dict, True, None
        if kk.tag in SCALARS and vk.tag is K.REF:
            return L_DICT_REF, 0, dict, True, None
    prog = _elem_prog(kind)
    if prog is not None and _nodes(prog) <= MAX_ELEM_NODES:
        # typed's expression is _with_default(elem_decoder(kind)(raw)): Nil is the zero
        # where the kind has one, else the program's own reading of Nil
        if spec.elidable:
            return L_ELEM, 1, factory, True, prog
        return L_ELEM, 0, None, False, prog
    return L_PY, 0, None, False, None


def _elem_prog(kind: Kind, depth: int = 0) -> tuple | None:
    """The C element program (EK_* nodes: ``(code, arg, *nodes below)``) that decodes a
    value of ``kind`` as ``codegen.elem_decoder(kind)`` does; None where a node has no C
    reading (value codecs, save= kinds) or the annotation nests deeper than C takes."""
    if depth >= MAX_ELEM_DEPTH:
        return None
    tag = kind.tag
    if tag in SCALARS or (tag is K.OPT and kind.args[0].tag in SCALARS):
        return (EK_PASS, None)  # None passes as itself
    leaf = {K.REF: EK_REF, K.ANY: EK_ANY, K.BYTEARRAY: EK_BYTEARRAY}.get(tag)
    if leaf is not None:
        return (leaf, None)
    if tag is K.ENUM:
        return (EK_ENUM, EnumMembers(kind.enum_cls))
    if tag is K.TUPLE and not 0 < len(kind.args) <= MAX_TUPLE_ITEMS:
        return None
    head = {
        K.OPT: (EK_OPT, None),
        K.TUPLE: (EK_TUPLE, None),
        K.DICT: (EK_DICT, None),
    }.get(tag) or ((EK_SEQ, _BUILD[tag]) if tag in _BUILD else None)
    if head is None:
        return None
    below = [_elem_prog(a, depth + 1) for a in kind.args]
    return None if None in below else (*head, *below)


def _nodes(prog: tuple) -> int:
    return 1 + sum(_nodes(p) for p in prog[2:])


def _value_kind(codec: Any) -> tuple | None:
    """L_VALUE's arg for a built-in codec C reads itself, (VK_*, class, extra), or None.

    A UUID is built as ``uuid.UUID(bytes=...)`` builds it, by setting its two slots;
    that is done only while the class has exactly those slots."""
    vk = _VALUE_KINDS.get(codec.name) if codec.builtin else None
    if vk is None:
        return None
    if codec.name != "uuid":
        return (vk, None, None)
    import uuid

    if codec.cls is not uuid.UUID or uuid.UUID.__slots__ != ("int", "is_safe", "__weakref__"):
        return None
    return (vk, uuid.UUID, uuid.SafeUUID.unknown)


class _LazyLoadSlot:
    """A load slot decoder compiled on first use (the fast path rarely needs one)."""

    __slots__ = ("checked", "fn", "plan", "spec")

    def __init__(self, plan: graph.TypePlan, spec: Any, checked: bool) -> None:
        self.plan, self.spec, self.checked, self.fn = plan, spec, checked, None

    def __call__(self, raw: Any, ctx: Any) -> Any:
        if self.fn is None:
            self.fn = load_slot_function(self.plan, self.spec, self.checked)
        return self.fn(raw, ctx)


def load_slot_function(plan: graph.TypePlan, spec: Any, checked: bool = False) -> Any:
    """``slot(raw, ctx) -> value``: the typed engine's load expression for one field.

    ``checked``: the stream lists the type as holding slot escapes (format version 2);
    the expression is wrapped as ``codegen.build_load`` wraps it for such a type.
    """
    sch = plan.schema
    source, globs, _ = codegen.build_load(plan, w.COMPACT, False, checked)
    lines = source.splitlines()
    end = next(i for i, line in enumerate(lines) if line.strip().startswith("for __ckpt_obj"))
    src = codegen._Source()
    src.globs.update(globs)
    expr = codegen._load_expr(src, spec, "_r", False)
    if checked and not codegen._self_describing(spec.kind):
        escape = "__ckpt_dyn(_r)"
        if spec.kind.tag is K.SAVE:
            escape = f"{src.const(f'load_{spec.name}', spec.opts.load)}({escape})"
        expr = f"({escape} if type(_r) is dict else {expr})"
    name = f"load_slot_{codegen._ident(sch.cls.__qualname__)}_{spec.index}"
    src.add(0, f"def {name}(_r, __ckpt_ctx):")
    for line in lines[1:end]:
        bound = line.strip().split(" = ")[0]
        if not (bound.startswith("__ckpt_") and " = __ckpt_ctx." in line) or bound in expr:
            src.lines.append(line)
    src.add(1, f"return {expr}")
    return codegen.compile_function(
        name,
        src.text(),
        src.globs,
        f"<ckpt generated load slot {sch.name}.{spec.name} #{id(plan)}>",
        name,
        f"Decode {sch.name}.{spec.name} (the typed engine's code, called by the native one).",
    )


_NEW = {list: Z_LIST, dict: Z_DICT, set: Z_SET}  # factories C makes without a call


def _how(factory: Any) -> int:
    return _NEW.get(factory, Z_CALL)


def _default_entry(spec: Any) -> tuple:
    name = sys.intern(spec.name)
    if spec.factory is not MISSING:
        return (name, -1, L_FACTORY, 0, None, _how(spec.factory), spec.factory, None)
    return (name, -1, L_DEFAULT, 0, None, Z_OBJECT, spec.default, None)


def _load_plan(plan: graph.TypePlan, checked: bool) -> tuple:
    """The C fill plan for one stream layout of a class (cached on the class).

    A map in a compact slot is never a fast-path shape, so the C code hands it to the
    slot decoder, which (for a type the stream lists as escaped) decodes the escape.
    """
    sch = plan.schema
    cache = sch.info.__dict__.setdefault("_native_load", {})
    key = (plan.stream_names, checked)
    entry = cache.get(key)
    if entry is None:
        fields = []
        for spec, source in plan.sources:
            if source is None:
                fields.append(_default_entry(spec))
                continue
            op, build, zero, zero_call, arg = _load_op(spec)
            if op == L_PY:
                slot = load_slot_function(plan, spec, checked)
            else:
                slot = _LazyLoadSlot(plan, spec, checked)
            how = _how(zero) if zero_call else Z_OBJECT
            fields.append((sys.intern(spec.name), source, op, build, zero, how, arg, slot))
        fields.extend(_default_entry(spec) for spec in sch.unsaved)
        cls = sch.cls
        direct = (
            sch.has_dict
            and all(_dict_ok(cls, f[0]) for f in fields)
            and (sch.frozen or cls.__setattr__ is object.__setattr__)
        )
        has_dict = 2 if direct else int(sch.has_dict)
        entry = (has_dict, sch.frozen, plan.nfields, tuple(fields), checked)
        cache[key] = entry
    return entry
