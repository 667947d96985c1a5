"""Image chains: an image whose pages are only those dirtied since a parent image.

A pre-dump image (``kind: pre-dump``) holds memory pages and no kernel state; a final
image holds the kernel state.  Either may name a parent in its metadata::

    "parent": {"image_id": "<hex>", "path": "../NAME" or "rounds/rN"},
    "chain_depth": <the parent's depth + 1>

A parent link stays inside the child's repository (the directory holding the child):
``../NAME`` names an image beside the child, ``rounds/rN`` a pre-copy round inside it
(``sandbox/host/precopy.py``).  Nothing else is followed, not an absolute path, not a
``..`` further up, not a symbolic link: a user who can write one image directory must
not be able to make a restore read an image elsewhere (another root's memory).  An
error about a link never prints the image id it found there.

The metadata sits in checkpoint.img's trailer, so the link is covered by the image's
integrity tag (CRC32C, or HMAC-SHA256 with a key): a parent replaced by any other image,
even one of the same sandbox, has another image id and is refused.  The depth is
checked against ``MAX_CHAIN`` before any parent is opened, and again at each step.

The pages of a chain are the union of its images' pages, the newest image's copy of a
page winning (``ChainPages``).  The oldest image holds every allocated page (a full
checkpoint, or a pre-dump without a parent), so every frame the kernel state allocates
is recorded somewhere: a frame allocated since is dirty, so a later image records it.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ckpt.errors import CkptError, IntegrityError, StatefileError
from ckpt.imagefiles import MAX_CHAIN
from ckpt.statefile.format import MAX_PAGES
from ckpt.statefile.image import ROUND_NAME, ROUNDS_DIR, is_real_dir
from ckpt.statefile.image_reader import Image, open_image, open_image_unverified
from ckpt.statefile.pages import LoadedPages
from ckpt.statefile.seal import check_parent_sealing

PRE_DUMP = "pre-dump"


def is_pre_dump(image: Image) -> bool:
    return image.metadata.get("kind") == PRE_DUMP


def depth(image: Image) -> int:
    """How many parents the image says it has (0: none), checked for shape and bound."""
    meta = image.metadata
    d = meta.get("chain_depth", 0)
    parent = meta.get("parent")
    if type(d) is not int or d < 0 or (d == 0) != (parent is None):
        raise IntegrityError(f"{image.dir}: inconsistent chain_depth {d!r} in its metadata")
    if d >= MAX_CHAIN:
        raise StatefileError(
            f"{image.dir}: a chain of {d + 1} images is over the limit of {MAX_CHAIN}; "
            "take a full checkpoint instead"
        )
    if parent is not None and not (
        isinstance(parent, dict)
        and isinstance(parent.get("image_id"), str)
        and isinstance(parent.get("path"), str)
        and parent["path"]
    ):
        raise IntegrityError(f"{image.dir}: malformed parent link in its metadata")
    return d


def link_metadata(
    child_dir: str | os.PathLike[str], parent: Image, *, where: str | None = None
) -> dict[str, Any]:
    """The metadata a new image at ``child_dir`` records to name ``parent``, which must
    sit beside it (in the same directory): the link is ``../NAME``.

    ``where`` names the parent in messages when its ``dir`` is a local copy (an image
    in a store, fetched to be checked)."""
    return _link(parent, sibling_link(child_dir, parent.dir), where or parent.dir)


def sibling_link(child_dir: str | os.PathLike[str], parent_dir: str | os.PathLike[str]) -> str:
    """``../NAME``: how an image at ``child_dir`` names its parent at ``parent_dir``;
    refused unless the two sit in one directory (a link never leaves its repository)."""
    child = os.path.abspath(child_dir)
    parent = os.path.abspath(parent_dir)
    name = os.path.basename(parent)
    same_dir = os.path.realpath(os.path.dirname(child)) == os.path.realpath(os.path.dirname(parent))
    if not same_dir or not _is_name(name) or name == os.path.basename(child):
        raise StatefileError(
            f"the parent image {parent} is not beside the new image {child}: a chain's "
            "images sit in one directory; write the new image next to its parent, e.g. "
            f"{os.path.join(os.path.dirname(parent), os.path.basename(child))}"
        )
    return f"../{name}"


def _link(parent: Image, path: str, where: object) -> dict[str, Any]:
    d = depth(parent) + 1
    if d >= MAX_CHAIN:
        raise StatefileError(
            f"{where}: already the {d}th image of its chain (the limit is "
            f"{MAX_CHAIN}); take a full checkpoint or a pre-dump without --parent-path"
        )
    return {"parent": {"image_id": parent.header.image_id.hex(), "path": path}, "chain_depth": d}


def store_link_metadata(parent: Image, parent_name: str, parent_url: str) -> dict[str, Any]:
    """The link a new image in a store records to ``parent`` (``parent_name`` in the same
    repository, fetched into ``parent.dir``): the path ``../NAME``, which is where a
    restore stages the parent beside its child (ckpt/sandbox/host/remote_image.py)."""
    if not _is_name(parent_name):
        raise StatefileError(f"{parent_url}: not an image name a link can hold")
    return _link(parent, f"../{parent_name}", parent_url)


def _is_name(name: str) -> bool:
    """One path component naming an entry of a directory (not itself, not its parent)."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def _parent_dir(image: Image) -> Path:
    """Where ``image``'s parent link points, refused unless it stays inside the image's
    repository: ``../NAME`` beside it, or ``rounds/rN`` inside it, through no link."""
    path = image.metadata["parent"]["path"]
    here = Path(os.path.abspath(image.dir))
    up, _, name = path.partition("/")
    if up == ".." and _is_name(name):
        return here.parent / name
    if up == ROUNDS_DIR and ROUND_NAME.fullmatch(name):
        rounds = here / ROUNDS_DIR
        if not is_real_dir(rounds):
            raise StatefileError(
                f"{image.dir}: its {ROUNDS_DIR} is missing or not a directory (a link?); "
                "the chain is broken"
            )
        return rounds / name
    raise StatefileError(
        f"{image.dir}: its parent link {path!r} leaves the image's directory, and ckpt "
        f"follows a link only to an image beside its child (../NAME) or in its own "
        f"{ROUNDS_DIR}/: take a new checkpoint, a full one or a chain in one directory"
    )


