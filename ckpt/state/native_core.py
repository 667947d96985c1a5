"""The native engine's compiled core as Python meets it: loading ``_native`` (or saying,
in the compiler's words, why it is missing), the layout checks it runs on probe objects
at import, the codes ``_native_vocab.h`` declares and the module exports, and the frame
helpers (CRC, frame check, GC pause) that use the core where it has them.

Everything here runs once, at import; ``native_plans`` builds per-class plans from these
codes and ``native`` drives saves and loads.  A core built from older sources than this
ckpt's is not used (``native_status()`` says so).
"""

from __future__ import annotations

import gc
import importlib.util
import sys
import sysconfig
import zlib
from pathlib import Path
from typing import Any

import msgspec

from ckpt.errors import StateError
from ckpt.state import wire as w


def _load_core() -> tuple[Any, str]:
    from ckpt import settings

    if settings.current().pure_python:
        return None, "disabled by CKPT_PURE_PYTHON=1"
    if importlib.util.find_spec("ckpt.state._native") is None:
        return None, not_built_reason(Path(__file__).parent)
    try:
        from ckpt.state import _native
    except ImportError as exc:
        return None, f"the C extension does not load ({exc}); reinstall ckpt"
    if not hasattr(_native, "OP_PY"):  # built from older sources than this ckpt's
        return None, "the C extension is older than this ckpt (no shared codes); reinstall ckpt"
    _native.configure(msgspec.msgpack.Encoder().encode, StateError)
    if hasattr(_native, "read_configure"):  # an older build without the byte reader
        _native.read_configure(StateError, _decode_slice)
    _native.check_values(_Probe(), "x")  # a fresh instance: inline values
    probe = _Probe()
    probe.__dict__  # noqa: B018 (materialise it: the layout check needs one)
    _native.check_layout(probe)
    if hasattr(_native, "check_store"):
        _StoreProbe(None, None)  # puts both names in the class's shared keys
        a, b = object(), object()
        _native.check_store(object.__new__(_StoreProbe), sys.intern("a"), a, sys.intern("b"), b)
    return _native, "C extension loaded"


BUILD_NOTE_SUFFIX = ".build-error.txt"  # as setup.py's NOTE_SUFFIX writes it


