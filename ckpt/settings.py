"""Every ``CKPT_*`` environment variable, in one table, and the one settings object
built from them.

``VARIABLES`` lists each variable once: its name, the ``Settings`` field it fills, its
type, default, bounds and a one-line meaning (``python3 -m ckpt.cli.docgen`` prints the
table into docs/cli.md).  ``load(env, **options)`` builds a frozen ``Settings``: an
option given by the caller wins, then the environment, then the default.  A value that
does not parse or is out of bounds is one ``SettingsError`` naming the variable and
what it accepts; nothing is silently replaced by a default.

The CLI builds the settings once from its options (``--root``, ``--no-template``) and
hands them to the library with ``use``; code below reads ``current()``, which is those
settings, or the environment's in a process no CLI started (a sandbox, the template,
``serve``).  ``current()`` reads the environment again at each call on purpose: a
sandbox forked from the template adopts the asking command's variables after the fork.
A child process gets the settings it needs in its environment from ``child_env``, the
one function that writes them.

A leaf: it imports only ``ckpt.errors`` (and ``ckpt.faults`` once CKPT_FAULT is set),
so the CLI's start and a sandbox's imports pay little for it.
"""

from __future__ import annotations

import os
from collections import namedtuple

from ckpt.errors import UsageError

TYPE_CHECKING = False  # typing is not imported: a sandbox's start-up does not pay for it
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from ckpt.faults import Injection

PREFIX = "CKPT_"
INF = float("inf")


class SettingsError(UsageError):
    """A ``CKPT_*`` variable (or the option that sets it) has a value ckpt cannot use."""


_VAR = "name field kind default meaning low high inherit"


class Var(namedtuple("Var", _VAR, defaults=(-INF, INF, True))):
    """One variable: ``kind`` is bool, int, float, path, str or fault; numbers lie in
    ``[low, high]``; ``inherit``: a child process is given it (``child_env``)."""

    __slots__ = ()
    name: str
    field: str
    kind: str
    default: Any
    meaning: str
    low: float
    high: float
    inherit: bool


# fmt: off
VARIABLES: tuple[Var, ...] = (
    Var("CKPT_ROOT", "root", "path", None,
        "directory of sandboxes (--root); unset: /run/ckpt as root, else "
        "$XDG_RUNTIME_DIR/ckpt", inherit=False),
    Var("CKPT_TEMPLATE", "template", "bool", True,
        "start sandboxes from the warm template (0: fresh interpreters, as --no-template)"),
    Var("CKPT_CHECKPOINT_TIMEOUT_S", "checkpoint_timeout_s", "float", 1800.0,
        "`checkpoint`'s wait for the sandbox to write its image (it keeps writing)",
        low=1e-3),
    Var("CKPT_RESTORE_TIMEOUT_S", "restore_timeout_s", "float", None,
        "`restore`'s wait for the sandbox to load its image; unset: 120 s + the "
        "image's size at 512 KiB/s per CPU", low=1e-3),
    Var("CKPT_MIGRATE_IO_TIMEOUT_S", "migrate_io_timeout_s", "float", 60.0,
        "`migrate`: one frame or answer from the destination", low=1e-3),
    Var("CKPT_MIGRATE_RECONNECT_S", "migrate_reconnect_s", "float", 30.0,
        "`migrate --post-copy` and `serve`: after the commit, how long a cut link may "
        "last before the pages still on the source are given up", low=0.0),
    Var("CKPT_HANDOVER_TIMEOUT_S", "handover_timeout_s", "float", 5.0,
        "the template's answer when a sandbox hands over or takes back its sockets",
        low=1e-3),
    Var("CKPT_HOLD_TIMEOUT_S", "hold_timeout_s", "float", 600.0,
        "how long the template keeps a checkpointed sandbox's sockets for its restore",
        low=1e-3),
    Var("CKPT_TEMPLATE_REPLY_TIMEOUT_S", "template_reply_timeout_s", "float", 10.0,
        "the template's answer to a request (`run`, `restore`, `template`)", low=1e-3),
    Var("CKPT_TEMPLATE_IDLE_S", "template_idle_s", "float", 1800.0,
        "the template exits after this long without a request", low=1e-3),
    Var("CKPT_TEMPLATE_GC_FREEZE", "template_gc_freeze", "bool", True,
        "the template freezes its warm objects out of its children's collections"),
    Var("CKPT_CACHE_DIR", "cache_dir", "path", None,
        "ckpt's cache (generated code, bytecode, chunks); unset: $XDG_CACHE_HOME/ckpt"),
    Var("CKPT_CODE_CACHE", "code_cache", "bool", True,
        "keep the typed engine's generated code (and bytecode) in the cache"),
    Var("CKPT_CHUNK_CACHE", "chunk_cache", "bool", True,
        "keep chunks fetched from an object store on local disk"),
    Var("CKPT_CHUNK_CACHE_DIR", "chunk_cache_dir", "path", None,
        "the chunk cache's directory; unset: chunks in the cache directory"),
    Var("CKPT_CHUNK_CACHE_MIB", "chunk_cache_mib", "int", 4096,
        "the chunk cache's bound, MiB", low=1, high=1 << 30),
    Var("CKPT_PURE_PYTHON", "pure_python", "bool", False,
        "never load the native engine's C core"),
    Var("CKPT_FAULT", "fault", "fault", None,
        "tests only: make ckpt stall, wait or stop at one point, POINT[:ARGUMENT] "
        "(see Fault injection)"),
    Var("CKPT_TEMPLATE_SOCKET", "template_socket", "str", None,
        "internal: the template's socket, given to a sandbox by ckpt", inherit=False),
    Var("CKPT_SERVE_READY_FD", "serve_ready_fd", "int", None,
        "internal: where `serve --detach` reports its address, given by ckpt",
        low=0, high=1 << 20, inherit=False),
)
# fmt: on
BY_NAME = {v.name: v for v in VARIABLES}
_TRUE = ("1", "yes", "on", "true")
_FALSE = ("0", "no", "off", "false")


