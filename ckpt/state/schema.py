"""Field kinds, derived once per class from its annotations.

A ``Kind`` is a small tree (``list[ref]`` is LIST with one REF argument).  Its
``descriptor`` string is written into every stream's type table, so a reader can
decode a compact stream without the writer's classes and can tell when a field's kind
changed between versions (schema evolution).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
import sys
import types
import typing
from dataclasses import MISSING
from typing import Any

from ckpt.errors import StateError
from ckpt.state import registry, values
from ckpt.state.registry import FieldOptions, TypeInfo, field_options


class K(enum.Enum):
    """What a field holds, as far as its annotation says."""

    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STR = "str"
    BYTES = "bytes"
    BYTEARRAY = "bytearray"
    OPT = "opt"
    LIST = "list"
    TUPLE = "tuple"  # fixed length: tuple[int, str]
    VARTUPLE = "tuple..."  # tuple[int, ...]
    DICT = "dict"
    SET = "set"
    FROZENSET = "frozenset"
    ENUM = "enum"
    REF = "ref"  # a savable object (or None): identity kept
    ANY = "any"  # polymorphic: self-describing values
    SAVE = "save"  # saved through save=/load= functions: save[plain kind] or self-describing
    VALUE = "value"  # a value-codec type (datetime, Decimal, ...): its payload array


SCALARS = frozenset({K.BOOL, K.INT, K.FLOAT, K.STR, K.BYTES})
# Zero values: what a Nil (None) loads as in a field of each kind.  The typed writer
# writes Nil for empty containers and for empty tuples it recognises by
# identity (IMMUTABLE_ZEROS); a plain scalar zero is written as itself (one byte either
# way).  Floats are never elided (-0.0 must keep its sign).
ZERO_LITERALS = {
    K.INT: "0",
    K.BOOL: "False",
    K.FLOAT: "0.0",
    K.STR: "''",
    K.BYTES: "b''",
    K.TUPLE: "()",
    K.VARTUPLE: "()",
    K.LIST: "[]",
    K.DICT: "{}",
    K.SET: "set()",
    K.FROZENSET: "frozenset()",
    K.BYTEARRAY: "bytearray()",
}
ZERO_FACTORIES = {
    K.INT: int,
    K.BOOL: bool,
    K.FLOAT: float,
    K.STR: str,
    K.BYTES: bytes,
    K.TUPLE: tuple,
    K.VARTUPLE: tuple,
    K.LIST: list,
    K.DICT: dict,
    K.SET: set,
    K.FROZENSET: frozenset,
    K.BYTEARRAY: bytearray,
}
IMMUTABLE_ZEROS = {K.INT: 0, K.BOOL: False, K.STR: "", K.BYTES: b"", K.TUPLE: (), K.VARTUPLE: ()}
CONTAINERS = frozenset({K.LIST, K.DICT, K.SET, K.BYTEARRAY})  # mutable: identity tracked


@dataclasses.dataclass(frozen=True, eq=False)
class Kind:
    tag: K
    args: tuple[Kind, ...] = ()
    enum_cls: type | None = None
    codec: Any = None  # K.VALUE: the values.Codec (or its name, for a parsed descriptor)

    @functools.cached_property
    def descriptor(self) -> str:
        """The kind as the stream's type table writes it (computed once: kinds are frozen)."""
        tag = self.tag
        if tag is K.ENUM:
            return f"enum:{enum_name(self.enum_cls)}"
        if tag is K.VALUE:
            return f"value:{self.codec if isinstance(self.codec, str) else self.codec.name}"
        if tag is K.VARTUPLE:
            return f"tuple[{self.args[0].descriptor},...]"
        if self.args:
            return f"{tag.value}[{','.join(a.descriptor for a in self.args)}]"
        return tag.value


ANY_KIND = Kind(K.ANY)
SAVE_KIND = Kind(K.SAVE)
_SIMPLE = {
    bool: Kind(K.BOOL),
    int: Kind(K.INT),
    float: Kind(K.FLOAT),
    str: Kind(K.STR),
    bytes: Kind(K.BYTES),
    bytearray: Kind(K.BYTEARRAY),
}
_enums: dict[str, type] = {}


def enum_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register_enum(cls: type) -> str:
    """Enums met in annotations become loadable by name (and only those)."""
    name = enum_name(cls)
    _enums[name] = cls
    return name


