"""The reflect engine: the baseline, walking objects by introspection at run time.

Per object it looks up the class's cached field list, reads each field with
``getattr`` and encodes the value by dispatching on its run-time type (``dyn``), the
way gVisor master's reflective encoder or the stdlib's pure-Python pickle does.  It
writes self-describing values ("dyn" encoding) and reads both encodings: for compact
streams it interprets each field's declared kind at run time.

It is meant to be a fair yardstick: field lists are cached per class, attributes are
set the way pickle sets them (``__dict__.update`` where there is a ``__dict__``), and
nothing is slowed on purpose.
"""

from __future__ import annotations

from typing import Any

from ckpt.errors import StateError
from ckpt.state import dyn, graph
from ckpt.state import values as value_codecs
from ckpt.state import wire as w
from ckpt.state.schema import CONTAINERS, SCALARS, ZERO_FACTORIES, K, Kind
from ckpt.state.stats import Stats

ENGINE = "reflect"


def save(root: Any, stats: Stats | None) -> tuple[list, graph.SaveWalk]:
    walk = graph.SaveWalk()
    encode = dyn.make_encoder(walk)
    encode_plain = dyn.make_encoder(walk, track=False)
    root_enc = encode(root, graph.ROOT_OWNER)
    objects = walk.objects
    type_seq = walk.type_seq
    types = walk.types
    rows = walk.rows
    i = 1
    while i < len(objects):  # objects grows as references are discovered
        obj = objects[i]
        sch = types[type_seq[i - 1]]
        if stats is not None:
            start, setup = stats.clock(), stats.setup_clock()
        if sch.before_save:
            obj.__before_save__()
        row = []
        for spec in sch.fields:
            value = getattr(obj, spec.name)
            try:
                if spec.opts.save is not None:
                    row.append(encode_plain(spec.opts.save(value), obj))
                else:
                    row.append(encode(value, obj))
            except StateError as exc:
                raise StateError(f"{sch.name}.{spec.name}: {exc}") from exc
        rows[type_seq[i - 1]].append(row)
        if stats is not None:
            stats.add_timed(sch.name, start, setup)
        i += 1
    return walk.payload(ENGINE, w.DYN, root, root_enc), walk


def load(loaded: graph.Loaded, stats: Stats | None) -> Any:
    objs: list = [None]
    for t in loaded.type_seq:
        objs.append(object.__new__(loaded.classes[t]))
    per_type: list[list] = [[] for _ in loaded.rows]
    for oid in range(1, len(objs)):
        per_type[loaded.type_seq[oid - 1]].append(objs[oid])
    decode = dyn.make_decoder(objs, loaded.enums)
    if loaded.encoding == w.DYN:
        value_of = _dyn_field(decode, loaded.version)
    else:
        value_or_escape = _compact_field(objs, decode, escapes=True)
        value_of = _compact_field(objs, decode, escapes=False)
    for plan, shells, rows in zip(loaded.plans, per_type, loaded.rows, strict=True):
        if plan is None:
            continue
        field_value = value_of
        if loaded.encoding != w.DYN and plan.index in loaded.escaped:
            field_value = value_or_escape
        sch = plan.schema
        setter = _setter(sch)
        for obj, row in zip(shells, rows, strict=True):
            if stats is not None:
                start, setup = stats.clock(), stats.setup_clock()
            if type(row) is not list or len(row) != plan.nfields:
                raise StateError(f"a {sch.name} row has the wrong number of fields")
            values = {}
            for spec, source in plan.sources:
                if source is None:
                    values[spec.name] = spec.make_default()
                else:
                    values[spec.name] = field_value(spec, row[source])
            for spec in sch.unsaved:
                values[spec.name] = spec.make_default()
            setter(obj, values)
            if stats is not None:
                stats.add_timed(sch.name, start, setup)
    root = decode(loaded.root)
    graph.apply_shared(loaded, objs, root)
    graph.run_after_load(objs, graph.hooked_classes(loaded))
    objs.clear()  # the decoder closure holds this list in a cycle; leave it empty
    return root