class Settings:
    """Every setting, typed and frozen; built by ``load`` (options, then environment,
    then defaults).  None: unset, for settings whose default is computed where used."""

    __slots__ = tuple(v.field for v in VARIABLES)
    root: str | None
    template: bool
    checkpoint_timeout_s: float
    restore_timeout_s: float | None
    migrate_io_timeout_s: float
    migrate_reconnect_s: float
    handover_timeout_s: float
    hold_timeout_s: float
    template_reply_timeout_s: float
    template_idle_s: float
    template_gc_freeze: bool
    cache_dir: str | None
    code_cache: bool
    chunk_cache: bool
    chunk_cache_dir: str | None
    chunk_cache_mib: int
    pure_python: bool
    fault: Injection | None
    template_socket: str | None
    serve_ready_fd: int | None

    def __init__(self, **values: Any) -> None:
        for var in VARIABLES:
            object.__setattr__(self, var.field, values.pop(var.field, var.default))
        if values:
            raise TypeError(f"no such setting: {', '.join(sorted(values))}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"settings are frozen: build new ones to change {name}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        given = (f"{f}={getattr(self, f)!r}" for f in self.__slots__)
        return f"Settings({', '.join(given)})"


def _parse(var: Var, raw: str) -> Any:
    """``raw`` as ``var``'s type within its bounds; SettingsError otherwise."""
    text = raw.strip()
    if var.kind == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise SettingsError(f"{var.name}={raw!r}: give 1 or 0, or unset it")
    if var.kind in ("path", "str"):
        return text
    if var.kind == "fault":
        from ckpt import faults  # only when a test sets CKPT_FAULT

        try:
            return faults.parse(text)
        except ValueError as exc:
            raise SettingsError(f"{var.name}={raw!r}: {exc}") from None
    try:
        value: float = int(text) if var.kind == "int" else float(text)
    except ValueError:
        what = "a whole number" if var.kind == "int" else "a number"
        raise SettingsError(f"{var.name}={raw!r}: give {what}, or unset it") from None
    if not var.low <= value <= var.high:  # also refuses nan
        raise SettingsError(f"{var.name}={raw!r}: out of bounds, give {bounds(var)}")
    return value


def load(env: Mapping[str, str] | None = None, **options: Any) -> Settings:
    """The settings: each option not None wins, then ``env`` (default: this process's
    environment; an empty value counts as unset), then the default."""
    env = os.environ if env is None else env
    unknown = set(options) - set(Settings.__slots__)
    if unknown:
        raise TypeError(f"no such setting: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for var in VARIABLES:
        given = options.get(var.field)
        if given is not None:
            values[var.field] = given
        elif raw := env.get(var.name, ""):
            values[var.field] = _parse(var, raw)
    return Settings(**values)


_used: Settings | None = None


def use(settings: Settings | None) -> None:
    """Make ``settings`` what ``current()`` returns in this process (the CLI, once it
    has parsed its options); None: the environment's again."""
    global _used
    _used = settings


def current() -> Settings:
    """The settings the CLI gave (``use``), else the environment's, read now."""
    return _used if _used is not None else load()


def _render(var: Var, value: Any) -> str:
    if var.kind == "bool":
        return "1" if value else "0"
    return f"{value:g}" if var.kind == "float" else str(value)


def child_env(settings: Settings | None = None) -> dict[str, str]:
    """The ``CKPT_*`` variables a child process needs to run with ``settings``
    (default ``current()``): every inherited one that is not its default."""
    s = current() if settings is None else settings
    out = {}
    for var in VARIABLES:
        value = getattr(s, var.field)
        if var.inherit and value is not None and value != var.default:
            out[var.name] = _render(var, value)
    return out


def bounds(var: Var) -> str:
    """``var``'s bounds as a reader would write them: ``> 0``, ``1..1024``."""
    if var.kind not in ("int", "float"):
        return ""
    low, high = (f"{b:g}" if var.kind == "float" else str(int(b)) for b in (var.low, var.high))
    return f">= {low}" if var.high == INF else f"{low}..{high}"


def describe(var: Var) -> str:
    """The default and the bounds of ``var``, for the documentation."""
    if var.default is None:
        return "unset"
    if var.kind == "bool":
        return "1" if var.default else "0"
    return f"{var.default:g}" if var.kind == "float" else str(var.default)


__all__ = [
    "BY_NAME",
    "VARIABLES",
    "Settings",
    "SettingsError",
    "Var",
    "child_env",
    "current",
    "load",
    "use",
]