def enum_named(name: str) -> type | None:
    return _enums.get(name)


def compact_enum(cls: type) -> bool:
    """Whether members of this enum are written as their bare value in an ``enum:`` slot:
    every value an INT64 int or a str, and not a Flag (whose combinations are members
    that iterating the class does not list)."""
    if issubclass(cls, enum.Flag):
        return False
    return all(
        (type(m._value_) is int and INT64_MIN <= m._value_ < INT64_LIMIT) or type(m._value_) is str
        for m in cls.__members__.values()
    )


INT64_MIN = -(1 << 63)
INT64_LIMIT = 1 << 64

Namespace = tuple[dict, dict] | None  # (globals, locals) for resolving forward references


def resolve(annotation: Any, where: str, ns: Namespace) -> Any:
    """A quoted annotation or ``ForwardRef`` evaluated in the class's namespace."""
    text = annotation.__forward_arg__ if isinstance(annotation, typing.ForwardRef) else annotation
    if ns is None:
        raise StateError(f"{where}: cannot resolve the annotation {text!r} (no namespace)")
    value: Any = text
    try:
        for _ in range(3):  # a quoted annotation under PEP 563 is a string twice
            value = eval(value, ns[0], ns[1])
            if not isinstance(value, str):
                break
    except Exception as exc:
        raise StateError(
            f"{where}: cannot resolve the annotation {text!r}: {exc} (define or import "
            "the name where the class is defined, or annotate with Any)"
        ) from exc
    if isinstance(value, str):
        raise StateError(f"{where}: the annotation {text!r} is a string nested too deeply")
    return value


def kind_of(annotation: Any, where: str, ns: Namespace = None) -> Kind:
    """The Kind of an annotation; quoted names anywhere inside it are resolved in ``ns``."""
    if isinstance(annotation, str | typing.ForwardRef):
        annotation = resolve(annotation, where, ns)
    if annotation in _SIMPLE:
        return _SIMPLE[annotation]
    if annotation is Any or annotation is object:
        return ANY_KIND
    origin = typing.get_origin(annotation)
    args = tuple(
        resolve(a, where, ns) if isinstance(a, str | typing.ForwardRef) else a
        for a in typing.get_args(annotation)
    )
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in args if a is not type(None)]
        if len(members) < len(args):  # Optional
            if len(members) == 1:
                inner = kind_of(members[0], where, ns)
            else:
                inner = _union_kind(members, where)
            if inner.tag in (K.REF, K.ANY):
                return Kind(K.OPT, (inner,)) if inner.tag is K.REF else ANY_KIND
            return Kind(K.OPT, (inner,))
        return _union_kind(members, where)
    if origin is typing.Annotated:
        return kind_of(args[0], where, ns)
    if origin is list or annotation is list:
        return Kind(K.LIST, (kind_of(args[0], where, ns) if args else ANY_KIND,))
    if origin is set or annotation is set:
        return Kind(K.SET, (kind_of(args[0], where, ns) if args else ANY_KIND,))
    if origin is frozenset or annotation is frozenset:
        return Kind(K.FROZENSET, (kind_of(args[0], where, ns) if args else ANY_KIND,))
    if origin is dict or annotation is dict:
        if args:
            return Kind(K.DICT, (kind_of(args[0], where, ns), kind_of(args[1], where, ns)))
        return Kind(K.DICT, (ANY_KIND, ANY_KIND))
    if origin is tuple or annotation is tuple:
        if not args or args == ((),):
            return Kind(K.VARTUPLE, (ANY_KIND,))
        if len(args) == 2 and args[1] is Ellipsis:
            return Kind(K.VARTUPLE, (kind_of(args[0], where, ns),))
        return Kind(K.TUPLE, tuple(kind_of(a, where, ns) for a in args))
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            register_enum(annotation)
            return Kind(K.ENUM, enum_cls=annotation)
        if registry.is_savable(annotation):
            return Kind(K.REF)
        codec = values.codec_for(annotation)
        if codec is not None:
            return Kind(K.VALUE, codec=codec)
    # A non-savable base class, a protocol, a type variable...: polymorphic.
    return ANY_KIND


def is_plain(kind: Kind) -> bool:
    """Scalars and sequences of scalars: data whose MessagePack form is the value itself."""
    if kind.tag in SCALARS:
        return True
    if kind.tag is K.OPT:
        return kind.args[0].tag in SCALARS
    return kind.tag in (K.LIST, K.VARTUPLE, K.TUPLE) and all(a.tag in SCALARS for a in kind.args)


