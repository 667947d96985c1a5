"""``ckpt image ls|rm|prune|rekey``: the images of a repository (``s3://BUCKET/PREFIX`` or a
directory).

Commands parse the URL into a :class:`ckpt.images.Location` and call
:class:`ckpt.storage.repository.Repository` for a bucket or a directory holding a
content-addressed repository, or ckpt/images/local.py for a directory of image
directories (what ``checkpoint --image-path DIR/NAME`` writes); every error is a CkptError, which ``ckpt.cli.main`` renders as one line.  rich and the storage layer
are imported by the commands that use them, so other commands start no slower.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from ckpt.cli.options import KEY_FILE_HELP, JsonOpt
from ckpt.cli.output import emit_json, say, tables
from ckpt.errors import CkptError

image_app = typer.Typer(help="List, remove and prune images in s3:// or a directory.")


def register(app: typer.Typer) -> None:
    """Add ``ckpt image`` to ``app``."""
    app.add_typer(image_app, name="image")


RepoArg = Annotated[
    str,
    typer.Argument(
        metavar="URL", help="Repository: s3://BUCKET/PREFIX, a directory or file:///DIR."
    ),
]


def _local_dir(url: str) -> Path | None:
    """The directory of image directories ``url`` names, or None when it is a bucket or
    a directory holding a content-addressed repository (ckpt.storage's to handle)."""
    from ckpt.images import Location
    from ckpt.images.local import is_chunk_repository

    where = Location.parse(url)
    if where.path is None or is_chunk_repository(where.path):
        return None
    return where.path


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class BadDuration(CkptError):
    """A --grace value that is not a duration."""


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``1h``, ``2d`` -> seconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise BadDuration(f"--grace {text!r}: give a duration such as 30s, 15m, 1h or 2d")
    return float(match.group(1)) * _UNITS[match.group(2)]


def human_bytes(size: int) -> str:
    """``1536`` -> ``1.5 KiB``: at most 9 characters, so the table fits 80 columns."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _when(created: float) -> str:
    import datetime

    try:
        moment = datetime.datetime.fromtimestamp(created, datetime.UTC)
    except (ValueError, OverflowError, OSError):
        return "?"  # the manifest checks it; a table never fails on one row
    return moment.strftime("%Y-%m-%d %H:%M")


def images_table(url: str, images: list[Any]) -> Any:
    """One row per image; long names and IDs fold, so the table fits 80 columns."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"images in {url}", title_justify="left")
    table.add_column("NAME", overflow="fold", ratio=2)
    table.add_column("SIZE", justify="right", no_wrap=True)
    table.add_column("UNIQUE", justify="right", no_wrap=True)
    table.add_column("SANDBOX", overflow="fold", ratio=2)
    table.add_column("CREATED (UTC)", overflow="fold", max_width=16)
    table.add_column("PARENT", overflow="fold", ratio=1)
    for info in images:
        table.add_row(
            Text(info.name),
            human_bytes(info.size),
            human_bytes(info.unique),
            Text(info.sandbox_id),
            _when(info.created),
            Text(info.parent or "-"),
        )
    return table


@image_app.command("ls")
def ls_cmd(url: RepoArg, json_out: JsonOpt = False) -> None:
    """List images: size, unique bytes, sandbox, creation time, parent."""
    import msgspec

    directory = _local_dir(url)
    if directory is not None:
        from ckpt.images import local

        listing: Any = local.scan(directory)
        where = str(directory)
        name_of: Any = lambda name: str(directory / name)  # noqa: E731
    else:
        from ckpt.storage.repository import Repository

        repo = Repository.open(url)
        repo.store.check()
        listing = repo.scan()
        where, name_of = repo.store.url, repo.image_url
    images = listing.images
    if json_out:
        emit_json(
            {
                "repository": where,
                "images": msgspec.to_builtins(images),
                "unreadable": msgspec.to_builtins(listing.bad),
            }
        )
        return
    if not images:
        say(f"no images in {where}")
    else:
        tables([images_table(where, images)], width=80)
    for bad in listing.bad:
        say(f"unreadable image {name_of(bad.name)}: {bad.error}")


@image_app.command("rm")
def rm_cmd(
    url: Annotated[
        str, typer.Argument(metavar="URL", help="Image: s3://BUCKET/PREFIX/NAME or DIR/NAME.")
    ],
    force: Annotated[
        bool, typer.Option("--force", help="Remove it even if another image's parent.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Remove an image (its manifest); its chunks go at the next prune."""
    from ckpt.images import Location

    where = Location.parse(url)
    if where.path is not None and _local_dir(str(where.path.parent)) is not None:
        from ckpt.images import local

        local.remove(where.path, force=force)
        if json_out:
            emit_json({"removed": str(where.path)})
            return
        say(f"image {where.path} removed")
        return
    from ckpt.storage.repository import Repository

    repo, name = Repository.for_image(url)
    repo.store.check()
    repo.remove(name, force=force)
    if json_out:
        emit_json({"removed": repo.image_url(name)})
        return
    say(f"image {repo.image_url(name)} removed; run `ckpt image prune` for chunks")


@image_app.command("prune")
def prune_cmd(
    url: RepoArg,
    grace: Annotated[
        str,
        typer.Option(
            "--grace",
            metavar="DURATION",
            help="Keep unreferenced chunks younger than this (30s, 15m, 1h, 2d).",
        ),
    ] = "1h",
    json_out: JsonOpt = False,
) -> None:
    """Remove chunks no image uses and older than --grace."""
    import msgspec

    seconds = parse_duration(grace)
    directory = _local_dir(url)
    if directory is not None:
        _prune_local(directory, json_out)
        return
    from ckpt.storage.repository import Repository

    repo = Repository.open(url)
    repo.store.check()
    result = repo.prune(seconds)
    if json_out:
        emit_json({"repository": repo.store.url, "grace": seconds, **msgspec.to_builtins(result)})
        return
    say(
        f"pruned {repo.store.url}: removed {result.removed_chunks} chunks"
        f" ({human_bytes(result.removed_bytes)}), kept {result.kept_referenced} referenced"
        f" and {result.kept_young} younger than {grace}"
    )
    for name in result.bad:
        say(
            f"skipped {repo.image_url(name)}: its manifest is unreadable (its chunks were"
            " not kept for it); `ckpt image ls` says why, `ckpt image rm` removes it"
        )


def _prune_local(directory: Path, json_out: bool) -> None:
    """A directory of image directories shares no chunks: nothing to collect but the
    temporary images of writers that died."""
    from ckpt.images import local

    removed, left = local.prune(directory)
    if json_out:
        emit_json(
            {
                "repository": str(directory),
                "removed_leftovers": [str(p) for p in removed],
                "left": [str(p) for p in left],
            }
        )
        return
    head = f"pruned {directory}: its images share no chunks, nothing to collect"
    gone = f"; removed {len(removed)} leftover(s) of writers that died" if removed else ""
    say(head + gone)
    for path in left:
        say(f"left {path}: not an image's file; look at it and remove it by hand")


@image_app.command("rekey")
def rekey_cmd(
    url: Annotated[
        str, typer.Argument(metavar="URL", help="Image: s3://BUCKET/PREFIX/NAME or a directory.")
    ],
    key_files: Annotated[
        list[Path] | None,
        typer.Option("--key-file", metavar="PATH", help=KEY_FILE_HELP + "  [required]"),
    ] = None,
    new_key_file: Annotated[
        Path | None,
        typer.Option("--new-key-file", metavar="PATH", help="The key to seal it with from now on."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Rewrite an encrypted image under a new key, without a sandbox.

    --key-file may be given several times (keys in rotation): the one whose key id the
    image names opens it."""
    import os

    from ckpt.errors import UsageError
    from ckpt.images import Location
    from ckpt.images.rekey import rekey
    from ckpt.images.remote import STORE_VARS
    from ckpt.keyfile import read_key_file

    if not key_files:
        raise UsageError("pass the image's current key with --key-file PATH")
    if new_key_file is None:
        raise UsageError("pass the key to seal it with from now on with --new-key-file PATH")
    keys = [read_key_file(path) for path in key_files]
    new_key = read_key_file(new_key_file)
    env = {name: os.environ[name] for name in STORE_VARS if os.environ.get(name)}
    done = rekey(Location.parse(url), keys, new_key, env)
    if json_out:
        emit_json(done.__dict__)
        return
    tail = "; `ckpt image prune` removes the old key's chunks" if url.startswith("s3://") else ""
    say(f"image {done.image} re-keyed: key id {done.old_key_id} -> {done.new_key_id}{tail}")
