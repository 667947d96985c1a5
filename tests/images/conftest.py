"""Small real images written through the statefile writer, without a sandbox."""

from __future__ import annotations

from pathlib import Path

from ckpt.statefile import ImageWriter, chain, open_image
from ckpt.statefile.format import PAGE_SIZE

SID = "images-sb"


def write(path: Path, *, parent: Path | None = None, pages: int = 2) -> Path:
    """An image at ``path`` (a pre-dump of ``pages`` pages), linked to ``parent``."""
    meta: dict = {"sandbox_id": SID, "kind": chain.PRE_DUMP}
    if parent is not None:
        meta.update(chain.link_metadata(path, open_image(parent)))
    with ImageWriter(path, metadata=meta) as img:
        img.write_pages([(i, bytes([i + 1]) * PAGE_SIZE) for i in range(pages)])
    return path
