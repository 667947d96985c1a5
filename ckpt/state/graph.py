"""What both engines share: the save walk's bookkeeping and the load's plumbing.

Saving discovers objects breadth-first and gives each an id (1, 2, ... in discovery
order; 0 is None).  Rows are kept per type, in id order.  Mutable containers are
identity-tracked: the first object to reach one owns its content; any other place
that reaches it again is recorded and, after the walk, turned into ``SHARED``
locations so loading can make all of them one object again.

Loading validates the top-level shape, maps the stream's types to registered classes
(matching fields by name: schema evolution), creates every object empty first (so
references can point forward), lets the engine fill the rows, then applies the shared
container locations and runs ``__after_load__`` hooks in dependency order.
"""

from __future__ import annotations

import collections
import enum
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ckpt.errors import StateError
from ckpt.state import registry, schema
from ckpt.state import wire as w
from ckpt.state.schema import FieldSpec, Schema

ROOT_OWNER = object()  # the owner of containers reached from the root value
_CONTAINER_TYPES = (list, dict, set, bytearray)
# Mutable containers saved through value codecs: identity-tracked like the above.
_SEQ_VALUES = (collections.deque,)
_MAP_VALUES = (collections.OrderedDict, collections.defaultdict, collections.Counter)
_TRACKED = (*_CONTAINER_TYPES, *_SEQ_VALUES, *_MAP_VALUES)


class SaveWalk:
    """Object ids, the type table, rows, and container identity for one save."""

    def __init__(self) -> None:
        self.ids: dict[int, int] = {id(None): 0}
        self.objects: list[Any] = [None]  # index = object id; keeps objects alive
        self.type_seq: list[int] = []
        self.types: list[Schema | type] = []  # Schema for objects, enum class for enums
        self.tindex: dict[type, int] = {}
        self.rows: list[list] = []
        self.pending: list[list] = []
        self.cmemo: dict[int, Any] = {}  # id(container) -> owner object
        # Each container cmemo records, kept alive until the walk ends: the memo knows
        # it by id, and one freed mid-walk (a getter's fresh value) would leave its id
        # to the next container allocated there, which would be taken for it.
        self.held: list[Any] = []
        self.hold = self.held.append
        self.shared: dict[int, Any] = {}  # id(container) -> container, reached twice
        self.escaped: set[int] = set()  # type indices whose rows hold a slot escape

    def add_type(self, cls: type) -> int:
        sch = schema.schema_of(cls)  # raises StateError for an unregistered class
        t = len(self.types)
        self.types.append(sch)
        self.tindex[cls] = t
        self.rows.append([])
        self.pending.append([])
        return t

    def discover(self, x: Any) -> int:
        """Give a newly met object its id and queue it for encoding."""
        cls = type(x)
        t = self.tindex.get(cls)
        if t is None:
            t = self.add_type(cls)
        i = len(self.objects)
        self.ids[id(x)] = i
        self.objects.append(x)
        self.type_seq.append(t)
        self.pending[t].append(x)
        return i

    def enum_index(self, cls: type) -> int:
        t = self.tindex.get(cls)
        if t is None:
            schema.register_enum(cls)
            t = len(self.types)
            self.types.append(cls)
            self.tindex[cls] = t
            self.rows.append([])
            self.pending.append([])
        return t

    def seen_again(self, container: Any) -> None:
        """A container met a second time: remember it; this place encodes as None."""
        self.shared[id(container)] = container
        return None

    def release(self) -> None:
        """Drop the walk's tables once the stream is framed.

        The self-describing encoder is a recursive closure, so it sits in a reference
        cycle with this walk; clearing the tables means that cycle holds nothing big
        while it waits for the cyclic GC.
        """
        for table in (self.ids, self.cmemo, self.shared, self.escaped):
            table.clear()
        for seq in (self.objects, self.type_seq, self.rows, self.pending, self.held):
            seq.clear()

    def type_table(self) -> list:
        table = []
        for entry in self.types:
            if isinstance(entry, Schema):
                table.append([entry.name, list(entry.names), list(entry.descriptors)])
            else:
                table.append([schema.enum_name(entry), [], ["enum"]])
        return table

    def payload(self, engine: str, encoding: str, root: Any, root_enc: Any) -> list:
        shared = locate_shared(self, root) if self.shared else []
        flags = {"escaped": sorted(self.escaped)} if self.escaped else {}
        return [
            w.FORMAT_VERSION,
            engine,
            encoding,
            self.type_table(),
            self.type_seq,
            self.rows,
            root_enc,
            shared,
            flags,
        ]


