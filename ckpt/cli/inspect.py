"""``ckpt inspect statefile``: what an image holds, local or in a repository.

A local image is read in place (``ckpt.statefile.inspect_image``); one in s3:// is
fetched into a private temporary directory first (``inspect_remote``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ckpt.cli.options import JsonOpt, KeyOpt
from ckpt.cli.output import emit_json, tables

inspect_app = typer.Typer(help="Show what an image holds.")


def register(app: typer.Typer) -> None:
    """Add ``ckpt inspect`` to ``app``."""
    app.add_typer(inspect_app, name="inspect")


@inspect_app.command("statefile")
def inspect_statefile_cmd(
    path: Annotated[
        str,
        typer.Argument(
            metavar="PATH", help="An image directory, its checkpoint.img, or s3://.../NAME."
        ),
    ],
    key_file: KeyOpt = None,
    objects: Annotated[
        int,
        typer.Option("--objects", min=0, metavar="N", help="Pretty-print the first N objects."),
    ] = 0,
    verify: Annotated[
        bool, typer.Option("--verify", help="Decode every record and check every page.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Show what an image holds.

    Its header, metadata, integrity, type table, pages and objects.
    """
    from ckpt import statefile
    from ckpt.statefile.inspect import report_failed
    from ckpt.statefile.render import render_report

    key = statefile.read_key_file(str(key_file)) if key_file is not None else None
    from ckpt.images import Location

    where = Location.parse(path)
    if where.path is None:
        report = inspect_remote(str(where), key, objects=objects, verify=verify)
    else:
        report = statefile.inspect_image(where.path, key, objects=objects, verify=verify)
    if json_out:
        emit_json(report)
    else:
        tables([render_report(report)])
    if report_failed(report):
        raise typer.Exit(1)


def inspect_remote(url: str, key: bytes | None, **options: Any) -> dict[str, Any]:
    """``ckpt inspect statefile s3://BUCKET/PREFIX/NAME``: the image is fetched (every
    chunk checked against the manifest, whose HMAC is checked with ``key``) into a
    private temporary directory, inspected as a local image, and removed."""
    import tempfile

    from ckpt import statefile
    from ckpt.imagefiles import IMAGE_FILES, MAX_CHAIN
    from ckpt.storage.repository import Repository

    repo, name = Repository.for_image(url, key)
    reader = repo.open_image(name)
    with tempfile.TemporaryDirectory(prefix="ckpt-inspect-") as temp:
        directory = Path(temp) / name  # its parents beside it, as a restore stages them
        reader.download(directory, allowed=IMAGE_FILES)  # checked before any fetch
        parents = repo.download_parents(
            reader.manifest, Path(temp), MAX_CHAIN, IMAGE_FILES, chunks=reader.chunks
        )
        # An encrypted image's files are unkeyed: its chunks' seal covers them.
        report = statefile.inspect_image(directory, None if reader.sealed else key, **options)
    urls = {str(Path(temp) / n): repo.image_url(n) for n in [name, *parents]}
    header = report.get("header")
    if isinstance(header, dict) and "path" in header:
        header["path"] = url
    for entry in report.get("chain") or ():
        entry["path"] = urls.get(entry.get("path"), entry.get("path"))
    report["manifest"] = {
        "image_id": reader.manifest.image_id,
        "sandbox_id": reader.manifest.sandbox_id,
        "parent": reader.manifest.parent,
        "chunks": len(reader.manifest.chunk_refs()),
        "sealed": key is not None,
        "encrypted": reader.sealed,
        "key_id": reader.chunks.key_id,
    }
    return report