def save_kind(save_fn: Any) -> Kind:
    """``save[<kind>]`` when the save function's return annotation is plain data, so the
    value is written compactly; otherwise ``save`` (self-describing)."""
    try:
        ret = typing.get_type_hints(save_fn).get("return")
    except Exception:
        ret = None
    if ret is not None:
        kind = kind_of(ret, getattr(save_fn, "__qualname__", "save function"))
        if is_plain(kind):
            return Kind(K.SAVE, (kind,))
    return SAVE_KIND


def _union_kind(members: list, where: str) -> Kind:
    if all(isinstance(m, type) and registry.is_savable(m) for m in members):
        return Kind(K.REF)
    return ANY_KIND


@dataclasses.dataclass(eq=False)
class FieldSpec:
    """One dataclass field as the engines see it."""

    name: str
    index: int  # position among the saved fields
    kind: Kind
    opts: FieldOptions
    default: Any = MISSING  # immutable default value, or MISSING
    factory: Any = MISSING  # default_factory, or MISSING

    @property
    def has_default(self) -> bool:
        return self.default is not MISSING or self.factory is not MISSING

    def make_default(self) -> Any:
        if self.factory is not MISSING:
            return self.factory()
        if self.default is not MISSING:
            return self.default
        raise LookupError(self.name)

    @property
    def elidable(self) -> bool:
        """Whether None on the wire stands for this field's zero value.

        As in gVisor, Nil means the kind's zero value (0, "", b"", an empty container),
        never the declared default: a default can change between versions of a class,
        a zero cannot, so what loads is always what was saved.  None is unambiguous only
        where None is not a legal value of the kind.
        """
        return self.kind.tag in ZERO_LITERALS

    def make_zero(self) -> Any:
        return ZERO_FACTORIES[self.kind.tag]()


@dataclasses.dataclass(eq=False)
class Schema:
    """Everything an engine needs to know about one savable class, computed once."""

    info: TypeInfo
    cls: type
    name: str
    fields: tuple[FieldSpec, ...]  # saved fields, in declaration order
    unsaved: tuple[FieldSpec, ...]  # nosave fields (take their default on load)
    names: tuple[str, ...]
    descriptors: tuple[str, ...]
    has_dict: bool
    frozen: bool
    before_save: bool
    after_load: bool
    wait_fields: tuple[str, ...]
    by_name: dict[str, FieldSpec]
    # graph.make_plan's field mappings, per stream layout (names, descriptors)
    plan_memo: dict[tuple, tuple] = dataclasses.field(default_factory=dict, repr=False)


def build_schema(info: TypeInfo) -> Schema:
    cls = info.cls
    frame_locals = info.take_frame_locals()
    hints = type_hints(cls, frame_locals)
    saved: list[FieldSpec] = []
    unsaved: list[FieldSpec] = []
    for f in dataclasses.fields(cls):
        opts = field_options(f)
        where = f"{info.name}.{f.name}"
        if opts.nosave:
            kind = ANY_KIND
        elif opts.save is not None:
            kind = save_kind(opts.save)
        else:
            ann, ns = hints.get(f.name, (Any, None))
            kind = kind_of(ann, where, ns)
        spec = FieldSpec(
            name=f.name,
            index=len(saved),
            kind=kind,
            opts=opts,
            default=f.default,
            factory=f.default_factory,
        )
        (unsaved if opts.nosave else saved).append(spec)
    params = getattr(cls, "__dataclass_params__", None)
    return Schema(
        info=info,
        cls=cls,
        name=info.name,
        fields=tuple(saved),
        unsaved=tuple(unsaved),
        names=tuple(s.name for s in saved),
        descriptors=tuple(s.kind.descriptor for s in saved),
        has_dict=_fields_in_dict(cls, [s.name for s in (*saved, *unsaved)]),
        frozen=bool(params and params.frozen),
        before_save=callable(getattr(cls, "__before_save__", None)),
        after_load=callable(getattr(cls, "__after_load__", None)),
        wait_fields=tuple(s.name for s in saved if s.opts.wait),
        by_name={s.name: s for s in (*saved, *unsaved)},
    )