MAX_SIBLINGS = 4096  # entries of a repository looked at for an image's children


def children(image_dir: str | os.PathLike[str]) -> list[Path]:
    """The images beside ``image_dir`` whose parent link names it, as it is now (its
    image id): what replacing it would break.  An entry that is not a readable image is
    skipped; a repository of over ``MAX_SIBLINGS`` entries is refused, as it cannot be
    checked in bounded time."""
    target = Path(os.path.abspath(image_dir))
    try:
        own = open_image_unverified(target).header.image_id.hex()
    except CkptError:
        return []  # not an image: no link can name it
    link = f"../{target.name}"
    found: list[Path] = []
    try:
        entries = os.scandir(target.parent)
    except OSError as exc:
        raise StatefileError(
            f"{target.parent}: cannot list it to check which images name {target} as "
            f"their parent ({exc.strerror}); pass --force-children to replace it anyway"
        ) from exc
    with entries:
        for n, entry in enumerate(entries):
            if n >= MAX_SIBLINGS:
                raise StatefileError(
                    f"{target.parent}: over {MAX_SIBLINGS} entries, too many to check which "
                    f"images name {target} as their parent; pass --force-children to "
                    "replace it anyway"
                )
            if entry.name == target.name or entry.name.startswith("."):
                continue  # itself, or a writer's temporary directory
            if not entry.is_dir(follow_symlinks=False):
                continue
            try:
                meta = open_image_unverified(entry.path).metadata
            except CkptError:
                continue
            parent = meta.get("parent")
            if (
                isinstance(parent, dict)
                and parent.get("path") == link
                and parent.get("image_id") == own
            ):
                found.append(Path(entry.path))
    return sorted(found)


def open_parent(child: Image, key: bytes | None, *, verify: bool = True) -> Image:
    """The parent ``child`` names, checked to be the very image it recorded."""
    link = child.metadata["parent"]
    where = _parent_dir(child)
    what = f"{child.dir}: its parent image {where}"
    try:
        parent = open_image(where, key) if verify else open_image_unverified(where)
    except CkptError as exc:
        raise type(exc)(f"{what} cannot be used: {exc}; the chain is broken") from exc
    check_parent_sealing(parent.header.encrypted, child.header.encrypted, what)
    if parent.header.image_id.hex() != link["image_id"]:
        raise IntegrityError(  # no id printed: either may have come from a stranger
            f"{what} is another image than the one its child recorded; the chain is broken"
        )
    if parent.metadata.get("sandbox_id") != child.metadata.get("sandbox_id"):
        raise IntegrityError(f"{what} belongs to another sandbox; the chain is broken")
    if depth(parent) != depth(child) - 1:
        raise IntegrityError(f"{what} is at the wrong place in the chain")
    return parent


def open_chain(image: Image, key: bytes | None, *, verify: bool = True) -> list[Image]:
    """``image`` and its ancestors, newest first, each link checked; at most MAX_CHAIN."""
    chain = [image]
    d = depth(image)
    while d:
        parent = open_parent(chain[-1], key, verify=verify)
        chain.append(parent)
        d = depth(parent)
        if len(chain) + d > MAX_CHAIN:
            raise StatefileError(f"{image.dir}: its chain is over {MAX_CHAIN} images")
    for older in chain[1:]:
        if not is_pre_dump(older) and older.metadata.get("kind") not in (None, "full"):
            raise StatefileError(f"{older.dir}: unknown image kind in a chain")
    return chain


