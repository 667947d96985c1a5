"""An image read back from an object store for a ``--background`` restore: the kernel
state and page map fetched first into a local directory, pages.img read from the store
chunk by chunk as pages are needed (ckpt/storage/lazy.py).

The counterpart of store_sink.py: ``Image`` with one difference, where pages.img's bytes
come from.  Every check stays what it is for a directory: the statefile's and page
map's tags, each run's tag, the page map against the kernel state; the chunk source
adds its own check of each chunk against the manifest's digest before any of it is
read.
"""

from __future__ import annotations

import os
from pathlib import Path

from ckpt.statefile.format import PAGES_IMG
from ckpt.statefile.image_reader import Image
from ckpt.statefile.pages import PageFile
from ckpt.storage.lazy import ChunkSource


class StoreImage(Image):
    """The image whose statefile and page map are in ``directory`` and whose pages.img
    ``source`` serves; each reader of the pages opens its own view of it."""

    def __init__(
        self, directory: str | os.PathLike[str], key: bytes | None, source: ChunkSource
    ) -> None:
        super().__init__(Path(directory), key, verify=True)
        self.source = source

    def pages_file(self) -> PageFile:
        return self.source.open(PAGES_IMG)
