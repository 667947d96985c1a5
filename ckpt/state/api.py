"""The public entry points and the one error boundary.

Deep code raises ``StateError`` (or trips over malformed input with a built-in
exception); here every failure becomes a ``StateError`` that says which engine and
what went wrong, chained to the cause.  Cyclic GC is paused during a typed or native
save or load: the walk allocates many objects and no garbage, so collections would only
traverse the growing graph again and again.  The pause is one C call around the whole
operation (``native.call_paused``), which restores GC on every way out.  ``native`` is
listed only where its C core is built (``native_status()`` says why not);
``default_engine()`` is the fastest one here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, BinaryIO

from ckpt.engines import ENGINE_NAMES
from ckpt.errors import StateError
from ckpt.state import graph, native, reflect, typed
from ckpt.state import wire as w
from ckpt.state.native import call_paused, native_status
from ckpt.state.stats import Stats, collecting

_NATIVE = native_status()[0]  # fixed once the C core has loaded (or not)
_DEFAULT = "native" if _NATIVE else "typed"
# the engines this build runs, slowest first (the order benchmarks list them in)
ENGINES = tuple(n for n in reversed(ENGINE_NAMES) if _NATIVE or n != "native")
PAUSE_GC = True  # typed and native pause cyclic GC; benchmarks turn it off to compare
_MODULES = {"reflect": reflect, "typed": typed, "native": native}
_PAUSED = (typed, native)
_INPUT_ERRORS = (
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    AttributeError,
    RecursionError,
    OverflowError,
    UnicodeError,
    LookupError,
)
_FAILURES = (StateError, *_INPUT_ERRORS)  # what the boundary turns into one StateError
# engine= values that name the native engine: dumps and loads take it without a detour
_NATIVE_NAMES = (None, "native") if _NATIVE else ()


@dataclass(frozen=True)
class SaveResult:
    """What ``save`` wrote: object and type counts and the stream's size in bytes."""

    objects: int
    types: int
    bytes: int


def default_engine() -> str:
    """The fastest engine available here: ``native`` when its C core is built, else ``typed``."""
    return _DEFAULT


def _engine(name: str | None) -> Any:
    module = _MODULES.get(_DEFAULT if name is None else name)
    if module is None:
        raise StateError(f"unknown state engine {name!r}; choose one of {', '.join(ENGINES)}")
    if module is native and not _NATIVE:
        raise StateError(
            f"the native state engine is unavailable here ({native_status()[1]}); "
            "use engine='typed'"
        )
    return module


def _encode(root: Any, engine: str | None, stats: Stats | None) -> tuple[bytes, int, int]:
    """Frame the graph; returns the stream and its object and type counts.

    GC is switched off before anything is allocated and back on only after the walk's
    tables are released, so no collection can start anywhere inside a typed save.
    """
    module = _engine(engine)
    engine = engine or _DEFAULT
    try:
        if module in _PAUSED and PAUSE_GC:
            return call_paused(_encode_with, module, root, stats)
        return _encode_with(module, root, stats)
    except _FAILURES as exc:
        raise _save_failed(engine, root, exc) from exc


def _encode_with(module: Any, root: Any, stats: Stats | None) -> tuple[bytes, int, int]:
    if module is native:
        if stats is None:
            return native.save(root, None)  # framed, with its object and type counts
        with collecting(stats):
            return native.save(root, stats)
    if stats is None:
        payload, walk = module.save(root, stats)
    else:
        with collecting(stats):
            payload, walk = module.save(root, stats)
    data = w.frame(payload)
    counts = (len(walk.objects) - 1, len(walk.types))
    del payload
    walk.release()
    return data, *counts


def _save_failed(engine: str, root: Any, exc: BaseException) -> StateError:
    """The boundary's error for a failed save, naming the engine and where it failed."""
    if isinstance(exc, StateError):
        return StateError(f"{engine} save failed: {exc}{_where(root)}")
    return StateError(f"{engine} save failed: {type(exc).__name__}: {exc}{_where(root)}")


def _load_failed(engine: str, exc: BaseException) -> StateError:
    if isinstance(exc, StateError):
        return StateError(f"{engine} load failed: {exc}")
    return StateError(
        f"{engine} load failed: the stream is malformed ({type(exc).__name__}: {exc})"
    )


def _where(root: Any) -> str:
    """`` (at $.path.to[3].value)`` for the first unsavable value, searched only now that
    the save has failed."""
    from ckpt.state.paths import path_to_unsavable

    try:
        path = path_to_unsavable(root)
    except Exception:  # the path is a courtesy: never hide the real error behind it
        return ""
    return f" (at {path})" if path else ""


def dumps(root: Any, engine: str | None = None, stats: Stats | None = None) -> bytes:
    """Serialize the graph reachable from ``root`` into a self-contained stream."""
    if engine in _NATIVE_NAMES and stats is None and PAUSE_GC:  # _encode, fewer steps
        try:
            return call_paused(native.save, root, None)[0]
        except _FAILURES as exc:
            raise _save_failed("native", root, exc) from exc
    return _encode(root, engine, stats)[0]


def save(
    root: Any, binary_file: BinaryIO, engine: str | None = None, stats: Stats | None = None
) -> SaveResult:
    """Serialize into a writable binary file; one large write."""
    data, objects, types = _encode(root, engine, stats)
    _write_all(binary_file, data)
    return SaveResult(objects=objects, types=types, bytes=len(data))


def _write_all(binary_file: BinaryIO, data: bytes) -> None:
    """Write everything, also to raw streams whose write() may take only part."""
    view = memoryview(data)
    while view:
        n = binary_file.write(view)
        if n is None:  # a non-blocking raw stream that would block
            raise StateError("the output stream would block; give save() a blocking file")
        view = view[n:]


def _read_exact(binary_file: BinaryIO, size: int) -> bytes:
    """Read ``size`` bytes (fewer only at end of file), also from raw streams that
    return short reads.  Reads at most 1 MiB at a time: the size comes from the input,
    so memory grows only with what the file really holds."""
    parts = []
    while size > 0:
        chunk = binary_file.read(min(size, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def loads(data: Any, engine: str | None = None, stats: Stats | None = None) -> Any:
    """Rebuild the graph from a stream written by any engine (None: default_engine())."""
    if engine in _NATIVE_NAMES and stats is None and PAUSE_GC:  # as below, fewer steps
        try:
            return call_paused(native.loads, data, None)
        except _FAILURES as exc:
            raise _load_failed("native", exc) from exc
    module = _engine(engine)
    engine = engine or _DEFAULT
    try:
        if module in _PAUSED and PAUSE_GC:
            return call_paused(_decode_with, module, data, stats)
        return _decode_with(module, data, stats)
    except _FAILURES as exc:
        raise _load_failed(engine, exc) from exc


def _decode_with(module: Any, data: Any, stats: Stats | None) -> Any:
    if module is native:  # reads the rows from the bytes: no decoded payload
        if stats is None:
            return native.loads(data, None)
        with collecting(stats):
            return native.loads(data, stats)
    if stats is None:
        return module.load(graph.validate(w.unframe(data)), stats)
    with collecting(stats):
        return module.load(graph.validate(w.unframe(data)), stats)


def load(binary_file: BinaryIO, engine: str | None = None, stats: Stats | None = None) -> Any:
    """Rebuild the graph from the next stream in a readable binary file.

    Reads exactly one frame (header, then the length it declares), so streams written
    back to back load one at a time.
    """
    header = _read_exact(binary_file, w.HEADER_SIZE)
    body = _read_exact(binary_file, w.payload_length(header))
    return loads(header + body, engine, stats)
