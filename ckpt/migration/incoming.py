"""The destination's half of a session: what arrives becomes a local image chain.

Each image the source sends (a pre-copy round, then the final one) is written as it
arrives with the ordinary ``ImageWriter``, into a private directory under the root::

    ROOT/.incoming/ID.XXXXXX/r0        pre-dump: every page
                            r1 .. rN    pre-dump: pages dirtied since the one before
                            final       kernel state + the last dirty pages, parent rN

so a normal restore follows the chain (``statefile.chain``).  Memory stays bounded: one
frame (``max_payload``) and one batch of pages are held at a time, the state stream is
written as it comes.  Every index, offset, count and size the peer states is checked
before it is used; paths are made here, never taken from the peer.  Whatever fails, the
directory is removed (``discard``): a destination keeps nothing of a migration that did
not commit.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ckpt.errors import CkptError, StatefileError
from ckpt.migration import messages as m
from ckpt.migration.errors import FrameError, MigrationError

INCOMING_DIR = ".incoming"
MAX_STATE_BYTES = 1 << 30  # a kernel state stream larger than this is refused
MAX_IMAGES = 12  # pre-copy rounds plus the final image (chain.MAX_CHAIN is 16)
FINAL = "final"
# The metadata the final image keeps from the source's: what restore and inspect read.
KEPT_METADATA = ("workload", "engine", "address", "objects", "types")


class NoSpace(MigrationError):
    """The destination's disk is full."""


def storage_error(exc: BaseException) -> MigrationError:
    """A write failure as the error the source is told about."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            return NoSpace(f"the destination's disk is full: {exc}")
        cause = cause.__cause__
    return MigrationError(f"the destination cannot write the image: {exc}")


class Incoming:
    """One migration's images on the destination, written as they arrive."""

    def __init__(self, root_dir: Path, offer: m.Offer, *, max_state_bytes: int = 0) -> None:
        """``max_state_bytes`` (0: ``MAX_STATE_BYTES``) bounds each image's state stream."""
        self.offer = offer
        self.max_state_bytes = max_state_bytes or MAX_STATE_BYTES
        base = Path(root_dir) / INCOMING_DIR
        base.mkdir(mode=0o700, exist_ok=True)
        if base.is_symlink() or not base.is_dir():
            raise MigrationError(f"{base} is not a directory: remove it")
        prefix = f"{offer.sandbox_id}.{os.getpid()}."  # sweep() knows a dead server's
        self.dir = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        self.images: list[Path] = []
        self.final: Path | None = None
        self.state_sha256 = b""  # of the final image's state stream: the proof covers it

    def receive_image(self, ch: Any) -> m.RoundEnd:
        """Write the next image from the channel, up to and including its ``RoundEnd``."""
        from ckpt import statefile
        from ckpt.statefile import chain

        n = len(self.images)
        if n >= MAX_IMAGES:
            raise FrameError(f"the peer sent more than {MAX_IMAGES} images")
        path = self.dir / f"r{n}"
        metadata: dict[str, Any] = {"sandbox_id": self.offer.sandbox_id}
        if self.images:
            metadata.update(chain.link_metadata(path, statefile.open_image(self.images[-1])))
        state = _StateIn(self.max_state_bytes)
        pages = _PagesIn(ch, n, self.offer.pages)
        try:
            # no fsync: it lives only as long as this migration and the sandbox that reads
            # it, and a crash of this host ends both (the source keeps its copy until
            # the commit)
            with statefile.ImageWriter(path, metadata=metadata, sync=False) as img:
                msg = ch.recv()
                while isinstance(msg, m.StateChunk):
                    state.add(msg, img.state_file)
                    msg = ch.recv()
                pages.first = msg
                img.write_runs(pages)
                end = pages.end
                if end is None or end.round != n or end.pages != pages.count:
                    raise FrameError(
                        f"the peer's image {n} ended with {pages.count} pages, not as announced"
                    )
                if end.final != (state.length > 0) or end.state_bytes != state.length:
                    raise FrameError(f"the peer's image {n} has a state stream not as announced")
                if end.final:
                    img.metadata.update(_kept(end.metadata))
                else:
                    img.metadata["kind"] = chain.PRE_DUMP
                    img.metadata["workload"] = self.offer.workload
        except (OSError, StatefileError) as exc:
            if isinstance(exc, CkptError) and not _is_storage(exc):
                raise
            raise storage_error(exc) from exc
        self.images.append(path)
        if end.final:
            final = self.dir / FINAL
            os.rename(path, final)
            self.final = final
            self.state_sha256 = state.sha256.digest()
        return end

    def discard(self) -> None:
        """Remove everything received (the directory is ours: made by ``mkdtemp``)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self.images = []


def sweep(root_dir: Path) -> list[str]:
    """Remove what servers that died (SIGKILL, power) left in ``.incoming``; only
    directories named as ``Incoming`` names them, of a pid that no longer runs."""
    base = Path(root_dir) / INCOMING_DIR
    removed = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        parts = name.split(".")
        if len(parts) < 3 or not parts[-2].isdigit():
            continue
        pid = int(parts[-2])
        if pid != os.getpid() and _pid_alive(pid):
            continue
        path = base / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_storage(exc: BaseException) -> bool:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _kept(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: meta[k] for k in KEPT_METADATA if k in meta}


class _StateIn:
    """The state stream's chunks, checked for continuity and size as they are written."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.length = 0
        self.ended = False
        self.sha256 = hashlib.sha256()

    def add(self, msg: m.StateChunk, out: Any) -> None:
        if self.ended or msg.offset != self.length:
            raise FrameError("the peer sent state chunks out of order")
        if self.length + len(msg.data) > self.limit:
            raise FrameError(f"the peer's state stream exceeds {self.limit} bytes")
        out.write(msg.data)
        self.sha256.update(msg.data)
        self.length += len(msg.data)
        self.ended = msg.last


