"""Where ckpt caches what it compiles: generated code and, on hosts that turn bytecode
off, the bytecode of its own modules.

``$CKPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/ckpt/codegen``, else
``~/.cache/ckpt/codegen``; ``CKPT_CODE_CACHE=0`` turns it off.  Cached code is
executable, so the directory must belong to the current user and not be writable by
others; otherwise it is not used.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_dir: Path | bool | None = False  # False: not resolved yet; None: disabled


def cache_dir() -> Path | None:
    """The cache directory, created on first use, or None when unusable or disabled."""
    global _dir
    if _dir is not False:
        return _dir  # type: ignore[return-value]
    _dir = None
    if os.environ.get("CKPT_CODE_CACHE", "1") == "0":
        return None
    base = os.environ.get("CKPT_CACHE_DIR")
    if base:
        path = Path(base)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = Path(xdg) / "ckpt" / "codegen"
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = path.stat()
    except OSError:
        return None
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None  # someone else could plant code here
    _dir = path
    return path


def bytecode_dir() -> Path | None:
    """Where ckpt's own bytecode goes when the host sets PYTHONDONTWRITEBYTECODE:
    inside the cache, so nothing is ever written beside the sources."""
    base = cache_dir()
    return base / "pycache" if base is not None else None
