"""A persistent cache of compiled generated code, like ``__pycache__`` for the typed engine.

Each sandbox process saves or loads its kernel once, so compiling the generated
functions (a few hundred of them for a kernel) would otherwise be paid on every
checkpoint and every restore.  The cache maps a hash of (interpreter bytecode magic,
filename, source) to the marshalled code object; the source is always generated, so a
changed class or a new ckpt produces a new key and never a stale function.

Where: ``$CKPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/ckpt/codegen``, else
``~/.cache/ckpt/codegen``.  ``CKPT_CODE_CACHE=0`` turns it off.  Marshalled code is
executable, so the directory must belong to the current user and not be writable by
others; otherwise the cache is not used.  Any I/O problem falls back to compiling.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import stat
import tempfile
from pathlib import Path
from types import CodeType

_memory: dict[str, CodeType] = {}
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


def _key(source: str, filename: str) -> str:
    digest = hashlib.blake2b(digest_size=20)
    digest.update(importlib.util.MAGIC_NUMBER)
    digest.update(filename.encode())
    digest.update(b"\0")
    digest.update(source.encode())
    return digest.hexdigest()


def compiled(source: str, filename: str) -> CodeType:
    """``compile(source, filename, "exec")``, from memory or disk when seen before."""
    key = _key(source, filename)
    code = _memory.get(key)
    if code is not None:
        return code
    directory = cache_dir()
    path = directory / f"{key}.code" if directory is not None else None
    if path is not None:
        try:
            code = marshal.loads(path.read_bytes())
        except (OSError, EOFError, ValueError, TypeError):
            code = None
    if not isinstance(code, CodeType):
        code = compile(source, filename, "exec")
        if path is not None:
            _store(path, code)
    _memory[key] = code
    return code


def _store(path: Path, code: CodeType) -> None:
    """Write atomically (temp file + rename) so a reader never sees half a file."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(marshal.dumps(code))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