def locate_shared(walk: SaveWalk, root: Any) -> list:
    """Find every place each shared container sits, content location first.

    Runs only when some container was reached twice, so the common case pays nothing.
    A location is ``[owner id, field index, step, ...]`` (owner 0 with field -1 is the
    root); a step is a list/tuple index or a dict value's position.
    """
    shared = walk.shared
    found: dict[int, list] = {k: [None] for k in shared}  # slot 0: the content location
    done: set[int] = set()

    def visit(v: Any, owner: Any, path: list, in_tuple: bool) -> None:
        t = type(v)
        if t in _TRACKED:
            k = id(v)
            if k in shared:
                if k not in done and walk.cmemo.get(k) is owner:
                    done.add(k)
                    found[k][0] = path
                else:
                    found[k].append(path)
                    return  # not the content location: nothing was encoded below here
            if t is list or t in _SEQ_VALUES:
                for i, x in enumerate(v):
                    visit(x, owner, [*path, i], False)
            elif t is dict or t in _MAP_VALUES:
                for i, x in enumerate(v.values()):
                    visit(x, owner, [*path, i], False)
        elif t is tuple:
            for i, x in enumerate(v):
                visit(x, owner, [*path, i], True)

    visit(root, ROOT_OWNER, [0, -1], False)
    for oid in range(1, len(walk.objects)):
        obj = walk.objects[oid]
        sch = walk.types[walk.type_seq[oid - 1]]
        for spec in sch.fields:
            if spec.kind.tag is not schema.K.SAVE:
                visit(getattr(obj, spec.name), obj, [oid, spec.index], False)
    return [locs for locs in found.values() if locs[0] is not None and len(locs) > 1]


# --- loading -----------------------------------------------------------------------


@dataclass(eq=False)
class TypePlan:
    """How one stream type loads into one registered class."""

    index: int
    schema: Schema
    stream_names: tuple[str, ...]
    # For each saved field of the class: its index in the stream row, or None.
    sources: tuple[tuple[FieldSpec, int | None], ...]
    nfields: int  # row length in the stream
    count: int  # objects of this type

    @property
    def exact(self) -> bool:
        """The stream row holds exactly the class's saved fields, in order."""
        return self.stream_names == self.schema.names


@dataclass(eq=False)
class Loaded:
    """A validated stream, ready for an engine to fill."""

    engine: str
    encoding: str
    plans: list[TypePlan | None]  # None for enum entries
    classes: list[type]  # per stream type index (enum classes included)
    enums: list[type | None]  # per stream type index: the enum class or None
    type_seq: list[int]
    rows: list[list]
    root: Any
    shared: list
    tagged: bool  # version 1: scalar slots may hold bare self-describing values
    version: int = w.FORMAT_VERSION
    escaped: frozenset[int] = frozenset()  # type indices whose rows hold slot escapes


KNOWN_FLAGS = {1: frozenset({"tagged"}), 2: frozenset({"escaped"})}


