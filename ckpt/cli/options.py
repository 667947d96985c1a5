"""Arguments and options that several commands share, declared once so their names,
metavars (``ID``, ``PATH``, ``CPUS``), choices and help read the same everywhere.

A default that is not a plain value is shown as ``[default: ...]`` through
``show_default``, like every other default, rather than written into the help text.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any

import typer

from ckpt.cli.base import ROOT_HELP, Globals, default_root
from ckpt.engines import ENGINE_NAMES

# ``ckpt.engines.ENGINE_NAMES`` as choices: that leaf is all the CLI loads for them.
Engine = enum.Enum("Engine", {name.upper(): name for name in ENGINE_NAMES})  # type: ignore[misc]


class Compression(enum.Enum):
    """``statefile.COMPRESSIONS``, as choices."""

    NONE = "none"
    ZSTD = "zstd"


IdArg = Annotated[str, typer.Argument(metavar="ID", help="Sandbox ID: its name under the root.")]
ImagePathOpt = Annotated[
    str,
    typer.Option(
        "--image-path",
        metavar="PATH",
        help="Image directory, file:///DIR, or s3://BUCKET/PREFIX/NAME.",
    ),
]
CpuOpt = Annotated[
    str,
    typer.Option("--cpu", metavar="CPUS", help="CPU quota in CPUs (e.g. 0.5), or 'uncapped'."),
]
EngineOpt = Annotated[
    Engine | None,
    typer.Option("--engine", help="State engine.", show_default="the fastest built"),
]
KEY_FILE_HELP = (
    "Secret key file: 32 or more random bytes, mode 0600 (make one: "
    "head -c 32 /dev/urandom > PATH; chmod 600 PATH)."
)
KeyOpt = Annotated[Path | None, typer.Option("--key-file", metavar="PATH", help=KEY_FILE_HELP)]
# Required, but checked by the command rather than the parser, so a missing key gets
# the one-line error that says how to make one; the help marks it as click would.
RequiredKeyOpt = Annotated[
    Path | None,
    typer.Option("--key-file", metavar="PATH", help=KEY_FILE_HELP + "  [required]"),
]
PORT_HELP = "TCP port the sandbox listens on (0: any free one)."


def port_opt(default_text: str | None = None) -> Any:
    """``--port PORT``, worded one way; ``default_text`` describes a default that is
    not a number (restore and migrate keep the saved port)."""
    return typer.Option(
        "--port",
        metavar="PORT",
        min=0,
        max=65535,
        help=PORT_HELP,
        show_default=default_text if default_text is not None else True,
    )


def bridge_opt(who: str = "the sandbox") -> Any:
    """``--bridge BR``, worded one way for ``run`` and for ``serve`` (``who`` is the
    sandbox it applies to)."""
    return typer.Option(
        "--bridge",
        metavar="BR",
        help=f"Give {who} a network namespace of its own, its veth on bridge BR.",
    )


def root_opt() -> Any:
    """``--root PATH`` for a command that takes its own root (``serve``), worded as the
    global one."""
    return typer.Option("--root", metavar="PATH", help=ROOT_HELP, show_default="the global --root")


StatsOpt = Annotated[
    bool, typer.Option("--stats", help="Per-type engine stats and CRIU-style counters.")
]
JSON_HELP = "Print JSON instead of text (its shape: docs/cli.md)."
JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
TimingsOpt = Annotated[
    bool, typer.Option("--timings", help="Every phase and counter as a table, not one line.")
]
IgnoreCgroupsOpt = Annotated[
    bool, typer.Option("--ignore-cgroups", help="Run without a cgroup (no quota, no freeze).")
]
GoOpt = Annotated[
    bool, typer.Option("--go/--no-go", help="Print Go benchmark lines for benchstat.")
]
MemoryOpt = Annotated[
    bool, typer.Option("--memory/--no-memory", help="Measure peak traced memory.")
]


def workdir_opt(what: str) -> Any:
    """``--dir PATH``: where a benchmark writes ``what``, a temporary directory if unset."""
    return typer.Option(
        "--dir", metavar="PATH", help=f"Where {what} go.", show_default="a temporary directory"
    )


def sandbox_root() -> Any:
    """The checked ``paths.Root`` of ``--root`` (imported on use: start-up stays lean)."""
    from ckpt.sandbox.wire import paths

    return paths.Root(Globals.root or default_root()).check()


def lifecycle() -> Any:
    """``ckpt.sandbox.client.lifecycle``, imported on use so other commands start fast."""
    from ckpt.sandbox.client import lifecycle

    return lifecycle
