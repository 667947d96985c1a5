"""The one place that turns a :class:`Location` into something that writes or reads an
image: a directory's ``ImageWriter``/``Image``, or an object store's writer (files cut
into chunks and uploaded, store_sink.py) and reader (pages.img served chunk by chunk,
store_source.py).  Callers say where; they never look at the text of a location."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ckpt.images.location import Location


def store_of(location: Location, env: dict[str, str] | None = None) -> tuple[Any, str, str]:
    """The store of the object-store image ``location``'s repository, opened with the
    settings in ``env`` only (never this process's environment); its repository URL
    and the image's name."""
    from ckpt.storage.repository import split_image_url
    from ckpt.storage.s3 import S3Store

    if location.url is None:
        raise ValueError(f"{location}: a local image has no store")
    repo_url, name = split_image_url(location.url)
    return S3Store.from_url(repo_url, dict(env or {})), repo_url, name


def repository(store: Any, key: bytes | None, *, sealed: bool = False) -> Any:
    """The repository of images in ``store``, its manifests signed with ``key`` (or,
    ``sealed``, the images it writes encrypted with it)."""
    from ckpt.storage.repository import Repository

    return Repository(store, key, sealed=sealed)


def writer(
    location: Location,
    *,
    repository: Any = None,
    sandbox_id: str = "",
    parent: str | None = None,
    parent_id: str | None = None,
    started: Any = None,
    **options: Any,
) -> Any:
    """The writer of a new image at ``location``: an ``ImageWriter`` for a directory; for
    an object store, a ``StoreImageWriter`` into ``repository`` (which must be given),
    whose manifest names ``parent`` (an image of that repository) and which takes the
    upload ``started`` before the sandbox froze, if any."""
    if location.path is not None:
        from ckpt.statefile.image import ImageWriter

        return ImageWriter(location.path, **options)
    if repository is None:
        raise ValueError(f"{location}: an object-store writer needs its repository")
    from ckpt.images.store_sink import StoreImageWriter

    return StoreImageWriter(
        repository,
        location.name,
        sandbox_id=sandbox_id,
        parent=parent,
        parent_id=parent_id,
        started=started,
        **options,
    )


def reader(
    location: Location | str | os.PathLike[str],
    key: bytes | None,
    *,
    source: Any = None,
) -> Any:
    """The image to load from a local directory: ``location`` itself, or an object-store
    image staged there.  With ``source`` (a chunk source of the store), pages.img is
    read from the store on demand instead of from the directory."""
    directory = location.path if isinstance(location, Location) else Path(location)
    if directory is None:
        raise ValueError(f"{location}: stage an object-store image before reading it")
    if source is not None:
        from ckpt.images.store_source import StoreImage

        return StoreImage(directory, key, source)
    from ckpt.statefile import open_image

    return open_image(directory, key=key)