def escaped_types(flags: dict, ntypes: int, version: int) -> frozenset[int]:
    """The flags map's type indices whose rows hold slot escapes, checked.

    A flag this reader does not know is refused: it could change how the rows read,
    and guessing would load other values than were saved."""
    unknown = set(flags) - KNOWN_FLAGS.get(version, frozenset())
    if unknown:
        raise StateError(
            f"state stream flags {sorted(map(repr, unknown))} are unknown to this ckpt "
            f"(layout version {version}); refusing to guess how its rows read"
        )
    escaped = flags.get("escaped", [])
    if not (isinstance(escaped, list) and all(type(t) is int and 0 <= t < ntypes for t in escaped)):
        raise StateError("state stream flags list escaped types that do not exist")
    return frozenset(escaped)


def check_enum_count(name: str, count: int) -> None:
    if count:
        raise StateError(f"enum type {name!r} cannot have objects")


def resolve_types(
    types: list, count_of: Callable[[int, str], int]
) -> tuple[list[TypePlan | None], list[type], list[type | None]]:
    """Map the stream's type table to registered classes and enums, with a load plan
    per class; ``count_of(t, name)`` gives type t's object count (or raises)."""
    plans: list[TypePlan | None] = []
    classes: list[type] = []
    enums: list[type | None] = []
    for t, entry in enumerate(types):
        name, names, descriptors, is_enum = w.type_entry(t, entry)
        count = count_of(t, name)
        if is_enum:
            cls = schema.enum_named(name)
            if cls is None:
                raise StateError(
                    f"the stream names enum type {name!r}, which is not a known enum "
                    "(enums load only when a savable class's annotations mention them)"
                )
            check_enum_count(name, count)
            plans.append(None)
            classes.append(_NotAnObject)
            enums.append(cls)
            continue
        cls = registry.class_named(name)
        if cls is None:
            raise StateError(
                f"the stream names type {name!r}, which is not a registered savable type; "
                "refusing to load (register it with @state.savable, or check the stream)"
            )
        plans.append(make_plan(t, schema.schema_of(cls), names, descriptors, count))
        classes.append(cls)
        enums.append(None)
    return plans, classes, enums


def validate(payload: list) -> Loaded:
    """Check the top-level shape and map stream types to registered classes."""
    version, engine, encoding, types, type_seq, rows, root, shared, flags = payload
    if type(version) is not int or version not in w.READ_VERSIONS:
        raise StateError(f"state stream layout version {version!r} is not supported")
    if encoding not in (w.COMPACT, w.DYN):
        raise StateError(f"unknown stream encoding {encoding!r}")
    if not (isinstance(types, list) and isinstance(rows, list) and len(rows) == len(types)):
        raise StateError("state stream type table and rows do not match")
    if (
        not isinstance(type_seq, list)
        or not isinstance(shared, list)
        or not isinstance(flags, dict)
    ):
        raise StateError("state stream payload has the wrong shape")
    counts = Counter(type_seq)

    def count_of(t: int, name: str) -> int:
        if not isinstance(rows[t], list) or counts.get(t, 0) != len(rows[t]):
            raise StateError(f"type {name!r}: object count and row count disagree")
        return len(rows[t])

    plans, classes, enums = resolve_types(types, count_of)
    if len(counts) and (min(counts) < 0 or max(counts) >= len(types)):
        raise StateError("state stream refers to a type index outside its type table")
    escaped = escaped_types(flags, len(types), version)
    return Loaded(
        engine=engine if isinstance(engine, str) else "?",
        encoding=encoding,
        plans=plans,
        classes=classes,
        enums=enums,
        type_seq=type_seq,
        rows=rows,
        root=root,
        shared=shared,
        tagged=bool(flags.get("tagged")) and version == 1,
        version=version,
        escaped=escaped,
    )


class _NotAnObject:
    """Stands for enum entries in the class list; never instantiated (counts are checked)."""


PLAN_MEMO_MAX = 64  # stream layouts remembered per class (a hostile stream cannot bloat it)


