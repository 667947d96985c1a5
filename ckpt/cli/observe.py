"""Commands that watch a sandbox or the host: ps, events, wait, logs, and check.

Each parses its options, calls ``ckpt.sandbox.client.observe``, ``logs`` or ``hostcheck``
(imported on use) and prints through ``ckpt.cli.output``.  A stream (``events``,
``logs -f``) ends when the sandbox does, or quietly on Ctrl-C.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ckpt.cli.base import Globals, default_root
from ckpt.cli.options import IdArg, JsonOpt, sandbox_root
from ckpt.cli.output import emit_json, emit_json_line, say, tables

commands = typer.Typer()


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``, at its top level."""
    app.registered_commands += commands.registered_commands


@commands.command("ps")
def ps_cmd(sandbox_id: IdArg, json_out: JsonOpt = False) -> None:
    """List the tasks of a sandbox's kernel."""
    from ckpt.sandbox.client import observe

    reply = observe.tasks(sandbox_root(), sandbox_id)
    if json_out:
        emit_json({"id": sandbox_id, **observe.task_json(reply)})
        return
    from ckpt.sandbox.client.render import tasks_table

    tables([tasks_table(reply)])


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
    json_out: JsonOpt = False,
) -> None:
    """Stream a sandbox's CPU, memory and kernel figures.

    One JSON line per interval until the sandbox stops or Ctrl-C, with or without
    --json; --stats prints one and exits.
    """
    from ckpt.sandbox.client import observe

    try:
        for event in observe.events(
            sandbox_root(), sandbox_id, interval=interval, count=1 if stats else count
        ):
            emit_json_line(event)
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
    json_out: JsonOpt = False,
) -> None:
    """Wait until a sandbox stops; print how it ended."""
    from ckpt.sandbox.client import observe
    from ckpt.sandbox.client.status import status_text

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
    json_out: JsonOpt = False,
) -> None:
    """Print a sandbox's log (its process's output).

    With --json: one JSON line per line of the log, {"id": ID, "line": TEXT}.
    """
    import codecs

    from ckpt.cli.output import printable_lines
    from ckpt.sandbox.client import logs

    decode = codecs.getincrementaldecoder("utf-8")("backslashreplace").decode
    out = sys.stdout
    lines = _JsonLines(sandbox_id) if json_out else None
    try:
        for chunk in logs.read(sandbox_root(), sandbox_id, follow=follow):
            if lines is not None:
                lines.feed(decode(chunk))
                continue
            out.write(printable_lines(decode(chunk)))
            out.flush()
    except KeyboardInterrupt:
        pass
    if lines is not None:
        lines.close()


class _JsonLines:
    """A log as JSON lines: text arrives in chunks that may end mid-line, so a line
    is printed once its newline has come (and what is left, at the end)."""

    def __init__(self, sandbox_id: str) -> None:
        self.sandbox_id = sandbox_id
        self.pending = ""

    def feed(self, text: str) -> None:
        *complete, self.pending = (self.pending + text).split("\n")
        for line in complete:
            emit_json_line({"id": self.sandbox_id, "line": line})

    def close(self) -> None:
        if self.pending:
            emit_json_line({"id": self.sandbox_id, "line": self.pending})
            self.pending = ""


@commands.command("check")
def check_cmd(json_out: JsonOpt = False) -> None:
    """Say what this host supports.

    cgroups and CPU quotas, the native engine, the template, network namespaces and
    tc, and whether an object store is configured: each ok or missing, and why.
    """
    from ckpt.sandbox.client import hostcheck

    items = hostcheck.check(Globals.root or default_root())
    if json_out:
        emit_json({"items": [item.to_json() for item in items]})
        return
    from ckpt.sandbox.client.render import check_table

    tables([check_table(items)])
