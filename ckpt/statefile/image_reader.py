"""An image directory opened for reading: ``open_image`` checks the header and metadata
on open; the object stream, the page map and the pages are checked as they are read.
What it reads is what ``ImageWriter`` (image.py) committed."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ckpt.errors import StatefileError
from ckpt.statefile.files import check_image_dir, read_regular
from ckpt.statefile.format import (
    CHECKPOINT_IMG,
    MAX_METADATA_LEN,
    MAX_PAGES,
    PAGES_IMG,
    PAGES_META_IMG,
    STATS_JSON,
)
from ckpt.statefile.pages import (
    LoadedPages,
    PageFile,
    PagesMeta,
    check_runs,
    iter_stored,
    read_pages_meta,
)
from ckpt.statefile.reader import ChunkStream, Header, StatefileReader


class Image:
    """An opened image: metadata checked on open, stream and pages checked as read."""

    def __init__(self, path: str | os.PathLike[str], key: bytes | None, *, verify: bool) -> None:
        p = Path(path)
        if check_image_dir(p):  # a symlink is refused, the files are read under it
            self.dir = p
            self.statefile = p / CHECKPOINT_IMG
            if not os.path.lexists(self.statefile):
                raise StatefileError(f"{p}: no {CHECKPOINT_IMG} here; not an image directory")
        else:  # the statefile itself: opened as a regular file or refused
            self.dir = p.parent
            self.statefile = p
        self.verified = verify
        self._reader = StatefileReader(self.statefile, key, verify=verify)
        self._sealer = self._reader.sealer

    @property
    def metadata(self) -> dict[str, Any]:
        return self._reader.metadata

    @property
    def header(self) -> Header:
        return self._reader.header

    @property
    def integrity(self) -> str:
        """``hmac-sha256`` or ``crc32``: what protects this image."""
        return "hmac-sha256" if self.header.keyed else "crc32"

    def read_state(self) -> bytes:
        """The whole object stream, every chunk verified and decompressed."""
        return self._reader.read_all()

    def state_reader(self) -> ChunkStream:
        """The object stream as a readable binary file (verified chunk by chunk)."""
        return ChunkStream(self._reader)

    def pages_file(self) -> Path | PageFile:
        """Where pages.img's bytes are read from: the file beside the statefile here;
        a subclass may serve them from elsewhere (ckpt/images/store_source.py)."""
        return self.dir / PAGES_IMG

    def pages_meta(self, *, limit: int = MAX_PAGES, frames: int = -1) -> PagesMeta:
        """pages_meta.img, checked (``check_page_map``), without loading any page."""
        return read_pages_meta(
            self.dir / PAGES_META_IMG,
            self.pages_file(),
            self._sealer,
            self.header.image_id,
            verify=self.verified,
            limit=limit,
            frames=frames,
        )

    def check_pages(self) -> int:
        """Read and check every stored page, holding none (``inspect --verify``)."""
        return check_runs(
            self.pages_meta(),
            self.pages_file(),
            self._sealer,
            self.header.image_id,
            verify=self.verified,
        )

    def iter_stored(self) -> Iterator[tuple[int, int, int, bytes]]:
        """Every run as stored, checked, not decompressed (``pages.iter_stored``)."""
        return iter_stored(
            self.pages_meta(),
            self.dir / PAGES_IMG,
            self._sealer,
            self.header.image_id,
            verify=self.verified,
        )

    def open_pages(
        self,
        lazy: bool = False,
        on_error: Callable[[BaseException], None] | None = None,
        *,
        limit: int = MAX_PAGES,
        frames: int = -1,
    ) -> LoadedPages:
        """Load the pages (eager), or return at once and fill them in the background;
        ``on_error`` hears once of a run found truncated or corrupt while filling.

        A restore passes what its kernel state declares: ``limit``, the size of the
        address space in pages, and ``frames``, how many frames are allocated; a page map
        outside them is refused (``check_page_map``) before any page is read."""
        return LoadedPages(
            self.pages_meta(limit=limit, frames=frames),
            self.pages_file(),
            self._sealer,
            self.header.image_id,
            lazy=lazy,
            verify=self.verified,
            on_error=on_error,
        )

    def stats(self) -> dict[str, Any] | None:
        """stats.json, if the image has one."""
        p = self.dir / STATS_JSON
        if not os.path.lexists(p):
            return None
        raw = read_regular(p, "the stats", MAX_METADATA_LEN)
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise StatefileError(f"{p}: unreadable stats: {exc}") from exc
        return data if isinstance(data, dict) else None


def open_image(path: str | os.PathLike[str], key: bytes | None = None) -> Image:
    """Open an image directory (or its checkpoint.img), checking header and metadata."""
    return Image(path, key, verify=True)


def open_image_unverified(path: str | os.PathLike[str]) -> Image:
    """Open an image without checking integrity tags (for inspecting a signed image
    without its key).  Structure and lengths are still checked; nothing is trusted."""
    return Image(path, None, verify=False)