class _PagesIn:
    """The runs of image ``n`` as ``(first, npages, codec, stored)`` (codec -1: zero
    pages), ascending, below ``limit``; stops at the ``RoundEnd`` (kept in ``end``).
    ``first`` is the message already read.

    Every frame is decompressed here, so a frame that does not hold exactly the pages
    it names is refused before anything of it is written.  A frame of one run of
    non-zero pages is then stored as it came (no second compression); zero pages are
    only recorded; anything else is compressed again run by run."""

    def __init__(self, ch: Any, n: int, limit: int) -> None:
        self.ch = ch
        self.n = n
        self.limit = limit
        self.first: m.Message | None = None
        self.end: m.RoundEnd | None = None
        self.count = 0

    def __iter__(self) -> Any:
        msg, self.first = self.first, None
        last = -1
        while not isinstance(msg, m.RoundEnd):
            if not isinstance(msg, m.PageRuns) or msg.round != self.n:
                what = msg.KIND.name
                raise FrameError(f"the peer sent an unexpected {what} inside image {self.n}")
            pages = m.unpack_pages(msg)  # runs, sizes and the data checked here
            for index, _ in pages:
                if index <= last or index >= self.limit:
                    raise FrameError(f"the peer sent page {index} out of order or range")
                last = index
            self.count += len(pages)
            yield from _runs(msg, pages)
            msg = self.ch.recv()
        self.end = msg


def _runs(msg: m.PageRuns, pages: list[tuple[int, bytes]]) -> Any:
    """The checked frame ``msg`` (its ``pages``) as runs to write (see ``_PagesIn``)."""
    from ckpt.statefile.chunks import compress_chunk
    from ckpt.statefile.format import CODEC_ZSTD, DEFAULT_LEVEL, PAGE_SIZE, PAGES_PER_CHUNK

    zero = bytes(PAGE_SIZE)
    at = 0
    for first, count in msg.runs:
        run = pages[at : at + count]
        at += count
        if all(page == zero for _, page in run):
            yield first, count, -1, b""
        elif len(msg.runs) == 1 and count <= PAGES_PER_CHUNK:
            yield first, count, msg.codec, msg.data
        else:
            for i in range(0, count, PAGES_PER_CHUNK):
                part = run[i : i + PAGES_PER_CHUNK]
                raw = b"".join(page for _, page in part)
                codec, stored = compress_chunk(raw, CODEC_ZSTD, DEFAULT_LEVEL)
                yield first + i, len(part), codec, bytes(stored)
