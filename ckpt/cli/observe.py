"""Commands that watch a sandbox or the host: ps, events, wait, logs, and check.

Each parses its options, calls ``ckpt.sandbox.observe``, ``logs`` or ``hostcheck``
(imported on use) and prints through ``ckpt.cli.output``.  A stream (``events``,
``logs -f``) ends when the sandbox does, or quietly on Ctrl-C.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ckpt.cli.base import Globals, default_root
from ckpt.cli.options import IdArg, JsonDocOpt, sandbox_root
from ckpt.cli.output import emit_json, say, tables

commands = typer.Typer()


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``, at its top level."""
    app.registered_commands += commands.registered_commands


@commands.command("ps")
def ps_cmd(sandbox_id: IdArg, json_out: JsonDocOpt = False) -> None:
    """List the tasks of a sandbox's kernel."""
    from ckpt.sandbox import observe

    reply = observe.tasks(sandbox_root(), sandbox_id)
    if json_out:
        emit_json(observe.task_json(reply))
        return
    from ckpt.sandbox.render import tasks_table

    tables([tasks_table(reply)])


def _line(document: object) -> None:
    """One JSON document on one line (a stream's record), flushed at once."""
    say(json.dumps(document, ensure_ascii=False, separators=(",", ":"), default=str))


@commands.command("events")
def events_cmd(
    sandbox_id: IdArg,
    interval: Annotated[
        float,
        typer.Option("--interval", min=0.05, metavar="SECONDS", help="Seconds between samples."),
    ] = 5.0,
    stats: Annotated[bool, typer.Option("--stats", help="Print one sample and exit.")] = False,
    count: Annotated[
        int | None,
        typer.Option("--count", min=1, metavar="N", help="Stop after N samples."),
    ] = None,
) -> None:
    """Stream a sandbox's CPU, memory and kernel figures.

    One JSON line per interval until the sandbox stops or Ctrl-C; --stats prints one
    and exits.
    """
    from ckpt.sandbox import observe

    try:
        for event in observe.events(
            sandbox_root(), sandbox_id, interval=interval, count=1 if stats else count
        ):
            _line(event)
    except KeyboardInterrupt:
        return


@commands.command("wait")
def wait_cmd(
    sandbox_id: IdArg,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0.0,
            metavar="SECONDS",
            help="Give up after this long (exit 124).",
            show_default="wait until it exits",
        ),
    ] = None,
    json_out: JsonDocOpt = False,
) -> None:
    """Wait until a sandbox stops; print how it ended."""
    from ckpt.sandbox import observe
    from ckpt.sandbox.status import status_text

    st = observe.wait(sandbox_root(), sandbox_id, timeout)
    if json_out:
        emit_json(observe.exit_json(st))
        return
    say(f"sandbox {sandbox_id} {status_text(st)}")


@commands.command("logs")
def logs_cmd(
    sandbox_id: IdArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the sandbox stops.")
    ] = False,
) -> None:
    """Print a sandbox's log (its process's output)."""
    import codecs

    from ckpt.cli.output import printable_lines
    from ckpt.sandbox import logs

    decode = codecs.getincrementaldecoder("utf-8")("backslashreplace").decode
    out = sys.stdout
    try:
        for chunk in logs.read(sandbox_root(), sandbox_id, follow=follow):
            out.write(printable_lines(decode(chunk)))
            out.flush()
    except KeyboardInterrupt:
        return


@commands.command("check")
def check_cmd(json_out: JsonDocOpt = False) -> None:
    """Say what this host supports.

    cgroups and CPU quotas, the native engine, the template, network namespaces and
    tc, and whether an object store is configured: each ok or missing, and why.
    """
    from ckpt.sandbox import hostcheck

    items = hostcheck.check(Globals.root or default_root())
    if json_out:
        emit_json({"items": [item.to_json() for item in items]})
        return
    from ckpt.sandbox.render import check_table

    tables([check_table(items)])
