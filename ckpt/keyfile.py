"""Read a secret key file: the image HMAC key (``--key-file`` of checkpoint, restore,
inspect) and the migration secret both hosts hold, under one set of rules.

The file is opened with ``O_NOFOLLOW`` (a symlink planted in its place is refused, not
followed) and ``O_NONBLOCK`` (a FIFO planted in its place cannot block the open), then
checked through the open descriptor, so what is checked is what is read: a regular
file, owned by the caller, readable by nobody else, of a size a key has.
"""

from __future__ import annotations

import errno
import os
import stat

from ckpt.errors import KeyFileError

MIN_KEY_LEN = 32
MAX_KEY_LEN = 4096

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_MAKE = "make one with: head -c 32 /dev/urandom > {0}; chmod 600 {0}"


def read_key_file(path: str | os.PathLike[str]) -> bytes:
    """The raw bytes of the key file (a trailing newline is part of the secret); a
    one-line ``KeyFileError`` saying how to fix the file otherwise."""
    name = os.fspath(path)
    try:
        fd = os.open(name, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise KeyFileError(
                f"{name}: the key file is a symlink; give the file's own path"
            ) from exc
        raise KeyFileError(
            f"{name}: cannot open the key file ({exc.strerror}); " + _MAKE.format(name)
        ) from exc
    try:
        _check(name, os.fstat(fd))
        key = b""
        while len(key) <= MAX_KEY_LEN:  # one read past the bound: it must not have grown
            data = os.read(fd, MAX_KEY_LEN + 1 - len(key))
            if not data:
                break
            key += data
    except OSError as exc:
        raise KeyFileError(
            f"{name}: cannot read the key file ({exc.strerror}); " + _MAKE.format(name)
        ) from exc
    finally:
        os.close(fd)
    if len(key) > MAX_KEY_LEN:
        raise KeyFileError(
            f"{name}: the key file is larger than {MAX_KEY_LEN} bytes: " + _MAKE.format(name)
        )
    if len(key) < MIN_KEY_LEN:
        raise KeyFileError(
            f"{name}: the key file holds {len(key)} bytes, fewer than {MIN_KEY_LEN}: "
            + _MAKE.format(name)
        )
    return key


def _check(name: str, st: os.stat_result) -> None:
    """Refuse what is not a private regular file of the caller's."""
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"{name}: the key file is not a regular file: " + _MAKE.format(name))
    if st.st_uid != os.geteuid():
        raise KeyFileError(
            f"{name}: the key file belongs to uid {st.st_uid}, not to this user "
            f"(uid {os.geteuid()}): chown {os.geteuid()} {name}"
        )
    if st.st_mode & 0o077:
        raise KeyFileError(
            f"{name}: the key file is readable or writable by group or others: chmod 600 {name}"
        )
    if st.st_size > MAX_KEY_LEN:
        raise KeyFileError(
            f"{name}: the key file is larger than {MAX_KEY_LEN} bytes: " + _MAKE.format(name)
        )
