"""The image directory, written atomically by ``ImageWriter`` (read by ``open_image``,
in image_reader.py).

An image is written into a temporary directory beside the target (same filesystem),
every file and the directory itself are fsynced (at once), and only then is it renamed
into place.  A replaced image (``force=True``) is swapped in one ``renameat2(RENAME_EXCHANGE)``
where the kernel offers it, else renamed aside first; the old one is removed only after
the new one is in place, through directory descriptors and only its own files (the
parent may be writable by others).  A crash therefore leaves either the old image or the
new one under the target name, plus at most a dot-named leftover that the next writer for the
same target sweeps away (or restores, if the crash hit between the two renames).

Why one file: the commit and the removal of a replaced or stale image are one
protocol over one set of names (the temporary and the set-aside directories beside the
target, the exchange rename, the sweep of dead writers' leftovers): each step presumes
the others' naming and their order.  About a third of the file is the removal through directory descriptors, which could
stand alone if another writer came to need it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import platform
import re
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from ckpt import __version__
from ckpt.errors import ImageExistsError, NotAnImage, StatefileError
from ckpt.statefile import chunks
from ckpt.statefile.format import (
    CHECKPOINT_IMG,
    CHUNK_SIZE,
    CODECS,
    DEFAULT_COMPRESSION,
    DEFAULT_LEVEL,
    IMAGE_ID_SIZE,
    MAX_CHUNK_SIZE,
    PAGES_IMG,
    PAGES_META_IMG,
    STATS_JSON,
    ZSTD_LEVELS,
)
from ckpt.statefile.integrity import Sealer
from ckpt.statefile.pages import (
    PageSummary,
    PageWriter,
)
from ckpt.statefile.seal import Cipher
from ckpt.statefile.writer import StateStreamWriter, encode_metadata, write_header, write_trailer

# "rounds": the pre-copy rounds a final image keeps inside (sandbox/host/precopy.py)
ROUNDS_DIR = "rounds"
ROUND_NAME = re.compile(r"r[0-9]{1,3}")  # a round inside ROUNDS_DIR; fullmatch ("$" takes a "\n")
IMAGE_FILES = frozenset((CHECKPOINT_IMG, PAGES_IMG, PAGES_META_IMG, STATS_JSON, ROUNDS_DIR))
WRITE_BUFFER = 1 << 20  # small frame headers and tags coalesce; big chunks go straight out
_LEFTOVER = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<pid>\d+)-[A-Za-z0-9_]+")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_together(fds: list[int]) -> None:
    """fsync every descriptor, all at once: the first here, the rest on the chunk pool.

    Concurrent fsyncs of one filesystem can share a journal commit, so several new
    files cost less together than one after another.  Every call has returned (or
    failed) before this does, so the caller may close the descriptors.
    """
    jobs = [chunks.pool().submit(os.fsync, fd) for fd in fds[1:]]
    error: BaseException | None = None
    try:
        os.fsync(fds[0])
    except BaseException as exc:
        error = exc
    for job in jobs:
        try:
            job.result()
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True


def _pid_alive(pid: int) -> bool:
    """Could process ``pid`` still finish its write?  A zombie (exited, not yet reaped
    by its parent) answers ``kill(pid, 0)`` but will never write again, so its
    leftovers are stale; ``/proc/PID/stat`` tells the two apart."""
    if not _pid_exists(pid):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            line = f.read()
    except FileNotFoundError:
        # Exited since the first look, or hidden from us (hidepid): ask again.
        return _pid_exists(pid)
    except OSError:
        return True  # unreadable or no /proc: trust kill()
    # "pid (comm) S ...": comm may hold spaces or ")", the state follows the last ")".
    close = line.rfind(b")")
    return line[close + 2 : close + 3] not in (b"Z", b"X")


def _make_temp_dir(parent: str, prefix: str) -> str:
    """A new private directory ``parent/prefix<random>``, as ``tempfile.mkdtemp`` makes.

    Written out because ``tempfile`` brings ``shutil``, ``random`` and the compression
    modules into every sandbox process that checkpoints, for this one call.
    """
    for _ in range(100):
        path = os.path.join(parent, f"{prefix}{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(errno.EEXIST, "no unused temporary directory name", parent)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_own_dir(path: str) -> int:
    """A descriptor of the directory this process just made at ``path``.  Another user
    who can write the parent may have swapped it since the mkdir: a link is refused
    (O_NOFOLLOW), and so is a directory this user does not own or others may write."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        raise StatefileError(
            f"{path}: the temporary directory was replaced as it was made ({exc.strerror}); "
            "is another user writing to its parent?"
        ) from exc
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        raise StatefileError(
            f"{path}: the temporary directory was replaced as it was made; "
            "is another user writing to its parent?"
        )
    return fd


