"""The checkpoint request's pre-dump and pre-copy fields, checked on the CLI side
before any sandbox is touched: options that contradict each other, or a parent that
cannot be linked from the image, are refused here rather than after the freeze."""

from __future__ import annotations

from typing import Any

from ckpt.errors import SandboxError


def cli_options(
    pre_dump: bool, parent: Any, pre_copy: bool, image: str | None = None
) -> dict[str, Any]:
    """The checkpoint request's fields for ``--pre-dump``, ``--parent-path``, ``--pre-copy``
    (an object-store parent is kept as its URL, and must be in ``image``'s repository)."""
    from ckpt.images import Location
    from ckpt.images.remote import check_chain_urls

    if pre_copy and (pre_dump or parent is not None):
        raise SandboxError(
            "--pre-copy does its own pre-dumps: pass it without --pre-dump and --parent-path"
        )
    options: dict[str, Any] = {}
    if pre_dump:
        options["pre_dump"] = True
    if parent is not None:
        parent = Location.of(parent)
        if image is not None:
            image = Location.of(image)
            check_chain_urls(image, parent)
            if parent.is_local:
                from ckpt.statefile.chain import sibling_link

                sibling_link(str(image), str(parent))  # refused now, not after the freeze
        options["parent"] = str(parent)
    if pre_copy:
        options["pre_copy"] = True
    return options
