"""Where ckpt caches what it compiles: generated code and, on hosts that turn bytecode
off, the bytecode of its own modules.

``$CKPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/ckpt/codegen``, else
``~/.cache/ckpt/codegen``; ``CKPT_CODE_CACHE=0`` turns it off.  Cached code is
executable, so the directory must belong to the current user and not be writable by
others; otherwise it is not used.

Chunks of images read lazily from an object store are cached apart (``chunk_dir``):
``$CKPT_CHUNK_CACHE_DIR``, else ``chunks`` inside ``$CKPT_CACHE_DIR``, else
``$XDG_CACHE_HOME/ckpt/chunks``; ``CKPT_CHUNK_CACHE=0`` turns that cache off.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ckpt import settings

_dir: Path | bool | None = False  # False: not resolved yet; None: disabled


def cache_dir() -> Path | None:
    """The cache directory, created on first use, or None when unusable or disabled."""
    global _dir
    if _dir is not False:
        return _dir  # type: ignore[return-value]
    _dir = None
    given = settings.current()
    if not given.code_cache:
        return None
    base = given.cache_dir
    _dir = _private_dir(Path(base) if base else _xdg() / "codegen")
    return _dir


def _xdg() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "ckpt"


def _private_dir(path: Path) -> Path | None:
    """``path``, created if needed, if it is this user's and no one else may write it."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = path.stat()
    except OSError:
        return None
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None  # someone else could plant files here
    return path


def chunk_dir() -> Path | None:
    """Where chunks read from an object store are kept, or None when that cache is off
    or unusable.  Read from the environment at each call: a sandbox forked from the
    template has the asking command's CKPT_* settings, not the template's."""
    s = settings.current()
    if not s.chunk_cache:
        return None
    given, base = s.chunk_cache_dir, s.cache_dir
    if given:
        path = Path(given)
    elif base:
        path = Path(base) / "chunks"
    else:
        path = _xdg() / "chunks"
    return _private_dir(path)


def bytecode_dir() -> Path | None:
    """Where ckpt's own bytecode goes when the host sets PYTHONDONTWRITEBYTECODE:
    inside the cache, so nothing is ever written beside the sources."""
    base = cache_dir()
    return base / "pycache" if base is not None else None
