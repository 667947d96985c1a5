"""Open an image's files as what they must be: regular files, never links or devices.

An image may sit in a directory another local user can write.  A FIFO named
``checkpoint.img`` would block ``open`` forever, a link to ``/proc/self/mem`` fails every
read, ``/dev/zero`` never ends.  So every file is opened with ``O_NONBLOCK`` (a FIFO opens
at once) and ``O_NOFOLLOW`` (a link is refused, not followed), checked with ``fstat`` and
refused unless it is a regular file; only then is it made blocking again.
"""

from __future__ import annotations

import errno
import os
import stat

from ckpt.errors import ImageNotFound, StatefileError

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], what: str) -> int:
    """A blocking read-only descriptor of ``path``, which must be a regular file (not a
    link to one); a one-line ``StatefileError`` naming the file otherwise."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError as exc:
        raise StatefileError(f"{path}: {what} is missing from the image") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StatefileError(
                f"{path}: {what} is a symbolic link; an image holds only regular files"
            ) from exc
        raise StatefileError(f"{path}: cannot open {what}: {exc.strerror}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise StatefileError(
                f"{path}: {what} is {_kind(mode)}, not a regular file; refusing to read it"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """The whole of regular file ``path``, at most ``limit`` bytes (checked before
    reading); every error is one line naming the file."""
    fd = open_regular(path, what)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise StatefileError(f"{path}: {what} is {size} bytes, more than the {limit} allowed")
        chunks = []
        got = 0
        while got <= size:  # one read past the size: the file must not have grown
            data = os.read(fd, size + 1 - got)
            if not data:
                break
            chunks.append(data)
            got += len(data)
        if got != size:
            raise StatefileError(f"{path}: {what} changed size while being read")
        return b"".join(chunks)
    except OSError as exc:
        raise StatefileError(f"{path}: cannot read {what}: {exc.strerror}") from exc
    finally:
        os.close(fd)


def check_image_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a real directory (False: something else that exists); a
    symbolic link is refused, as the files under it would be read through it."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError as exc:
        raise ImageNotFound(f"{path}: no such image directory or file") from exc
    except OSError as exc:
        raise StatefileError(f"{path}: cannot look at it: {exc.strerror}") from exc
    if stat.S_ISLNK(mode):
        raise StatefileError(f"{path}: is a symbolic link; give the image directory's own path")
    return stat.S_ISDIR(mode)
