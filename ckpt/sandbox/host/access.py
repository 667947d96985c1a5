"""What pre-dumps and pre-copy may use of the sandbox host: the kernel, the lock that
guards it, the sandbox's ID, its image session, and the ID of the last image taken of it.
``Host`` (process.py) is one; a test's stand-in with these five attributes is another.

Only named in annotations (``precopy.py`` imports it under ``TYPE_CHECKING``): the
sandbox process never loads ``typing`` for it.  ``dump.write_image`` sees less still:
the ``Dump`` the checkpoint decided while the kernel was frozen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import threading

    from ckpt.sandbox.host.remote_image import ImageSession


class KernelAccess(Protocol):
    """The sandbox's kernel as a pre-dump reads it while the sandbox keeps running."""

    id: str  # the sandbox's: an image's parent must be one of this sandbox's
    cond: threading.Condition  # held while reading the kernel's pages
    kernel: Any  # memory_file (take_dirty, pages, mark_dirty, refs), workload
    images: ImageSession  # where an image's writer comes from (a directory or a store)
    last_dump: str | None  # the last image's ID: dirty tracking counts from it


FIELDS = ("id", "cond", "kernel", "images", "last_dump")
