"""``ckpt image ls|rm|prune`` on a local directory of image directories (what
``checkpoint --image-path DIR/NAME`` writes), with the columns and refusals of a
bucket's: a directory's images share no chunks, so each one's size is its unique size,
and there is nothing to prune but the leftovers of writers that died."""

from __future__ import annotations

import contextlib
import datetime
import os
import stat
from pathlib import Path

from ckpt.errors import CkptError, ImageNotFound, StatefileError

MAX_ENTRIES = 4096  # entries of a directory looked at, as chain.MAX_SIBLINGS
CHUNKS_DIR = ".chunks"  # a content-addressed repository's (ckpt/storage/repository.py)


def is_chunk_repository(directory: Path) -> bool:
    """A directory holding a content-addressed repository (chunks and manifests), which
    ``ckpt.storage`` lists, rather than image directories."""
    return (directory / CHUNKS_DIR).is_dir()


def is_image_dir(path: Path) -> bool:
    """A real directory (not a link) holding an image's checkpoint.img or page map."""
    from ckpt.statefile.format import CHECKPOINT_IMG, PAGES_META_IMG

    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    return any(os.path.lexists(path / name) for name in (CHECKPOINT_IMG, PAGES_META_IMG))


def _created(meta: dict, path: Path) -> float:
    with contextlib.suppress(TypeError, ValueError):
        return datetime.datetime.fromisoformat(meta["created"]).timestamp()
    with contextlib.suppress(OSError):
        return os.lstat(path).st_mtime
    return 0.0


def _size(path: Path) -> int:
    total = 0
    with contextlib.suppress(OSError), os.scandir(path) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def _info(path: Path) -> object:
    """The ``ImageInfo`` row of the image directory ``path`` (its files parsed, not
    verified: listing needs no key)."""
    from ckpt.statefile import open_image_unverified
    from ckpt.storage.repository import ImageInfo

    image = open_image_unverified(path)
    meta = image.metadata
    link = meta.get("parent") if isinstance(meta.get("parent"), dict) else {}
    parent_path = link.get("path") if isinstance(link.get("path"), str) else None
    size = _size(path)
    return ImageInfo(
        name=path.name,
        image_id=image.header.image_id.hex(),
        sandbox_id=str(meta.get("sandbox_id") or ""),
        created=_created(meta, path),
        parent=parent_path.rsplit("/", 1)[-1] if parent_path else None,
        parent_id=link.get("image_id") if isinstance(link.get("image_id"), str) else None,
        size=size,
        stored=size,
        unique=size,
        chunks=0,
    )


def scan(directory: Path) -> object:
    """The ``Listing`` of the image directories in ``directory``, oldest first, and apart
    those that cannot be read; temporary and hidden entries are not images."""
    from ckpt.storage.repository import BadImage, Listing

    try:
        entries = sorted(os.listdir(directory))
    except OSError as exc:
        raise ImageNotFound(f"{directory}: cannot list it ({exc.strerror})") from exc
    if len(entries) > MAX_ENTRIES:
        raise StatefileError(
            f"{directory}: over {MAX_ENTRIES} entries, too many to list in bounded time"
        )
    images, bad = [], []
    for name in entries:
        path = directory / name
        if name.startswith(".") or not is_image_dir(path):
            continue
        try:
            images.append(_info(path))
        except CkptError as exc:
            bad.append(BadImage(name=name, error=str(exc)))
    images.sort(key=lambda i: (i.created, i.name))  # type: ignore[attr-defined]
    return Listing(images=images, bad=bad)


def remove(image_dir: Path, *, force: bool = False) -> None:
    """Remove one image directory, its own files only, through directory descriptors;
    an image another one beside it names as its parent is kept unless ``force``."""
    from ckpt.statefile import chain
    from ckpt.statefile.image import remove_image
    from ckpt.storage.errors import ImageInUse

    if not is_image_dir(image_dir):
        raise ImageNotFound(f"{image_dir}: no such image")
    if not force:
        kids = chain.children(image_dir)
        if kids:
            names = ", ".join(k.name for k in kids)
            raise ImageInUse(
                f"{image_dir} is the parent of {names}, which would no longer restore;"
                " remove that first, or pass --force"
            )
    left = remove_image(image_dir)
    if left:
        raise StatefileError(
            f"{image_dir}: its image files were removed but {left[0]} is not an image's"
            " and was left; look at it and remove it by hand"
        )


def prune(directory: Path) -> tuple[list[Path], list[Path]]:
    """Remove what writers that died left in ``directory`` (their temporary images);
    (removed, left in place).  A live writer's are kept."""
    from ckpt.statefile.image import clean_directory

    return clean_directory(directory)
