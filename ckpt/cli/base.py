"""The root ``ckpt`` app: global options, ``--version``, and ``main``, the one place
that renders errors (a single ``error: ...`` line on stderr and a non-zero exit, with
the traceback only under ``--debug``).

The command groups add themselves in ``ckpt/cli/__init__.py``.  Start-up is what a user
waits for on every command, so this module stays lean (measured with
``python -X importtime``): rich is imported only when a table is drawn, library modules
are imported by the commands that use them, and typer builds only the command being run
(see ``_pruned``).  typer is held below 0.29, which requires pydantic and imports it at
parse time.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from ckpt import __version__
from ckpt.cli import logconfig
from ckpt.errors import EXIT_CODES, CkptError


def _readable_help() -> None:
    """Help that a person reads at 80 columns, whatever typer and click would print.

    typer prints a required argument as ``{ID}`` and an option's value as its type
    (``<str>``, ``<float range>``); here an argument shows its metavar (``ID``) and an
    option its metavar, its choices (``[none|zstd]``), or else its name (``--count
    COUNT``).  Click's wrapper breaks lines at hyphens, which cut ``--leave-running``
    in two: it breaks at spaces only.
    """
    import typer._click._textwrap as textwrap  # typer 0.2x carries its own click
    import typer.core

    class SpacesOnly(textwrap.TextWrapper):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.break_on_hyphens = False

    textwrap.TextWrapper = SpacesOnly  # type: ignore[misc]

    def argument_metavar(self: Any, ctx: Any, *, usage: bool = False) -> str:
        name = self.metavar or (self.name or "").upper()
        return name if self.required or not usage else f"[{name}]"

    def option_metavar(self: Any, ctx: Any) -> str:
        if self.metavar is not None:
            return self.metavar
        choices = getattr(self.type, "choices", None)
        if choices:
            return "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"
        longest = max(self.opts, key=len, default="--value")
        return longest.lstrip("-").replace("-", "_").upper()

    typer.core.TyperArgument.make_metavar = argument_metavar  # type: ignore[method-assign]
    typer.core.TyperOption.make_metavar = option_metavar  # type: ignore[method-assign]


_readable_help()


def exit_status_text() -> str:
    """The exit codes, as ``ckpt --help`` ends: one paragraph a person reads at 80
    columns (``docs/cli.md`` has them as a table)."""
    codes = "; ".join(f"{code} {what.split(':')[0]}" for code, what in EXIT_CODES.items())
    return f"Exit status: {codes}.  Reference: docs/cli.md."


app = typer.Typer(
    name="ckpt",
    help="Checkpoint and restore sandboxes running a simulated kernel, fast.",
    epilog=exit_status_text(),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # --install-completion and --show-completion; typer imports its completion module
    # whether or not they are offered, so they cost start-up nothing
    add_completion=True,
    rich_markup_mode=None,  # plain help text: paragraphs refold to the terminal, "[x]" stays
)


ROOT_HELP = "Directory holding one subdirectory per sandbox."


class Globals:
    """Options given before the command, shared by every command."""

    debug: bool = False
    root: Path | None = None
    root_given: bool = False  # --root was on the command line, not from the environment
    settings: Any = None  # ckpt.settings.Settings: options, then the environment


def default_root() -> Path:
    """``$CKPT_ROOT``, else ``/run/ckpt`` as root, else ``$XDG_RUNTIME_DIR/ckpt``."""
    from ckpt import settings

    if given := settings.current().root:
        return Path(given)
    if os.geteuid() == 0:
        return Path("/run/ckpt")
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/ckpt-{os.getuid()}"
    return Path(runtime) / "ckpt"


def version_callback(value: bool) -> None:
    if value:
        from ckpt.state.native import native_status

        ok, why = native_status()
        sys.stdout.write(f"ckpt {__version__}\n")
        sys.stdout.write(f"native engine: {'available' if ok else 'unavailable'} ({why})\n")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks for errors; log at debug level.")
    ] = False,
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            metavar="PATH",
            help=ROOT_HELP,
            show_default="$CKPT_ROOT, else /run/ckpt as root, else $XDG_RUNTIME_DIR/ckpt",
        ),
    ] = None,
    no_template: Annotated[
        bool,
        typer.Option(
            "--no-template",
            help="Start sandboxes as fresh interpreters, not from the warm template "
            "(also CKPT_TEMPLATE=0).",
        ),
    ] = False,
    log_level: Annotated[
        logconfig.Level | None,
        typer.Option(
            "--log-level",
            metavar="LEVEL",
            help="Log records at LEVEL and above: debug, info, warning or error.",
            show_default="info with a log, debug with --debug",
        ),
    ] = None,
    log_file: Annotated[
        Path | None,
        typer.Option(
            "--log-file",
            metavar="PATH",
            help="Append the log to this file (notes and errors too).",
            show_default="stderr",
        ),
    ] = None,
    log_format: Annotated[
        logconfig.Format | None,
        typer.Option(
            "--log-format",
            metavar="FORMAT",
            help="A record as a line of text, or as a JSON object: text or json.",
            show_default="text",
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
    from ckpt import settings

    Globals.debug = debug
    # The one settings object of this command (its options, then the environment),
    # handed to the library for the command's run and taken back when it ends.
    Globals.settings = settings.load(template=False if no_template else None)
    settings.use(Globals.settings)
    ctx.call_on_close(lambda: settings.use(None))
    Globals.root = root or default_root()
    Globals.root_given = root is not None
    logconfig.configure(log_level, log_file, log_format, debug=debug)
    if logconfig.active():
        import shlex

        logconfig.log(logconfig.Level.DEBUG, "ckpt " + shlex.join(sys.argv[1:]))


_GLOBAL_OPTIONS_WITH_VALUE = {"--root", "--log-level", "--log-file", "--log-format"}


def command_path(argv: list[str]) -> list[str]:
    """The command words in ``argv`` (``["bench", "state"]``), skipping global options."""
    words: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        if arg.startswith("-"):
            i += 2 if (arg in _GLOBAL_OPTIONS_WITH_VALUE and not words) else 1
            continue
        words.append(arg)
        if len(words) == 2:
            break
        i += 1
    return words


@contextlib.contextmanager
def _pruned(typer_app: typer.Typer, words: list[str]) -> Iterator[None]:
    """While inside, ``typer_app`` holds only the command ``words`` name, so typer
    builds just that one; everything is put back on the way out.

    typer turns every registered function into a click command on each run
    (signature, resolved annotations, converters): ~2 ms a command, for ~25 commands,
    to run one.  An unknown word keeps everything, so click's own "No such command"
    and the full ``--help`` listing are unchanged.
    """
    saved: list[tuple[typer.Typer, list, list]] = []
    level = typer_app
    for name in words:
        commands = [c for c in level.registered_commands if command_name(c) == name]
        groups = [g for g in level.registered_groups if g.name == name]
        if not commands and not groups:
            break
        saved.append((level, level.registered_commands, level.registered_groups))
        level.registered_commands, level.registered_groups = commands, groups
        if not groups:
            break
        level = groups[0].typer_instance
    try:
        yield
    finally:
        for level, commands, groups in saved:
            level.registered_commands, level.registered_groups = commands, groups


def command_name(info: Any) -> str:
    """The word that runs a registered command (typer's rule: the function's name)."""
    return info.name or info.callback.__name__.replace("_", "-")


def main() -> None:
    """Console-script entry point: run the app, render CkptError as one line.

    Click's standalone mode handles usage errors (exit 2) and Ctrl-C itself; every
    other exception propagates here, where a CkptError becomes one line on stderr and
    the exit code its class states (``ckpt.errors.EXIT_CODES``).
    """
    argv = sys.argv[1:]
    Globals.debug = "--debug" in argv
    try:
        with _pruned(app, command_path(argv)):
            app(standalone_mode=True)
    except CkptError as exc:
        if Globals.debug:
            import traceback

            traceback.print_exc()
        from ckpt.cli.output import error_line

        sys.stderr.write(error_line(exc) + "\n")
        if logconfig.to_file():
            logconfig.log(logconfig.Level.ERROR, str(exc), exc_info=Globals.debug)
        sys.exit(exc.exit_code)