def make_plan(t: int, sch: Schema, names: list, descriptors: list, count: int) -> TypePlan:
    """How type ``t`` of a stream loads into ``sch``'s class.  The field mapping is
    worked out once per class and stream layout: every restore of the same image (and
    every image of the same code) meets the same few layouts."""
    key = (tuple(names), tuple(descriptors))
    sources = sch.plan_memo.get(key)
    if sources is None:
        sources = _sources(sch, *key)
        if len(sch.plan_memo) < PLAN_MEMO_MAX:
            sch.plan_memo[key] = sources
    return TypePlan(t, sch, key[0], sources, len(names), count)


def _sources(
    sch: Schema, names: tuple[str, ...], descriptors: tuple[str, ...]
) -> tuple[tuple[FieldSpec, int | None], ...]:
    """For each saved field of the class, its index in the stream row (None: default)."""
    stream_pos = {n: i for i, n in enumerate(names)}
    if len(stream_pos) != len(names):
        raise StateError(f"type {sch.name!r}: the stream lists a field twice")
    sources = []
    for spec in sch.fields:
        i = stream_pos.get(spec.name)
        if i is None:
            if not spec.has_default:
                raise StateError(
                    f"type {sch.name}: the stream has no field {spec.name!r} and the class "
                    "gives it no default, so it cannot be loaded (add a default)"
                )
        elif descriptors[i] != spec.kind.descriptor:
            raise StateError(
                f"type {sch.name}: field {spec.name!r} changed kind from "
                f"{descriptors[i]!r} in the stream to {spec.kind.descriptor!r} in the class; "
                "the stream was saved by another version of this class: save it again with "
                "this one"
            )
        sources.append((spec, i))
    return tuple(sources)


def create_shells(loaded: Loaded) -> tuple[list, list[list]]:
    """Every object, empty, indexed by id; and per type its objects in row order."""
    new = object.__new__
    body = [*map(new, map(loaded.classes.__getitem__, loaded.type_seq))]
    order = sorted(range(len(body)), key=loaded.type_seq.__getitem__)
    grouped = [*map(body.__getitem__, order)]
    per_type = []
    pos = 0
    for rows in loaded.rows:
        per_type.append(grouped[pos : pos + len(rows)])
        pos += len(rows)
    body.insert(0, None)
    return body, per_type


def apply_shared(loaded: Loaded, objs: list, root: Any) -> None:
    """Make every recorded place of a shared container hold the one content object."""
    for locs in loaded.shared:
        if not isinstance(locs, list) or len(locs) < 2:
            raise StateError("malformed shared-container record")
        content = _resolve(loaded, objs, root, locs[0])
        if content is _GONE:
            continue
        for loc in locs[1:]:
            _assign(loaded, objs, root, loc, content)


_GONE = object()  # the location's field no longer exists in the class


def _field_name(loaded: Loaded, objs: list, oid: int, findex: int) -> str | None:
    if not (isinstance(oid, int) and 0 < oid < len(objs)):
        raise StateError(f"shared-container record names object #{oid!r}, which does not exist")
    plan = loaded.plans[loaded.type_seq[oid - 1]]
    if not (isinstance(findex, int) and 0 <= findex < len(plan.stream_names)):
        raise StateError("shared-container record names a field that does not exist")
    name = plan.stream_names[findex]
    return name if name in plan.schema.by_name else None


def _step(container: Any, step: Any) -> Any:
    if not isinstance(step, int) or step < 0:
        raise StateError("malformed shared-container location")
    if isinstance(container, dict):
        return list(container.values())[step]
    return container[step]


def _resolve(loaded: Loaded, objs: list, root: Any, loc: list) -> Any:
    try:
        oid, findex, *steps = loc
        if oid == 0 and findex == -1:
            value = root
        else:
            name = _field_name(loaded, objs, oid, findex)
            if name is None:
                return _GONE
            value = getattr(objs[oid], name)
        for step in steps:
            value = _step(value, step)
        return value
    except (ValueError, TypeError, IndexError, AttributeError) as exc:
        raise StateError(f"shared-container location {loc!r} does not resolve: {exc}") from exc


