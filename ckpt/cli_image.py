"""``ckpt image ls|rm|prune``: the images of a repository (``s3://BUCKET/PREFIX`` or a
directory), kept apart from ckpt/cli.py so the command group is one module with one job.

Commands parse options and call :class:`ckpt.storage.repository.Repository`; every error
is a CkptError, which ``ckpt.cli.main`` renders as one line.  rich and the storage layer
are imported by the commands that use them, so other commands start no slower.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Annotated, Any

import typer

from ckpt.errors import CkptError

image_app = typer.Typer(help="List, remove and prune images in s3:// or a directory.")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
RepoArg = Annotated[
    str, typer.Argument(metavar="URL", help="Repository: s3://BUCKET/PREFIX or a directory.")
]
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

    moment = datetime.datetime.fromtimestamp(created, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M")


def _emit(document: object) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")


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


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, width=min(80, Console().width))


@image_app.command("ls")
def ls_cmd(url: RepoArg, json_out: JsonOpt = False) -> None:
    """List images: size, unique bytes, sandbox, creation time, parent."""
    import msgspec

    from ckpt.storage.repository import Repository

    repo = Repository.open(url)
    repo.store.check()
    images = repo.images()
    if json_out:
        _emit({"repository": repo.store.url, "images": msgspec.to_builtins(images)})
        return
    if not images:
        sys.stdout.write(f"no images in {repo.store.url}\n")
        return
    _console().print(images_table(repo.store.url, images))


@image_app.command("rm")
def rm_cmd(
    url: Annotated[
        str, typer.Argument(metavar="URL", help="Image: s3://BUCKET/PREFIX/NAME or DIR/NAME.")
    ],
    json_out: JsonOpt = False,
) -> None:
    """Remove an image (its manifest); its chunks go at the next prune."""
    from ckpt.storage.repository import Repository

    repo, name = Repository.for_image(url)
    repo.store.check()
    repo.remove(name)
    if json_out:
        _emit({"removed": repo.image_url(name)})
        return
    sys.stdout.write(f"image {repo.image_url(name)} removed; run `ckpt image prune` for chunks\n")


@image_app.command("prune")
def prune_cmd(
    url: RepoArg,
    grace: Annotated[
        str,
        typer.Option(
            "--grace", help="Keep unreferenced chunks younger than this (30s, 15m, 1h, 2d)."
        ),
    ] = "1h",
    json_out: JsonOpt = False,
) -> None:
    """Remove chunks no image uses and older than --grace."""
    import msgspec

    from ckpt.storage.repository import Repository

    seconds = parse_duration(grace)
    repo = Repository.open(url)
    repo.store.check()
    result = repo.prune(seconds)
    if json_out:
        _emit({"repository": repo.store.url, "grace": seconds, **msgspec.to_builtins(result)})
        return
    sys.stdout.write(
        f"pruned {repo.store.url}: removed {result.removed_chunks} chunks"
        f" ({human_bytes(result.removed_bytes)}), kept {result.kept_referenced} referenced"
        f" and {result.kept_young} younger than {grace}\n"
    )


def inspect_remote(url: str, key: bytes | None, **options: Any) -> dict[str, Any]:
    """``ckpt inspect statefile s3://BUCKET/PREFIX/NAME``: the image is fetched (every
    chunk checked against the manifest, whose HMAC is checked with ``key``) into a
    private temporary directory, inspected as a local image, and removed."""
    import tempfile
    from pathlib import Path

    from ckpt import statefile
    from ckpt.storage.repository import Repository

    repo, name = Repository.for_image(url, key)
    reader = repo.open_image(name)
    with tempfile.TemporaryDirectory(prefix="ckpt-inspect-") as temp:
        directory = Path(temp) / "image"
        reader.download(directory)
        report = statefile.inspect_image(directory, key, **options)
    header = report.get("header")
    if isinstance(header, dict) and "path" in header:
        header["path"] = url
    report["manifest"] = {
        "image_id": reader.manifest.image_id,
        "sandbox_id": reader.manifest.sandbox_id,
        "parent": reader.manifest.parent,
        "chunks": len(reader.manifest.chunk_refs()),
        "sealed": key is not None,
    }
    return report


def bench_store_cmd(
    workload: Annotated[
        str, typer.Option("--workload", help="memory:N (its digest is checked), nginx...")
    ] = "memory:64",
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="Rounds.")] = 3,
    netns: Annotated[bool, typer.Option("--netns", help="Store behind a shaped veth.")] = False,
    rate: Annotated[str, typer.Option("--rate", metavar="RATE", help="tc rate.")] = "1gbit",
    delay_ms: Annotated[
        float, typer.Option("--delay-ms", metavar="MS", min=0, help="Relay delay each way.")
    ] = 5.0,
    json_out: JsonOpt = False,
) -> None:
    """Local image directory against S3 (a SeaweedFS started for the run), same sandbox.

    Checkpoint wall, upload MB/s, restore wall and first response (eager and
    --background), and the bytes a second checkpoint of the unchanged sandbox uploads;
    medians; rich table, --json, Go benchmark lines.  --netns: the store in a network
    namespace, behind a veth shaped to --rate and a relay adding --delay-ms each way.
    """
    from ckpt.bench import store

    link = store.Link(rate, delay_ms) if netns else None
    report = store.run(workload=workload, count=count, link=link)
    if json_out:
        _emit(store.to_json(report))
        return
    _console().print(store.render(report))
    for line in store.go_lines(report):
        sys.stdout.write(line + "\n")