def _remove_image_dir(parent: str, name: str) -> list[str]:
    """Remove the image directory ``parent/name`` (a replaced image or a dead writer's
    temporary one) through directory descriptors; return what was left in place.

    The parent is writable by others (``/tmp``): between the rename and this call
    the entry may have been swapped for a symlink to any directory.  So the directory
    is opened without following a link, listed and emptied through its descriptor,
    and only an image's own files are unlinked; anything else (a symlink in place of
    the directory, a subdirectory, a foreign name) is left and reported.
    """
    entry = os.path.join(parent, name)
    try:
        pfd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return [entry]
    try:
        return _remove_dir_at(pfd, name, entry, 0)
    finally:
        os.close(pfd)


def _remove_dir_at(pfd: int, name: str, entry: str, level: int) -> list[str]:
    """Open ``name`` in the directory ``pfd`` without following a link, empty it of an
    image's own files (``_empty_image_dir`` at ``level``) and remove it; return what was
    left in place (``entry`` itself if it is not a real directory or stays non-empty)."""
    try:
        dfd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
    except FileNotFoundError:
        return []
    except OSError:  # ELOOP or ENOTDIR: a symlink or a file; never followed
        return [entry]
    try:
        left = _empty_image_dir(dfd, entry, level)
    finally:
        os.close(dfd)
    if not left:
        try:
            os.rmdir(name, dir_fd=pfd)
        except FileNotFoundError:
            pass
        except OSError:
            left.append(entry)
    return left


def _empty_image_dir(dfd: int, entry: str, level: int) -> list[str]:
    """Unlink an image's own files in the open directory ``dfd`` (``entry``); return what
    was left.  A pre-copy image keeps its rounds as ``rounds/rN`` image directories
    (``sandbox/host/precopy.py``): level 0 is the image, 1 its ``rounds``, 2 one round."""
    left: list[str] = []
    for file in os.listdir(dfd):
        path = os.path.join(entry, file)
        if (level == 0 and file == ROUNDS_DIR) or (level == 1 and ROUND_NAME.fullmatch(file)):
            left += _remove_dir_at(dfd, file, path, level + 1)
            continue
        if level == 1 or file not in IMAGE_FILES:
            left.append(path)
            continue
        try:  # unlink never follows a link; a directory fails with EISDIR
            os.unlink(file, dir_fd=dfd)
        except FileNotFoundError:
            pass
        except OSError:
            left.append(path)
    return left


