"""Declaring savable types: ``@savable`` registers a dataclass, ``field()`` sets options.

The registry maps a stable type name (``module.QualName`` unless given) to its class.
Loading instantiates only classes found here, so a stream can never name arbitrary
code.  Field kinds are derived lazily from annotations on first use (annotations may
be forward references to classes declared later), and cached on the ``TypeInfo``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import MISSING
from typing import Any, TypeVar

from ckpt.errors import StateError

T = TypeVar("T", bound=type)

_FIELD_KEY = "ckpt"
_CO_NEWLOCALS = 0x0002  # inspect.CO_NEWLOCALS: a function's frame, not a module or class body
_by_name: dict[str, type] = {}
_by_class: dict[type, TypeInfo] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class FieldOptions:
    """Per-field options given through ``state.field``."""

    nosave: bool = False
    save: Callable[[Any], Any] | None = None  # value -> plain value (gVisor's ".(T)")
    load: Callable[[Any], Any] | None = None  # plain value -> value
    wait: bool = False  # our __after_load__ runs after the referenced object's


def field(
    *,
    nosave: bool = False,
    save: Callable[[Any], Any] | None = None,
    load: Callable[[Any], Any] | None = None,
    wait: bool = False,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    **kwargs: Any,
) -> Any:
    """A dataclass field with checkpoint options.

    ``nosave``: not saved; takes its default on load.  ``save``/``load``: the field is
    saved as the plain value ``save(value)`` and rebuilt with ``load(plain)``.
    ``wait``: this object's ``__after_load__`` runs only after the referenced object's.
    """
    if (save is None) != (load is None):
        raise StateError("state.field: save= and load= must be given together")
    if nosave and (save is not None or wait):
        raise StateError("state.field: nosave=True excludes save=, load= and wait=")
    if nosave and default is MISSING and default_factory is MISSING:
        raise StateError("state.field: a nosave field needs a default or default_factory")
    metadata = dict(kwargs.pop("metadata", None) or {})
    metadata[_FIELD_KEY] = FieldOptions(nosave=nosave, save=save, load=load, wait=wait)
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata=metadata, **kwargs
    )


def field_options(f: dataclasses.Field) -> FieldOptions:
    return f.metadata.get(_FIELD_KEY) or _NO_OPTIONS


_NO_OPTIONS = FieldOptions()


@dataclasses.dataclass(eq=False)
class TypeInfo:
    """What the engines know about one registered class.  ``fields`` is filled lazily."""

    cls: type
    name: str
    _schema: Any = None  # ckpt.state.schema.Schema, built on first use
    frame: Any = None  # the defining function's frame, for local names (dropped on use)

    def take_frame_locals(self) -> dict | None:
        """The defining function's local names as they are now (then forget the frame)."""
        frame, self.frame = self.frame, None
        if frame is None:
            return None
        try:
            return dict(frame.f_locals)
        finally:
            del frame

    @property
    def schema(self) -> Any:
        if self._schema is None:
            from ckpt.state.schema import build_schema
            from ckpt.state.stats import setup_timer

            with setup_timer():
                self._schema = build_schema(self)
        return self._schema


def savable(cls: T | None = None, *, name: str | None = None) -> Any:
    """Register a dataclass as savable: ``@state.savable`` or ``@state.savable(name=...)``.

    Apply it above ``@dataclass``.  The name is what streams record; it defaults to
    ``module.QualName`` and must be unique.  A ``typing.NamedTuple`` class may be
    registered too: it is saved as a value (its items), not as an object with identity.

    A class defined inside a function keeps a reference to that function's frame until
    its field kinds are first needed, so annotations naming other local classes
    (``from __future__ import annotations``) resolve, as in pydantic and attrs.
    """
    caller = sys._getframe(1)
    frame = caller if caller.f_code.co_flags & _CO_NEWLOCALS else None
    del caller

    def register(klass: T) -> T:
        from ckpt.state import values

        if values.is_namedtuple(klass):
            type_name = name or f"{klass.__module__}.{klass.__qualname__}".replace("<locals>.", "")
            values.register_namedtuple(klass, type_name)
            return klass
        if not isinstance(klass, type) or not dataclasses.is_dataclass(klass):
            raise StateError(
                f"@state.savable needs a dataclass; {klass!r} is not one "
                "(put @state.savable above @dataclass)"
            )
        type_name = name or f"{klass.__module__}.{klass.__qualname__}"
        if "<locals>" in type_name and name is None:
            type_name = type_name.replace("<locals>.", "")
        existing = _by_name.get(type_name)
        if existing is not None and existing is not klass:
            if (existing.__module__, existing.__qualname__) != (
                klass.__module__,
                klass.__qualname__,
            ):
                raise StateError(
                    f"savable type name {type_name!r} is already registered by "
                    f"{existing.__module__}.{existing.__qualname__}; pass name= to tell them apart"
                )
            # Same class redefined (a module reloaded, a test run twice): the new one wins.
            _by_class.pop(existing, None)
        _by_name[type_name] = klass
        _by_class[klass] = TypeInfo(klass, type_name, frame=frame)
        return klass

    if cls is not None:
        return register(cls)
    return register


def type_info(cls: type) -> TypeInfo | None:
    """The TypeInfo of a registered class, or None."""
    return _by_class.get(cls)


def class_named(name: str) -> type | None:
    """The registered class with this stream name, or None."""
    return _by_name.get(name)


def is_savable(cls: type) -> bool:
    return cls in _by_class