def _setter(sch: Any) -> Any:
    if sch.has_dict and not sch.frozen:
        return lambda obj, values: obj.__dict__.update(values)

    def set_each(obj: Any, values: dict) -> None:
        for name, value in values.items():
            object.__setattr__(obj, name, value)

    return set_each


def _dyn_field(decode: Any, version: int) -> Any:
    zero_by_nil = version < 2  # version 1: Nil in a zero-kind slot meant the zero

    def value_of(spec: Any, raw: Any) -> Any:
        if raw is None and spec.elidable and zero_by_nil:
            return spec.make_zero()
        value = decode(raw)
        if spec.opts.load is not None:
            value = spec.opts.load(value)
        return value

    return value_of


def _compact_field(objs: list, decode: Any, escapes: bool) -> Any:
    """Decode compact slots by their kind; with ``escapes``, a map in a slot of a
    non-self-describing kind is a slot escape (the type is listed as holding some)."""
    nobjs = len(objs)

    def ref(raw: Any) -> Any:
        if type(raw) is not int or not 0 <= raw < nobjs:
            raise StateError(f"reference to object #{raw!r}, which the stream does not hold")
        return objs[raw]

    def value(kind: Kind, raw: Any) -> Any:
        tag = kind.tag
        if tag is K.REF:
            return ref(raw)
        if tag is K.ANY or (tag is K.SAVE and not kind.args):
            return decode(raw)
        if tag is K.SAVE:
            # Plain data decodes to itself; big ints inside arrive self-describing.
            plain = decode(raw)
            return tuple(plain) if kind.args[0].tag in (K.TUPLE, K.VARTUPLE) else plain
        if raw is None:
            if tag is K.OPT:
                return None
            return _empty(kind)
        if tag in SCALARS:
            return decode(raw) if type(raw) is dict else raw
        if tag is K.OPT:
            return value(kind.args[0], raw)
        if tag is K.LIST:
            inner = kind.args[0]
            return [value(inner, x) for x in raw]
        if tag is K.VARTUPLE:
            inner = kind.args[0]
            return tuple(value(inner, x) for x in raw)
        if tag is K.TUPLE:
            if len(raw) != len(kind.args):
                raise StateError("a fixed-size tuple has the wrong length")
            return tuple(value(k, x) for k, x in zip(kind.args, raw, strict=True))
        if tag is K.DICT:
            keys, values = raw
            kk, vk = kind.args
            return dict(
                zip([value(kk, x) for x in keys], [value(vk, x) for x in values], strict=True)
            )
        if tag is K.SET:
            return {value(kind.args[0], x) for x in raw}
        if tag is K.FROZENSET:
            return frozenset(value(kind.args[0], x) for x in raw)
        if tag is K.BYTEARRAY:
            return dyn.as_bytearray(raw)
        if tag is K.ENUM:
            return dyn.enum_member(kind.enum_cls, raw)
        if tag is K.VALUE:
            if raw is None and kind.codec.items is not None:
                return None  # a shared container's other place (patched after loading)
            if type(raw) is not list:
                raise StateError(f"a {kind.descriptor} value must be stored as an array")
            return value_codecs.from_plain(kind.codec, [*map(decode, raw)])
        raise StateError(f"cannot decode field kind {kind.descriptor}")

    def value_of(spec: Any, raw: Any) -> Any:
        if escapes and type(raw) is dict and not _self_describing(spec.kind):
            v = decode(raw)
        elif raw is None and spec.elidable:
            return spec.make_zero()
        else:
            v = value(spec.kind, raw)
        if spec.opts.load is not None:
            v = spec.opts.load(v)
        return v

    return value_of


def _self_describing(kind: Kind) -> bool:
    return kind.tag is K.ANY or (kind.tag is K.SAVE and not kind.args)


def _empty(kind: Kind) -> Any:
    """A nested container written as None (a shared container's other place)."""
    return ZERO_FACTORIES[kind.tag]() if kind.tag in CONTAINERS else None
