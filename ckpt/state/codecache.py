"""A persistent cache of compiled generated code, like ``__pycache__`` for the typed engine.

Each sandbox process saves or loads its kernel once, so compiling the generated
functions (a few hundred of them for a kernel) would otherwise be paid on every
checkpoint and every restore.  The cache maps a hash of (interpreter bytecode magic,
filename, source) to the marshalled code object, stored with that text and used only
when it matches; the source is always generated, so a
changed class or a new ckpt produces a new entry and never a stale function.

Where: ``$CKPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/ckpt/codegen``, else
``~/.cache/ckpt/codegen``.  ``CKPT_CODE_CACHE=0`` turns it off.  Marshalled code is
executable, so the directory must belong to the current user and not be writable by
others; otherwise the cache is not used.  Any I/O problem falls back to compiling.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import zlib
from pathlib import Path
from types import CodeType

from ckpt.cachedir import cache_dir

_MAGIC = importlib.util.MAGIC_NUMBER  # marshal's format follows the interpreter's
_memory: dict[bytes, CodeType] = {}


def _key(text: bytes) -> str:
    """File name for an entry: two checksums and the length (zlib is imported anyway;
    hashlib would load OpenSSL into every sandbox).  Entries store their text and are
    used only when it matches, so a checksum collision costs a compile, never a wrong
    function."""
    return f"{zlib.crc32(text):08x}{zlib.adler32(text):08x}{len(text):x}"


def compiled(source: str, filename: str) -> CodeType:
    """``compile(source, filename, "exec")``, from memory or disk when seen before."""
    text = b"%b\0%b\0%b" % (_MAGIC, filename.encode(), source.encode())
    code = _memory.get(text)
    if code is not None:
        return code
    directory = cache_dir()
    path = directory / f"{_key(text)}.code" if directory is not None else None
    if path is not None:
        try:
            stored_text, code = marshal.loads(path.read_bytes())
            if stored_text != text:
                code = None
        except (OSError, EOFError, ValueError, TypeError):
            code = None
    if not isinstance(code, CodeType):
        code = compile(source, filename, "exec")
        if path is not None:
            _store(path, text, code)
    _memory[text] = code
    return code


def _store(path: Path, text: bytes, code: CodeType) -> None:
    """Write atomically (temp file + rename) so a reader never sees half a file."""
    import tempfile  # only when writing: it imports shutil, random, bz2 and lzma

    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(marshal.dumps((text, code)))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
