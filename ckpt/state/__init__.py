"""The object-graph engine: save a graph of savable dataclasses to a stream and back.

Three engines share one wire format (see ``ckpt/state/README.md``):

* ``reflect`` walks each object at run time, dispatching on each value's type;
* ``typed`` runs code generated once per type from its annotations;
* ``native`` writes and reads the typed engine's stream in C (where it is built).

Public API::

    @state.savable                      # registers the dataclass
    state.dumps(root, engine=None, stats=None) -> bytes   # None: default_engine()
    state.loads(data, engine=None, stats=None) -> root
    state.default_engine()              # "native" where built, else "typed"
    state.native_status()               # (available, one-line reason)
    state.save(root, binary_file, engine=..., stats=None) -> SaveResult
    state.load(binary_file, engine=..., stats=None) -> root
    state.Stats()                       # per-type counts and times when passed in
    state.generated_source(cls)         # the typed engine's code for a class
    state.inspect_stream(data)          # read a stream without importing its classes
    state.register_value(cls, to_plain=..., from_plain=...)  # a value type as plain data
"""

from ckpt.errors import StateError
from ckpt.state.api import ENGINES, SaveResult, default_engine, dumps, load, loads, save
from ckpt.state.native import native_status
from ckpt.state.registry import field, savable
from ckpt.state.stats import Stats
from ckpt.state.typed import generated_source
from ckpt.state.values import register_value

_LAZY = {"ObjectView", "Ref", "StreamView", "TypeView", "inspect_stream"}


def __getattr__(name: str) -> object:
    """The inspection API loads on first use: restoring a sandbox never needs it."""
    if name in _LAZY:
        from ckpt.state import inspect

        return getattr(inspect, name)
    raise AttributeError(f"module 'ckpt.state' has no attribute {name!r}")


__all__ = [
    "ENGINES",
    "ObjectView",
    "Ref",
    "SaveResult",
    "StateError",
    "Stats",
    "StreamView",
    "TypeView",
    "default_engine",
    "dumps",
    "field",
    "generated_source",
    "inspect_stream",
    "load",
    "loads",
    "native_status",
    "register_value",
    "savable",
    "save",
]