def open_pages(
    chain: list[Image],
    lazy: bool = False,
    on_error: Callable[[BaseException], None] | None = None,
    *,
    limit: int = MAX_PAGES,
    frames: int = -1,
) -> Any:
    """The chain's pages: the image's own ``LoadedPages`` if it has no parent.

    ``limit`` (the address space in pages) bounds every image's page map; ``frames``
    (the frames allocated) only the newest one's: a parent may record frames freed
    since."""
    if len(chain) == 1:
        return chain[0].open_pages(lazy=lazy, on_error=on_error, limit=limit, frames=frames)
    layers: list[LoadedPages] = []
    try:
        for img in chain:
            try:
                layers.append(
                    img.open_pages(
                        lazy=lazy,
                        on_error=on_error,
                        limit=limit,
                        frames=frames if img is chain[0] else -1,
                    )
                )
            except CkptError as exc:
                if img is chain[0]:
                    raise
                raise type(exc)(
                    f"{chain[0].dir}: its parent image {img.dir} cannot be used: {exc}; "
                    "the chain is broken"
                ) from exc
    except BaseException:
        for layer in layers:
            layer.close()
        raise
    return ChainPages(layers)


def _merge(ranges: Iterator[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted ``(first, count)`` runs, overlapping or touching ones joined."""
    out: list[list[int]] = []
    for first, n in sorted(ranges):
        if out and first <= out[-1][1]:
            out[-1][1] = max(out[-1][1], first + n)
        else:
            out.append([first, first + n])
    return [(a, b - a) for a, b in out]


class RunIndices(Sequence[int]):
    """Page indices given as ascending, disjoint runs ``(first, count)``: what a page
    reader's ``indices`` offers ``restore_pages`` (``in``, ``ranges()``, ``len``)."""

    def __init__(self, runs: list[tuple[int, int]]) -> None:
        self._runs = runs
        self._starts = [a for a, _ in runs]
        self._len = sum(n for _, n in runs)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: Any) -> Any:
        return list(self)[i]

    def __iter__(self) -> Iterator[int]:
        for first, n in self._runs:
            yield from range(first, first + n)

    def ranges(self) -> Iterator[tuple[int, int]]:
        return iter(self._runs)

    def __contains__(self, page: object) -> bool:
        if not isinstance(page, int):
            return False
        r = bisect.bisect_right(self._starts, page) - 1
        return r >= 0 and page < self._starts[r] + self._runs[r][1]

    def run_end(self, page: int) -> int:
        """The end of the run holding ``page`` (which must be in one)."""
        r = bisect.bisect_right(self._starts, page) - 1
        return self._starts[r] + self._runs[r][1]


def union_indices(layers: Iterable[Any]) -> RunIndices:
    """Every page index some layer records, ascending (what ``restore_pages`` reads)."""
    return RunIndices(_merge(r for layer in layers for r in layer.indices.ranges()))


class ChainPages:
    """The pages of a chain of images, newest first: each page from the newest image
    that records it (as stored data or as a zero page)."""

    def __init__(self, layers: list[LoadedPages]) -> None:
        self.layers = layers
        self.indices = union_indices(layers)
        self.summary = layers[0].summary
        self.lazy = layers[0].lazy

    def _layer(self, index: int) -> LoadedPages:
        for layer in self.layers:
            if index in layer.indices:
                return layer
        raise StatefileError(f"page {index} is in no image of the chain")

    def read_page(self, index: int) -> bytes:
        return self._layer(index).read_page(index)

    def read_page_view(self, index: int) -> memoryview | bytes:
        return self._layer(index).read_page_view(index)

    def wait(self) -> None:
        for layer in self.layers:
            layer.wait()

    @property
    def done(self) -> bool:
        return all(layer.done for layer in self.layers)

    def close(self) -> None:
        for layer in self.layers:
            layer.close()

    def __enter__(self) -> ChainPages:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def describe(image: Image, key: bytes | None, *, verify: bool) -> list[dict[str, Any]]:
    """The chain for ``ckpt inspect statefile``: one entry per image, newest first.
    An entry that could not be opened or checked carries ``error`` and ends the list."""
    entries: list[dict[str, Any]] = []
    current: Image | None = image
    checked = key is not None or not image.header.keyed
    while current is not None:
        entry: dict[str, Any] = {
            "path": str(current.dir),
            "image_id": current.header.image_id.hex(),
            "kind": current.metadata.get("kind") or "full",
            "pages_stored": (current.metadata.get("pages") or {}).get("stored"),
            "verified": False,
        }
        entries.append(entry)
        try:
            if verify and checked:
                with current.open_pages(lazy=False):
                    entry["verified"] = True
            current = (
                open_parent(current, key, verify=checked)
                if current.metadata.get("parent") is not None
                else None
            )
        except CkptError as exc:
            entry["error"] = str(exc)
            break
        if len(entries) > MAX_CHAIN:
            entry["error"] = f"the chain is over {MAX_CHAIN} images"
            break
    return entries
