"""The ``ckpt`` command line: typer commands that parse options and call library code.

Commands hold no logic of their own.  Library code raises ``CkptError`` and never
prints; ``main`` is the one place that renders errors: a single ``error: ...`` line
on stderr and a non-zero exit, with the traceback only under ``--debug``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ckpt import __version__
from ckpt.errors import CkptError

app = typer.Typer(
    name="ckpt",
    help="Checkpoint and restore sandboxes running a simulated kernel, fast.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
bench_app = typer.Typer(help="Benchmark suites (rich table, --json, Go benchmark lines).")
inspect_app = typer.Typer(help="Show what an image holds.")
app.add_typer(bench_app, name="bench")
app.add_typer(inspect_app, name="inspect")

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class Globals:
    """Options given before the command, shared by every command."""

    debug: bool = False
    root: Path | None = None


def default_root() -> Path:
    """``$CKPT_ROOT``, else ``/run/ckpt`` as root, else ``$XDG_RUNTIME_DIR/ckpt``."""
    if env := os.environ.get("CKPT_ROOT"):
        return Path(env)
    if os.geteuid() == 0:
        return Path("/run/ckpt")
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/ckpt-{os.getuid()}"
    return Path(runtime) / "ckpt"


def version_callback(value: bool) -> None:
    if value:
        out.print(f"ckpt {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            help="Directory holding one subdirectory per sandbox "
            "(default: $CKPT_ROOT, else /run/ckpt as root, else $XDG_RUNTIME_DIR/ckpt).",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Checkpoint and restore sandboxes running a simulated kernel, fast."""
    Globals.debug = debug
    Globals.root = root or default_root()


def main() -> None:
    """Console-script entry point: run the app, render CkptError as one line.

    Click's standalone mode handles usage errors (exit 2) and Ctrl-C itself; every
    other exception propagates here, where a CkptError becomes one line on stderr.
    """
    Globals.debug = "--debug" in sys.argv[1:]
    try:
        app(standalone_mode=True)
    except CkptError as exc:
        if Globals.debug:
            err.print_exception()
        err.print(f"error: {exc}", markup=False)
        sys.exit(exc.exit_code)


# --- state engine commands (ckpt/state) -------------------------------------------


# --- statefile commands (ckpt/statefile) ------------------------------------------


# --- cgroup commands (ckpt/cgroups) -----------------------------------------------


# --- kernel commands (ckpt/kernel) ------------------------------------------------


# --- sandbox lifecycle commands (ckpt/sandbox) ------------------------------------


if __name__ == "__main__":
    main()
