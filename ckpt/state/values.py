"""Value codecs: stdlib value types (and user-registered ones) as plain data.

A value codec turns a value into a short list of plain values (its *payload*) and back.
On the wire a codec value is ``{9: [name, payload]}`` (see README, "Value codecs"), or,
in a field annotated with the type, the payload alone (kind ``value:<name>``).  Loading
looks the name up in this module's table only: a stream can never make a loader import
a module or call anything it names.  ``from_plain`` functions check their input, and
any exception they raise becomes a ``StateError`` naming the codec.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ckpt.errors import StateError


@dataclass(frozen=True, eq=False)
class Codec:
    """How one value type becomes a payload list and back."""

    name: str
    cls: type
    to_plain: Callable[[Any], list]  # value -> list of plain values
    from_plain: Callable[[list], Any]  # list of plain values -> value
    builtin: bool = False
    # to_plain's list is already its own self-describing form (only None, bools, small
    # ints, floats, strs, bytes, lists of those): no per-item encoding needed.
    flat: bool = False
    # A mutable container (deque, OrderedDict, defaultdict, Counter): identity-tracked
    # like a list, its payload built by ``items(value, encode)`` with every item encoded
    # tracked, so sharing inside and of it survives.
    items: Callable[[Any, Callable[[Any], Any]], list] | None = None


_by_name: dict[str, Codec] = {}
_by_class: dict[type, Codec] = {}


# Built-in codecs are set up on first need, so importing ckpt.state does not import
# decimal, fractions, ipaddress, uuid...: a value of one of these types can only exist
# once its module is imported, so a miss for a class from one of these modules is when.
_BUILTIN_MODULES = frozenset(
    {"datetime", "decimal", "uuid", "pathlib", "fractions", "ipaddress", "collections", "builtins"}
)
_builtins_ready = False


def codec_for(cls: type) -> Codec | None:
    """The codec for values whose exact type is ``cls``, or None."""
    codec = _by_class.get(cls)
    if codec is None and not _builtins_ready and cls.__module__ in _BUILTIN_MODULES:
        _load_builtins()
        codec = _by_class.get(cls)
    return codec


def codec_named(name: str) -> Codec | None:
    """The codec a stream names (a fixed table: nothing is imported by name)."""
    codec = _by_name.get(name)
    if codec is None and not _builtins_ready:
        _load_builtins()
        codec = _by_name.get(name)
    return codec


def register_value(
    cls: type,
    *,
    name: str | None = None,
    to_plain: Callable[[Any], Any],
    from_plain: Callable[[list], Any],
) -> type:
    """Make instances of ``cls`` savable as plain data.

    ``to_plain(value)`` returns a list (or tuple) of plain values: None, bool, int,
    float, str, bytes, lists, tuples, dicts, other value types, references to savable
    objects.  ``from_plain(items)`` gets that list back and returns the value.  Only
    values whose exact type is ``cls`` use the codec (not subclasses).  The name is what
    streams record; it defaults to ``module.QualName`` and must be unique.
    """
    if not isinstance(cls, type):
        raise StateError(f"state.register_value needs a class, not {cls!r}")
    if not (callable(to_plain) and callable(from_plain)):
        raise StateError("state.register_value: to_plain and from_plain must be callables")
    codec_name = name or f"{cls.__module__}.{cls.__qualname__}"
    old = _by_name.get(codec_name)
    if old is not None and old.builtin:
        raise StateError(f"value codec name {codec_name!r} is built in; pass another name=")
    if old is not None and old.cls is not cls and old.cls.__qualname__ != cls.__qualname__:
        raise StateError(
            f"value codec name {codec_name!r} is already used by "
            f"{old.cls.__module__}.{old.cls.__qualname__}; pass name= to tell them apart"
        )
    if old is not None:
        _by_class.pop(old.cls, None)
    _add(Codec(codec_name, cls, to_plain, from_plain))
    return cls


def _add(codec: Codec) -> None:
    _by_name[codec.name] = codec
    _by_class[codec.cls] = codec


def from_plain(codec: Codec, payload: Any) -> Any:
    """``codec.from_plain`` with every failure turned into a StateError."""
    if type(payload) is not list:
        raise StateError(f"a {codec.name} value must be stored as an array")
    try:
        return codec.from_plain(payload)
    except StateError:
        raise
    except Exception as exc:
        raise StateError(f"a {codec.name} value in the stream is invalid: {exc!r}") from exc


# --- checks for payload items (hostile input) -------------------------------------


def _int(x: Any) -> int:
    if type(x) is not int:
        raise StateError(f"expected an int, found {type(x).__name__}")
    return x


def _str(x: Any) -> str:
    if type(x) is not str:
        raise StateError(f"expected a str, found {type(x).__name__}")
    return x


def _num(x: Any) -> float:
    if type(x) not in (int, float):
        raise StateError(f"expected a number, found {type(x).__name__}")
    return x


def _items(p: list, n: int) -> list:
    if len(p) != n:
        raise StateError(f"expected {n} items, found {len(p)}")
    return p


def _seq(x: Any) -> list:
    if type(x) is not list:
        raise StateError(f"expected an array, found {type(x).__name__}")
    return x


# --- time zones -----------------------------------------------------------------


def _tz_plain(tz: Any) -> Any:
    import datetime as dt

    if tz is None:
        return None
    if tz is dt.UTC:
        return ["utc"]
    if type(tz) is dt.timezone:
        off = tz.utcoffset(None)
        name = tz.tzname(None)
        default = dt.timezone(off).tzname(None)
        return ["fixed", off // dt.timedelta(microseconds=1), None if name == default else name]
    key = getattr(tz, "key", None)
    if type(tz).__module__ == "zoneinfo" and type(tz).__name__ == "ZoneInfo" and key:
        return ["zone", key]
    raise StateError(
        f"cannot save a time zone of type {type(tz).__module__}.{type(tz).__qualname__} "
        "(savable: None, datetime.timezone, zoneinfo.ZoneInfo)"
    )


def _tz_value(raw: Any) -> Any:
    import datetime as dt

    if raw is None:
        return None
    raw = _seq(raw)
    kind = raw[0] if raw else None
    if kind == "utc" and len(raw) == 1:
        return dt.UTC
    if kind == "fixed" and len(raw) == 3:
        off = dt.timedelta(microseconds=_int(raw[1]))
        return dt.timezone(off) if raw[2] is None else dt.timezone(off, _str(raw[2]))
    if kind == "zone" and len(raw) == 2:
        import zoneinfo

        key = _str(raw[1])
        try:
            return zoneinfo.ZoneInfo(key)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise StateError(f"time zone {key!r} is not in this system's tz database") from exc
    raise StateError(f"malformed time zone {raw!r}")


def _datetime_plain(v: Any) -> list:
    return [
        v.year,
        v.month,
        v.day,
        v.hour,
        v.minute,
        v.second,
        v.microsecond,
        v.fold,
        _tz_plain(v.tzinfo),
    ]


def _datetime_value(p: list) -> Any:
    import datetime as dt

    *parts, tz = _items(p, 9)
    y, mo, d, h, mi, s, us, fold = map(_int, parts)
    return dt.datetime(y, mo, d, h, mi, s, us, tzinfo=_tz_value(tz), fold=fold)


def _time_plain(v: Any) -> list:
    return [v.hour, v.minute, v.second, v.microsecond, v.fold, _tz_plain(v.tzinfo)]


def _time_value(p: list) -> Any:
    import datetime as dt

    *parts, tz = _items(p, 6)
    h, mi, s, us, fold = map(_int, parts)
    return dt.time(h, mi, s, us, tzinfo=_tz_value(tz), fold=fold)


# --- collections ----------------------------------------------------------------

_FACTORIES: dict[Any, str] = {list: "list", dict: "dict", set: "set", int: "int"}
_FACTORY_BY_NAME = {v: k for k, v in _FACTORIES.items()}


def _factory_plain(f: Any) -> Any:
    if f is None:
        return None
    name = _FACTORIES.get(f)
    if name is not None:
        return name
    from ckpt.state import registry

    info = registry.type_info(f) if isinstance(f, type) else None
    if info is not None:
        return ["type", info.name]
    raise StateError(
        f"cannot save a defaultdict whose default_factory is {f!r} "
        "(savable factories: list, dict, set, int, None, or a registered savable type)"
    )


def _factory_value(raw: Any) -> Any:
    if raw is None:
        return None
    if type(raw) is str and raw in _FACTORY_BY_NAME:
        return _FACTORY_BY_NAME[raw]
    if type(raw) is list and len(raw) == 2 and raw[0] == "type" and type(raw[1]) is str:
        from ckpt.state import registry

        cls = registry.class_named(raw[1])
        if cls is not None:
            return cls
        raise StateError(f"defaultdict factory {raw[1]!r} is not a registered savable type")
    raise StateError(f"defaultdict factory {raw!r} is not allowed")


def _pairs(p: list, n_before: int = 0) -> tuple[list, list]:
    keys, values = _seq(p[n_before]), _seq(p[n_before + 1])
    if len(keys) != len(values):
        raise StateError("key and value counts differ")
    return keys, values


def _mapping_plain(v: dict) -> list:
    return [list(v), list(v.values())]


def _odict_value(p: list) -> collections.OrderedDict:
    return collections.OrderedDict(zip(*_pairs(_items(p, 2)), strict=True))


def _counter_exact(p: list) -> collections.Counter:
    # Counter.update adds; build via dict assignment so zero/negative counts survive.
    keys, values = _pairs(_items(p, 2))
    c: collections.Counter = collections.Counter()
    for k, v in zip(keys, values, strict=True):
        dict.__setitem__(c, k, v)
    return c


def _ddict_plain(v: collections.defaultdict) -> list:
    return [_factory_plain(v.default_factory), list(v), list(v.values())]


def _ddict_value(p: list) -> collections.defaultdict:
    _items(p, 3)
    d = collections.defaultdict(_factory_value(p[0]))
    d.update(zip(*_pairs(p, 1), strict=True))
    return d


def _deque_value(p: list) -> collections.deque:
    items, maxlen = _items(p, 2)
    if maxlen is not None and (_int(maxlen) < 0 or maxlen < len(_seq(items))):
        raise StateError("deque maxlen is negative or smaller than its length")
    return collections.deque(_seq(items), maxlen)


def _range_value(p: list) -> range:
    start, stop, step = map(_int, _items(p, 3))
    return range(start, stop, step)


def _path(cls: type) -> Callable[[list], Any]:
    def make(p: list) -> Any:
        return cls(_str(_items(p, 1)[0]))

    return make


def _by_str(cls: type) -> Callable[[list], Any]:
    def make(p: list) -> Any:
        return cls(_str(_items(p, 1)[0]))

    return make


def _decimal_value(p: list) -> Any:
    import decimal

    text = _str(_items(p, 1)[0])
    if len(text) > 10_000:
        raise StateError("a Decimal longer than 10000 characters")
    return decimal.Decimal(text)


def _uuid_value(p: list) -> Any:
    import uuid

    raw = _items(p, 1)[0]
    if type(raw) is not bytes or len(raw) != 16:
        raise StateError("a UUID must be 16 bytes")
    return uuid.UUID(bytes=raw)


def _fraction_value(p: list) -> Any:
    import fractions

    num, den = map(_int, _items(p, 2))
    if den <= 0:
        raise StateError("a Fraction needs a positive denominator")
    return fractions.Fraction(num, den)


def _complex_value(p: list) -> complex:
    re, im = map(_num, _items(p, 2))
    return complex(re, im)


def _builtin(
    name: str,
    cls: type,
    to_plain: Callable,
    from_plain: Callable,
    flat: bool = True,
    items: Callable | None = None,
) -> None:
    _add(Codec(name, cls, to_plain, from_plain, builtin=True, flat=flat, items=items))


def _deque_items(v: Any, enc: Callable[[Any], Any]) -> list:
    return [[*map(enc, v)], v.maxlen]


def _mapping_items(v: Any, enc: Callable[[Any], Any]) -> list:
    return [[*map(enc, v)], [*map(enc, v.values())]]


def _ddict_items(v: Any, enc: Callable[[Any], Any]) -> list:
    return [_factory_plain(v.default_factory), *_mapping_items(v, enc)]


def _load_builtins() -> None:
    global _builtins_ready
    import datetime as dt
    import decimal
    import fractions
    import ipaddress
    import pathlib
    import uuid

    _builtins_ready = True
    _builtin("datetime", dt.datetime, _datetime_plain, _datetime_value)
    _builtin(
        "date",
        dt.date,
        lambda v: [v.year, v.month, v.day],
        lambda p: dt.date(*map(_int, _items(p, 3))),
    )
    _builtin("time", dt.time, _time_plain, _time_value)
    _builtin(
        "timedelta",
        dt.timedelta,
        lambda v: [v.days, v.seconds, v.microseconds],
        lambda p: dt.timedelta(*map(_int, _items(p, 3))),
    )
    _builtin("decimal", decimal.Decimal, lambda v: [str(v)], _decimal_value)
    _builtin("uuid", uuid.UUID, lambda v: [v.bytes], _uuid_value)
    for _name, _cls in (
        ("path.posix", pathlib.PosixPath),
        ("path.windows", pathlib.WindowsPath),
        ("path.pureposix", pathlib.PurePosixPath),
        ("path.purewindows", pathlib.PureWindowsPath),
    ):
        _builtin(_name, _cls, lambda v: [str(v)], _path(_cls))
    _builtin("complex", complex, lambda v: [v.real, v.imag], _complex_value)
    _builtin(
        "fraction",
        fractions.Fraction,
        lambda v: [v.numerator, v.denominator],
        _fraction_value,
        flat=False,  # numerator and denominator may be beyond 64 bits
    )
    for _name, _cls in (
        ("ip4", ipaddress.IPv4Address),
        ("ip6", ipaddress.IPv6Address),
        ("ip4net", ipaddress.IPv4Network),
        ("ip6net", ipaddress.IPv6Network),
        ("ip4if", ipaddress.IPv4Interface),
        ("ip6if", ipaddress.IPv6Interface),
    ):
        _builtin(_name, _cls, lambda v: [str(v)], _by_str(_cls))
    _builtin(
        "deque",
        collections.deque,
        lambda v: [list(v), v.maxlen],
        _deque_value,
        flat=False,
        items=_deque_items,
    )
    _builtin(
        "odict",
        collections.OrderedDict,
        _mapping_plain,
        _odict_value,
        flat=False,
        items=_mapping_items,
    )
    _builtin(
        "ddict",
        collections.defaultdict,
        _ddict_plain,
        _ddict_value,
        flat=False,
        items=_ddict_items,
    )
    _builtin(
        "counter",
        collections.Counter,
        _mapping_plain,
        _counter_exact,
        flat=False,
        items=_mapping_items,
    )
    _builtin("range", range, lambda v: [v.start, v.stop, v.step], _range_value, flat=False)


# --- NamedTuple classes registered with @state.savable ----------------------------


def is_namedtuple(cls: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")


def register_namedtuple(cls: type, name: str) -> None:
    """A savable NamedTuple is a value codec: its items, rebuilt without calling code."""
    nfields = len(cls._fields)

    def make(p: list) -> Any:
        return tuple.__new__(cls, _items(p, nfields))

    old = _by_name.get(name)
    if old is not None and old.builtin:
        raise StateError(f"savable type name {name!r} is a built-in value codec name")
    if old is not None:
        _by_class.pop(old.cls, None)
    _add(Codec(name, cls, list, make))
