"""Read the shared secret both hosts hold: the only thing that makes a peer trusted.

The file is opened with ``O_NOFOLLOW`` (a symlink planted in its place is refused, not
followed) and checked through the open descriptor, so what is checked is what is read;
``O_NONBLOCK`` keeps a FIFO planted in its place from blocking the open.
"""

from __future__ import annotations

import os
import stat

from ckpt.migration.errors import KeyFileError

MIN_KEY_LEN = 32
MAX_KEY_LEN = 4096


def read_key_file(path: str | os.PathLike[str]) -> bytes:
    """The raw bytes of the key file (a trailing newline is part of the secret)."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        reason = "it is a symlink" if exc.errno == 40 else exc.strerror  # ELOOP
        raise KeyFileError(f"{name}: cannot open the key file: {reason}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"{name}: the key file is not a regular file")
        if st.st_mode & 0o077:
            raise KeyFileError(
                f"{name}: the key file is readable by group or others: chmod 600 {name}"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            key = f.read(MAX_KEY_LEN + 1)
    finally:
        os.close(fd)
    if len(key) > MAX_KEY_LEN:
        raise KeyFileError(f"{name}: the key file is larger than {MAX_KEY_LEN} bytes")
    if len(key) < MIN_KEY_LEN:
        raise KeyFileError(
            f"{name}: the key file holds {len(key)} bytes, fewer than {MIN_KEY_LEN}: "
            f"make one with: head -c 32 /dev/urandom > {name}"
        )
    return key