@functools.cache
def _renameat2() -> Any:
    """libc's renameat2 through ctypes, looked up once; None where libc lacks it."""
    import ctypes  # only when an existing image is replaced

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths with renameat2(RENAME_EXCHANGE); False if unsupported."""
    fn = _renameat2()
    if fn is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    import ctypes

    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


class _Target:
    """An image directory's path as the strings the writer needs, worked out once.

    ``Path`` normalises it (``a//b/`` is ``a/b``); everything after works on ``str``,
    as every pathlib operation builds objects again (about 60 us cold per ``Path``)."""

    __slots__ = ("name", "parent", "path", "target")

    def __init__(self, image_dir: str | os.PathLike[str]) -> None:
        self.path = Path(image_dir)
        self.target = os.fspath(self.path)
        self.parent = os.fspath(self.path.parent)
        self.name = self.path.name


def clean_stale(image_dir: str | os.PathLike[str]) -> list[Path]:
    """Remove leftovers of writers to ``image_dir`` that died; return what was removed.

    A dead writer's temporary directory is emptied of an image's own files and removed
    (anything else in it, or a symlink in its place, is left: see ``_remove_image_dir``).
    If the target is missing and a dead writer had renamed the previous image aside,
    that image is renamed back, provided it is still a real directory.
    """
    removed, _left = _clean_stale(_Target(image_dir))
    return [Path(p) for p in removed]


def remove_image(image_dir: str | os.PathLike[str]) -> list[Path]:
    """Remove the image directory ``image_dir`` through directory descriptors, its own
    files only; return what was left in place (anything not an image's)."""
    path = os.path.abspath(image_dir)
    return [Path(p) for p in _remove_image_dir(os.path.dirname(path), os.path.basename(path))]


def clean_directory(directory: str | os.PathLike[str]) -> tuple[list[Path], list[Path]]:
    """:func:`clean_stale` for every image in ``directory`` that a writer left temporary
    entries for (``.NAME.tmp-PID-*``, ``.NAME.old-PID-*``); (removed, left in place).
    A live writer's entries are not touched."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    found = {m["name"] for n in names if (m := _LEFTOVER.fullmatch(n)) is not None}
    removed: list[Path] = []
    left: list[Path] = []
    for name in sorted(found):
        gone, kept = _clean_stale(_Target(os.path.join(directory, name)))
        removed += [Path(p) for p in gone]
        left += [Path(p) for p in kept]
    return removed, left


def is_real_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _clean_stale(t: _Target) -> tuple[list[str], list[str]]:
    """(entries removed, entries left in place) for ``t``'s dead writers."""
    removed: list[str] = []
    left: list[str] = []
    try:
        names = sorted(os.listdir(t.parent))
    except (FileNotFoundError, NotADirectoryError):
        return removed, left
    ours = f".{t.name}."  # every leftover of this target's writers starts so
    for name in names:
        m = _LEFTOVER.fullmatch(name) if name.startswith(ours) else None
        if not m or m["name"] != t.name or _pid_alive(int(m["pid"])):
            continue
        entry = os.path.join(t.parent, name)
        if m["kind"] == "old" and not os.path.lexists(t.target) and is_real_dir(entry):
            # rename(2) moves the entry itself, never what a link points to.
            os.rename(entry, t.target)
            continue
        kept = _remove_image_dir(t.parent, name)
        if kept:
            left.extend(kept)
        else:
            removed.append(entry)
    return removed, left


class ImageWriter:
    """Write an image directory atomically; use as a context manager (see contracts)."""

    def __init__(
        self,
        image_dir: str | os.PathLike[str],
        *,
        force: bool = False,
        compression: str = DEFAULT_COMPRESSION,
        level: int | None = None,
        key: bytes | None = None,
        metadata: dict[str, Any] | None = None,
        chunk_size: int = CHUNK_SIZE,
        sync: bool = True,
        encrypt: bool = False,
        image_id: bytes | None = None,
    ) -> None:
        if encrypt and key is None:
            raise StatefileError("--encrypt seals the image with a key: pass --key-file")
        if compression not in CODECS:
            raise StatefileError(
                f"unknown compression {compression!r}; choose one of {', '.join(CODECS)}"
            )
        if level is None:
            level = DEFAULT_LEVEL
        if compression == "zstd" and level not in ZSTD_LEVELS:
            raise StatefileError(
                f"zstd compression level {level} is out of range "
                f"({ZSTD_LEVELS.start}..{ZSTD_LEVELS.stop - 1})"
            )
        if not 0 < chunk_size <= MAX_CHUNK_SIZE:
            raise StatefileError(f"chunk size {chunk_size} is out of range")
        self._t = _Target(image_dir)
        self.path = self._t.path
        # False: no fsync, for an image read back at once and removed (a migration's
        # rounds), where a crash loses nothing that the running sandbox does not hold
        self._sync = sync
        self.force = force
        self.compression = compression
        self.level = level if compression == "zstd" else None
        self._codec = CODECS[compression]
        self._level = level
        self._chunk_size = chunk_size
        self._sealer = Sealer(key)
        # A given id: the same image written again (a rekey, ckpt/images/rekey.py).
        self.image_id = os.urandom(IMAGE_ID_SIZE) if image_id is None else image_id
        if len(self.image_id) != IMAGE_ID_SIZE:
            raise StatefileError(f"an image id is {IMAGE_ID_SIZE} bytes")
        self.encrypted = encrypt
        if encrypt:
            assert key is not None
            self._sealer.cipher = Cipher.new(key, self.image_id)
        self.metadata: dict[str, Any] = {
            "engine": None,
            "workload": None,
            "objects": None,
            "types": None,
            "compression": compression,
            "level": self.level,
            "created": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "ckpt_version": __version__,
            "python_version": platform.python_version(),
        }
        self.metadata.update(metadata or {})
        self._tmp: str | None = None
        self._tmp_fd = -1  # the temporary directory, opened once: files are made in it
        self._state_f: BinaryIO | None = None
        self._pages_f: BinaryIO | None = None
        self._stream: StateStreamWriter | None = None
        self._pages: PageWriter | None = None
        self._header_tag = b""
        self.page_summary: PageSummary | None = None
        self.committed = False
        # What removing a replaced image or a dead writer's leftovers did not delete,
        # as it was not an image's own file (or was a link in place of a directory).
        self.left_behind: list[str] = []

    # -- lifecycle -----------------------------------------------------------------

    def _check_target(self) -> str:
        """What the target is now: "missing", "empty" (a directory) or "image" (one
        ``force`` may replace); anything else is an error."""
        t = self._t.target
        try:
            mode = os.lstat(t).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return "missing"
        if not stat.S_ISDIR(mode):  # a file, or a symlink even to a directory
            raise StatefileError(f"{t}: exists and is not a directory; choose another path")
        names = os.listdir(t)
        if not names:
            return "empty"
        # --force replaces an image, never an arbitrary directory (say, $HOME); a
        # directory that is not one is refused as such, with or without --force.
        foreign = sorted(name for name in names if name not in IMAGE_FILES)
        if foreign:
            raise NotAnImage(
                f"{t}: is not an image directory (it holds {', '.join(foreign[:3])}); "
                "write the image to a new or empty directory (--force replaces only an image)"
            )
        if not self.force:
            raise ImageExistsError(f"{t}: already holds an image; use --force to replace it")
        return "image"

    def __enter__(self) -> ImageWriter:
        self.open()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def open(self) -> None:
        """Create the temporary directory and start checkpoint.img and pages.img."""
        self._prepare()
        try:
            self._state_f = self._new_file(CHECKPOINT_IMG)
            self._header_tag = write_header(
                self._state_f, self._sealer, self._codec, self._chunk_size, self.image_id
            )
            self._stream = StateStreamWriter(
                self._state_f,
                self._sealer,
                self._header_tag,
                self._codec,
                self._level,
                self._chunk_size,
            )
            self._pages_f = self._new_file(PAGES_IMG)
            self._pages = PageWriter(
                self._pages_f, self._sealer, self.image_id, self._codec, self._level
            )
        except BaseException:
            self.abort()
            raise

    @property
    def state_file(self) -> StateStreamWriter:
        """The writable binary file for ``state.save``: chunked, compressed, sealed."""
        if self._stream is None:
            raise StatefileError("the image is not open: use `with ImageWriter(...) as img`")
        return self._stream

    @property
    def temp_dir(self) -> Path | None:
        """Where the image is being written (beside the target) until it is committed."""
        return None if self._tmp is None else Path(self._tmp)

    def write_pages(self, pages: Any) -> PageSummary:
        """Store ``(index, page)`` pairs, ascending; zero pages are only recorded."""
        if self._pages is None:
            raise StatefileError("the image is not open: use `with ImageWriter(...) as img`")
        self.page_summary = self._pages.write_pages(pages)
        return self.page_summary

    def write_runs(self, runs: Any) -> PageSummary:
        """Store runs that arrive compressed (``PageWriter.write_runs``)."""
        if self._pages is None:
            raise StatefileError("the image is not open: use `with ImageWriter(...) as img`")
        self.page_summary = self._pages.write_runs(runs)
        return self.page_summary

    def write_stats(self, stats: dict[str, Any]) -> None:
        """Write stats.json beside the statefile (committed with the image)."""
        if self._stream is None or self.committed:
            raise StatefileError("the image is not open: use `with ImageWriter(...) as img`")
        try:
            data = json.dumps(stats, indent=2, sort_keys=True, default=str)
        except (TypeError, ValueError) as exc:
            raise StatefileError(f"stats are not JSON-able: {exc}") from exc
        self._write_whole(STATS_JSON, (data + "\n").encode())

    def note_save(self, result: Any, engine: str) -> None:
        """Record a ``state.save`` result (objects, types) and the engine in the metadata."""
        self.metadata.update(
            engine=engine,
            objects=getattr(result, "objects", None),
            types=getattr(result, "types", None),
        )

    def commit(self) -> Path:
        """Finish every file, fsync, and rename the image into place."""
        assert self._stream is not None and self._pages is not None
        assert self._state_f is not None and self._pages_f is not None
        try:
            bad = sorted(k for k in self.metadata if not isinstance(k, str) or k.startswith("_"))
            if bad:
                raise StatefileError(
                    f"image metadata keys starting with '_' are reserved: {', '.join(map(str, bad))}"
                )
            if not self._pages.written:
                self.page_summary = self._pages.write_pages(())
            last_tag = self._stream.finish()
            f = self._state_f
            meta = dict(self.metadata)
            meta["pages"] = self.page_summary.as_dict() if self.page_summary else None
            meta["state_bytes"] = self._stream.stream_len
            meta["_format"] = {
                "chunk_size": self._chunk_size,
                "chunks": self._stream.chunk_count,
                "image_id": self.image_id.hex(),
                "integrity": self._sealer.algorithm,
                "encryption": "aes-256-gcm" if self.encrypted else None,
            }
            write_trailer(
                f,
                self._sealer,
                self._header_tag,
                last_tag,
                f.tell(),
                self._stream.table,
                self._stream.chunk_count,
                self._stream.stream_len,
                encode_metadata(meta),
            )
            self._publish(self._pages.meta_bytes())
        except BaseException:
            self.abort()
            raise
        self.committed = True
        return self.path

    # -- where the files go: a temporary directory renamed into place.  A subclass
    # (ckpt.statefile.sinks.StoreImageWriter) sends them to an object store instead.

    def _prepare(self) -> None:
        """Make the temporary directory beside the target, after sweeping dead writers'
        leftovers and checking the target."""
        t = self._t
        try:
            if not os.path.isdir(t.parent):
                os.makedirs(t.parent, exist_ok=True)
        except OSError as exc:
            raise StatefileError(f"{t.parent}: cannot create: {exc.strerror}") from exc
        # First: it may put back an image a dead writer moved aside.
        self.left_behind.extend(_clean_stale(t)[1])
        self._check_target()
        self._tmp = _make_temp_dir(t.parent, f".{t.name}.tmp-{os.getpid()}-")
        try:
            self._tmp_fd = _open_own_dir(self._tmp)
        except BaseException:
            self.abort()
            raise

    def _new_file(self, name: str) -> BinaryIO:
        """A new file of the image, written as the image is made."""
        return open(name, "wb", buffering=WRITE_BUFFER, opener=self._create)

    def _write_whole(self, name: str, data: bytes) -> None:
        """A small file of the image, written at once (stats.json)."""
        with open(name, "wb", opener=self._create) as f:
            f.write(data)
            f.flush()
            if self._sync:
                os.fsync(f.fileno())

    def _publish(self, pages_meta: bytes) -> None:
        """Write pages_meta.img, fsync every file and the directory, rename into place."""
        assert self._state_f is not None and self._pages_f is not None
        with open(PAGES_META_IMG, "wb", opener=self._create) as mf:
            mf.write(pages_meta)
            files = (self._state_f, self._pages_f, mf)
            for fh in files:
                fh.flush()
            # The files and their directory, before the rename installs them.
            if self._sync:
                _fsync_together([fh.fileno() for fh in files] + [self._tmp_fd])
        for fh in (self._state_f, self._pages_f):
            fh.close()
        self._install()

    def _create(self, name: str, flags: int) -> int:
        """``open``'s opener: a new file in the temporary directory, made through its
        descriptor, never through a link and never an existing file (O_EXCL)."""
        extra = os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(name, flags | extra, 0o666, dir_fd=self._tmp_fd)

    def _close_tmp_fd(self) -> None:
        fd, self._tmp_fd = self._tmp_fd, -1
        if fd >= 0:
            os.close(fd)

    def _install(self) -> None:
        """Rename the finished temporary directory to the target, atomically.

        The parent is fsynced once, when the new image is in place.  Removing a replaced
        image is not synced: after a crash its dot-named leftover is swept by the next
        writer (an fsync here cost 0.2 ms, a tenth of a native nginx checkpoint)."""
        assert self._tmp is not None
        t, parent = self._t.target, self._t.parent
        old = None  # where the replaced image is once the new one is in place
        if self._check_target() in ("missing", "empty"):
            os.rename(self._tmp, t)  # rename(2) replaces an empty directory
        elif _exchange(self._tmp, t):
            old = self._tmp  # the temp name now holds the old image
        else:
            old = _make_temp_dir(parent, f".{self._t.name}.old-{os.getpid()}-")
            os.rename(t, old)  # replaces the empty placeholder directory
            os.rename(self._tmp, t)
        self._tmp = None
        self._close_tmp_fd()
        if self._sync:
            _fsync_dir(parent)
        if old is not None:
            self.left_behind.extend(_remove_image_dir(parent, os.path.basename(old)))

    def abort(self) -> None:
        """Throw the unfinished image away; the target is untouched."""
        if self._stream is not None:
            self._stream.abort()
        if self._pages is not None:
            self._pages.abort()
        self._discard()

    def _discard(self) -> None:
        """Close the files and remove the temporary directory."""
        for fh in (self._state_f, self._pages_f):
            if fh is not None:
                with contextlib.suppress(OSError):
                    fh.close()
        self._close_tmp_fd()
        if self._tmp is not None:
            tmp, self._tmp = self._tmp, None
            self.left_behind.extend(_remove_image_dir(self._t.parent, os.path.basename(tmp)))