def not_built_reason(package_dir: Path) -> str:
    """Why the C extension is missing, in the compiler's words when setup.py kept them
    (``_native<EXT_SUFFIX>.build-error.txt``); otherwise what is known for certain."""
    so_name = "_native" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    try:
        first = (package_dir / (so_name + BUILD_NOTE_SUFFIX)).read_text("utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        first = []
    first = [line.strip() for line in first if line.strip()][:1]
    if first:
        why = first[0] if len(first[0]) <= 200 else first[0][:197] + "..."
        return (
            f"the C extension failed to compile at install: {why}; `pip install -v` shows the rest"
        )
    others = sorted(p.name for p in package_dir.glob("_native.*") if p.suffix in (".so", ".pyd"))
    built = f"; built only as {', '.join(others)}" if others else ""
    return (
        f"the C extension is not built for this Python ({so_name} is missing{built}); "
        "reinstall ckpt with `pip install -v` to see why"
    )


def _decode_slice(view: memoryview) -> Any:
    """What the C reader hands msgspec (maps with non-scalar keys, extensions, values
    nested deeper than it goes): decoded, with msgspec's errors as ``StateError``."""
    try:
        return _slice_decoder.decode(view)
    except (msgspec.DecodeError, ValueError, OverflowError, RecursionError) as exc:
        raise StateError(f"state stream payload is malformed: {exc}") from exc


_slice_decoder = msgspec.msgpack.Decoder(ext_hook=w.refuse_extension)


class _Probe:
    """An instance with a materialised ``__dict__``, for the C core's layout check."""

    def __init__(self) -> None:
        self.x = 1


class _StoreProbe:
    """Two attributes, for the C core's check of direct stores into inline values."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a = a
        self.b = b


_core, _reason = _load_core()


def _codes(names: str, bits: bool = False) -> tuple[int, ...]:
    """The C core's codes by name: ``_native_vocab.h`` declares them once and the module
    exports them.  Without the core no plan is ever run, and distinct stand-ins do."""
    global _stale
    listed = names.split()
    if _core is not None:
        missing = [name for name in listed if not hasattr(_core, name)]
        if not missing:
            return tuple(getattr(_core, name) for name in listed)
        _stale = _stale or missing[0]  # a core built from older sources: unused below
    return tuple((1 << i) if bits else i for i in range(len(listed)))


_stale = ""  # the first code an old core lacks


# save: a field's op, an element's op, the scalar type bits
(
    OP_PY,
    OP_SCALAR,
    OP_REF,
    OP_ENUM,
    OP_ANY,
    OP_LIST,
    OP_SET,
    OP_DICT,
    OP_TUPLE,
    OP_FROZENSET,
    OP_SAVE,
    OP_VALUE,
    OP_BYTEARRAY,
    OP_ENUM_DYN,
) = _codes(
    "OP_PY OP_SCALAR OP_REF OP_ENUM OP_ANY OP_LIST OP_SET OP_DICT OP_TUPLE OP_FROZENSET "
    "OP_SAVE OP_VALUE OP_BYTEARRAY OP_ENUM_DYN"
)
E_NONE, E_SCALAR, E_REF, E_ENUM, E_ANY, E_TUPLE, E_LIST, E_LIST_REF, E_NEST = _codes(
    "E_NONE E_SCALAR E_REF E_ENUM E_ANY E_TUPLE E_LIST E_LIST_REF E_NEST"
)
# save: a nest program's nodes (E_NEST)
SK_SCALAR, SK_REF, SK_ENUM, SK_LIST, SK_SET, SK_FROZENSET, SK_DICT = _codes(
    "SK_SCALAR SK_REF SK_ENUM SK_LIST SK_SET SK_FROZENSET SK_DICT"
)
_M_NONE, _M_BOOL, _M_INT, _M_FLOAT, _M_STR, _M_BYTES, _M_REF, _M_ENUM, _M_ANY = _codes(
    "M_NONE M_BOOL M_INT M_FLOAT M_STR M_BYTES M_REF M_ENUM M_ANY", bits=True
)
# load: a field's op, what a sequence is built into, how a zero is made, value kinds
(
    L_PY,
    L_DEFAULT,
    L_FACTORY,
    L_RAW,
    L_NONE_ZERO,
    L_FALSY_ZERO,
    L_TUPLE,
    L_REF,
    L_ANY,
    L_ENUM,
    L_SEQ_REF,
    L_SEQ,
    L_DICT,
    L_DICT_REF,
    L_SAVE,
    L_VALUE,
    L_SEQ_TUPLE,
    L_ELEM,
) = _codes(
    "L_PY L_DEFAULT L_FACTORY L_RAW L_NONE_ZERO L_FALSY_ZERO L_TUPLE L_REF L_ANY L_ENUM "
    "L_SEQ_REF L_SEQ L_DICT L_DICT_REF L_SAVE L_VALUE L_SEQ_TUPLE L_ELEM"
)
# load: an element program's nodes (L_ELEM)
EK_PASS, EK_REF, EK_ANY, EK_ENUM, EK_OPT, EK_TUPLE, EK_SEQ, EK_DICT, EK_BYTEARRAY = _codes(
    "EK_PASS EK_REF EK_ANY EK_ENUM EK_OPT EK_TUPLE EK_SEQ EK_DICT EK_BYTEARRAY"
)
B_LIST, B_SET, B_FROZENSET, B_TUPLE = _codes("B_LIST B_SET B_FROZENSET B_TUPLE")
Z_OBJECT, Z_CALL, Z_LIST, Z_DICT, Z_SET = _codes("Z_OBJECT Z_CALL Z_LIST Z_DICT Z_SET")
_VK = _codes("VK_DATETIME VK_DATE VK_TIMEDELTA VK_UUID")
_VALUE_KINDS = dict(zip(("datetime", "date", "timedelta", "uuid"), _VK, strict=True))
(MAX_TUPLE_ITEMS,) = (8,) if _core is None else _codes("MAX_TUPLE_ITEMS")
MAX_ELEM_DEPTH, MAX_ELEM_NODES = (
    (6, 32) if _core is None else _codes("MAX_ELEM_DEPTH MAX_ELEM_NODES")
)
if _stale:  # a core built from older sources than this ckpt's: run without it, say why
    _core, _reason = (
        None,
        f"the C extension is older than this ckpt (it lacks {_stale}); reinstall ckpt",
    )
    MAX_TUPLE_ITEMS, MAX_ELEM_DEPTH, MAX_ELEM_NODES = 8, 6, 32


_CRC_IN_C = _core is not None and hasattr(_core, "crc32")  # a core built before it: zlib


def _crc32(body: memoryview) -> int:
    """zlib.crc32 of a frame's payload, by the C core's folded CRC (loads check every
    frame: 5 MiB for a sandbox with 1 GiB of memory)."""
    return _core.crc32(body, 0) if _CRC_IN_C else zlib.crc32(body)


# the C core checks a frame in one call where it knows wire.py's header: the same
# magic, header size and read versions (else, or an older core, wire.check_frame)
_FRAME_IN_C = (
    getattr(_core, "FRAME_FORMAT", None)
    == (
        w.MAGIC,
        w.HEADER_SIZE,
        min(w.READ_VERSIONS),
        max(w.READ_VERSIONS),
    )
    and tuple(range(min(w.READ_VERSIONS), max(w.READ_VERSIONS) + 1)) == w.READ_VERSIONS
)


def _frame_body(data: Any) -> memoryview:
    """wire.check_frame's payload: a well-formed frame checked by the C core in one call;
    anything else (and every error message) is wire.check_frame's."""
    if _FRAME_IN_C:
        body = _core.frame_body(data)
        if body is not None:
            return body
    return w.check_frame(data, _crc32)


def _paused_in_python(fn: Any, *args: Any) -> Any:
    """``_core.paused`` for a core built before it (or none): fn(*args) with cyclic GC
    off, and back on afterwards only if it was on."""
    if not gc.isenabled():
        return fn(*args)
    gc.disable()
    try:
        return fn(*args)
    finally:
        gc.enable()


# fn(*args) with cyclic GC paused: one C call where the core has it
call_paused = getattr(_core, "paused", None) or _paused_in_python


def native_status() -> tuple[bool, str]:
    """(whether the native engine can run here, a one-line reason)."""
    return _core is not None, _reason