def _assign(loaded: Loaded, objs: list, root: Any, loc: list, value: Any) -> None:
    try:
        oid, findex, *steps = loc
        if not steps:
            if oid == 0 and findex == -1:
                raise StateError("malformed shared-container location (the root itself)")
            name = _field_name(loaded, objs, oid, findex)
            if name is not None:
                object.__setattr__(objs[oid], name, value)
            return
        parent = _resolve(loaded, objs, root, [oid, findex, *steps[:-1]])
        if parent is _GONE:
            return
        last = steps[-1]
        if type(parent) is dict or type(parent) in _MAP_VALUES:
            key = list(parent)[last]
            parent[key] = value
        elif type(parent) is list or type(parent) in _SEQ_VALUES:
            parent[last] = value
        elif type(parent) is tuple:
            # Tuples are immutable: rebuild this one and put it where it was.
            if not 0 <= last < len(parent):
                raise StateError(f"shared-container location {loc!r} is out of range")
            rebuilt = (*parent[:last], value, *parent[last + 1 :])
            _assign(loaded, objs, root, [oid, findex, *steps[:-1]], rebuilt)
        else:
            raise StateError("shared-container location points inside an immutable value")
    except (ValueError, TypeError, IndexError, AttributeError) as exc:
        raise StateError(f"shared-container location {loc!r} does not resolve: {exc}") from exc


def run_after_load(objs: list, hooked: list[type]) -> None:
    """Call ``__after_load__`` once per object, after everything it waits on.

    ``hooked`` lists the classes that define the hook.  Dependencies come from fields
    declared ``state.field(wait=True)`` and are followed through objects without a hook
    too (gVisor completes an object only when all it waits on has completed).  A cycle
    of them is an error naming the types involved.  Depth-first with an explicit stack,
    so long chains cannot hit the recursion limit.
    """
    hooked_set = set(hooked)
    if not hooked_set:
        return
    state: dict[int, int] = {}  # id(obj) -> 1 running, 2 done
    for root in objs:
        if root is None or type(root) not in hooked_set or state.get(id(root)) == 2:
            continue
        stack = [(root, iter(_wait_targets(root)))]
        state[id(root)] = 1
        while stack:
            obj, deps = stack[-1]
            for dep in deps:
                if registry.type_info(type(dep)) is None:
                    continue  # plain data: nothing to wait for
                st = state.get(id(dep))
                if st == 2:
                    continue
                if st == 1:
                    start = next(i for i, (o, _) in enumerate(stack) if o is dep)
                    names = " -> ".join(
                        [*(type(o).__qualname__ for o, _ in stack[start:]), type(dep).__qualname__]
                    )
                    raise StateError(f"wait=True dependencies form a cycle: {names}")
                state[id(dep)] = 1
                stack.append((dep, iter(_wait_targets(dep))))
                break
            else:
                stack.pop()
                if type(obj) in hooked_set:
                    try:
                        obj.__after_load__()
                    except StateError:
                        raise
                    except Exception as exc:
                        raise StateError(
                            f"__after_load__ of {type(obj).__qualname__} failed: {exc!r}"
                        ) from exc
                state[id(obj)] = 2


def _wait_targets(obj: Any) -> list:
    sch = registry.type_info(type(obj)).schema
    targets = []
    for name in sch.wait_fields:
        value = getattr(obj, name, None)
        if isinstance(value, list | tuple | set | frozenset):
            targets.extend(value)
        elif isinstance(value, dict):
            targets.extend(value.values())
        elif value is not None:
            targets.append(value)
    return targets


def hooked_classes(loaded: Loaded) -> list[type]:
    return [p.schema.cls for p in loaded.plans if p is not None and p.schema.after_load]


def is_enum_member(value: Any) -> bool:
    return isinstance(value, enum.Enum)
