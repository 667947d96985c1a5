"""The image format: a chunked, compressed, sealed statefile plus a page file.

Public API (see ``format.py`` for the byte layout)::

    with statefile.ImageWriter(image_dir, force=False, compression="zstd", level=None,
                               key=None, metadata=None) as img:
        img.metadata.update(...)
        state.save(kernel, img.state_file, engine=...)
        img.write_pages(pages)          # (index, 4096 bytes), ascending
        img.write_stats(stats_dict)     # optional
    image = statefile.open_image(path, key=None)
    image.metadata; image.read_state(); image.state_reader(); image.open_pages(lazy=False)
    statefile.inspect_image(path, key=None, objects=0, verify=False) -> dict
"""

from ckpt.errors import ImageExistsError, IntegrityError, StatefileError
from ckpt.keyfile import read_key_file
from ckpt.statefile.format import (
    DEFAULT_COMPRESSION,
    DEFAULT_LEVEL,
    PAGE_SIZE,
)
from ckpt.statefile.image import ImageWriter, clean_stale
from ckpt.statefile.image_reader import Image, open_image, open_image_unverified
from ckpt.statefile.pages import LoadedPages, PageSummary

COMPRESSIONS = ("none", "zstd")


def inspect_image(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Build the inspect report (see ``ckpt.statefile.inspect.inspect_image``)."""
    from ckpt.statefile.inspect import inspect_image as _inspect

    return _inspect(*args, **kwargs)


__all__ = [
    "COMPRESSIONS",
    "DEFAULT_COMPRESSION",
    "DEFAULT_LEVEL",
    "PAGE_SIZE",
    "Image",
    "ImageExistsError",
    "ImageWriter",
    "IntegrityError",
    "LoadedPages",
    "PageSummary",
    "StatefileError",
    "clean_stale",
    "inspect_image",
    "open_image",
    "open_image_unverified",
    "read_key_file",
]