def _fields_in_dict(cls: type, names: list[str]) -> bool:
    """True when instances have a ``__dict__`` and no field is stored in a slot, so the
    loaders may assign the whole ``__dict__`` at once."""
    if not hasattr(object.__new__(cls), "__dict__"):
        return False
    return not any(isinstance(getattr(cls, n, None), types.MemberDescriptorType) for n in names)


_resolved: dict[tuple, Any] = {}
_names_in: dict[str, tuple[str, ...]] = {}


def _identifiers(text: str) -> tuple[str, ...]:
    names = _names_in.get(text)
    if names is None:
        names = _names_in[text] = tuple(set(re.findall(r"[A-Za-z_]\w*", text)))
    return names


def type_hints(cls: type, frame_locals: dict | None = None) -> dict[str, tuple[Any, Namespace]]:
    """Each field's annotation, with top-level strings resolved once per (module, text,
    what the text's names are bound to), and the namespace its nested quoted names
    resolve in.

    Under ``from __future__ import annotations`` every annotation is a string, and
    get_type_hints compiles each one again for every class; a kernel of a few dozen
    classes repeats the same few dozen texts hundreds of times.  The memo key includes
    the identity of every module-level object the text names, so a rebound name (a
    class redefined) resolves afresh; a text naming something local (a nested class,
    a class defined in a function: ``frame_locals``, captured by ``@savable``) is
    never memoized.  A string that does not resolve is left as is: ``kind_of`` raises
    the StateError naming the field.
    """
    hints: dict[str, tuple[Any, Namespace]] = {}
    for klass in reversed(cls.__mro__):
        annotations = klass.__dict__.get("__annotations__", {})  # noqa: RUF063 (no inspect import)
        if not annotations:
            continue
        module = sys.modules.get(klass.__module__)
        globalns = vars(module) if module is not None else {}
        local = {klass.__name__: klass}
        if frame_locals and klass is cls:
            local.update(frame_locals)
        local.update(klass.__dict__)
        ns = (globalns, local)
        for name, ann in annotations.items():
            if isinstance(ann, str):
                names = _identifiers(ann)
                key = None
                if not any(n in local for n in names):
                    key = (klass.__module__, ann, tuple(id(globalns.get(n)) for n in names))
                value = _resolved.get(key, _UNSET) if key is not None else _UNSET
                if value is _UNSET:
                    try:
                        value = resolve(ann, name, ns)
                    except StateError:
                        value = ann  # kind_of names the field when it raises again
                    if key is not None and not isinstance(value, str):
                        _resolved[key] = value
                ann = value
            hints[name] = (ann, ns)
    return hints


_UNSET = object()


def schema_of(cls: type) -> Schema:
    info = registry.type_info(cls)
    if info is None:
        raise StateError(
            f"cannot save an object of type {cls.__module__}.{cls.__qualname__}: "
            "it is not a registered savable type (decorate it with @state.savable)"
        )
    return info.schema


def parse_descriptor(text: str) -> Kind:
    """Rebuild a Kind from a stream's descriptor (for readers without the classes)."""
    kind, rest = _parse(text, 0)
    if rest != len(text):
        raise StateError(f"malformed field kind {text!r} in the stream's type table")
    return kind


_BY_VALUE = {k.value: k for k in K}


def _parse(text: str, pos: int) -> tuple[Kind, int]:
    end = pos
    while end < len(text) and text[end] not in "[],":
        end += 1
    word = text[pos:end]
    if word.startswith("enum:"):
        return Kind(K.ENUM, enum_cls=None), end
    if word.startswith("value:"):
        return Kind(K.VALUE, codec=word[6:]), end
    tag = _BY_VALUE.get(word)
    if tag is None:
        raise StateError(f"unknown field kind {word!r} in the stream's type table")
    if end < len(text) and text[end] == "[":
        args = []
        pos = end + 1
        while True:
            if text.startswith("...", pos):
                pos += 3
                tag = K.VARTUPLE
            else:
                arg, pos = _parse(text, pos)
                args.append(arg)
            if pos >= len(text):
                raise StateError(f"malformed field kind {text!r} in the stream's type table")
            if text[pos] == ",":
                pos += 1
                continue
            if text[pos] == "]":
                return Kind(tag, tuple(args)), pos + 1
            raise StateError(f"malformed field kind {text!r} in the stream's type table")
    return Kind(tag), end
