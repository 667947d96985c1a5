"""Everything the CLI prints goes through here: plain lines, notes, JSON documents,
rich tables, and the result of a checkpoint or restore with its timings and stats.

One place, so every command says things the same way: user data is written as is
(no markup, no wrapping), a JSON document is one indented document on stdout, and
rich (~35 ms to import) is loaded only when a table is actually drawn.

Strings printed here may come from a file, a record, a manifest or a peer: every one
goes through ``printable``, so a control character (an ESC or C1 CSI that would clear
the screen or move the cursor) reaches the terminal as a visible escape, never raw.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any, Protocol

from ckpt.cli import logconfig


class _LazyConsole:
    """A rich Console made on first use: most commands print a line or a JSON
    document, which need none of rich."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    def real(self) -> Any:
        """The rich Console itself, for code that takes one (progress bars, the demo)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


# C0, DEL and C1: every character a terminal may act on rather than show
_CONTROLS = (*range(0x20), 0x7F, *range(0x80, 0xA0))
_ESCAPES = {c: f"\\x{c:02x}" for c in _CONTROLS} | {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
# A line of output keeps its tabs (Go benchmark lines are tab-separated) and the
# newlines between its lines; neither is an escape sequence.
_LINE_ESCAPES = {c: e for c, e in _ESCAPES.items() if c not in (0x09, 0x0A)}
# In a JSON document C0 is already escaped by json; DEL and C1 as JSON escapes
_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in _CONTROLS if c >= 0x7F}


def printable(text: object) -> str:
    """``text`` with every control character (C0, DEL, C1) shown as an escape such as
    ``\\x1b``: what came from a file or a peer is shown, never acted on."""
    return str(text).translate(_ESCAPES)


def printable_lines(text: str) -> str:
    """``text`` escaped as ``printable`` does, but keeping its tabs and newlines: lines
    read from a file (a sandbox's log) are shown as lines, never acted on."""
    return text.translate(_LINE_ESCAPES)


def error_line(exc: object) -> str:
    """The one line that renders a ``CkptError``: ``error: MESSAGE``, escaped."""
    return f"error: {printable(exc)}"


out: Any = _LazyConsole(highlight=False)
err: Any = _LazyConsole(stderr=True, highlight=False)


def say(text: str) -> None:
    """One line of user data on stdout, as is (no markup, no wrapping), flushed: a
    line a command prints before a long wait (``migrate --forward``) must show now."""
    sys.stdout.write(printable_lines(text) + "\n")
    sys.stdout.flush()


def note(text: str) -> None:
    """A remark about how a command ran, on stderr so stdout stays data (and in the
    ``--log-file``, when there is one)."""
    sys.stderr.write(f"note: {printable(text)}\n")
    if logconfig.to_file():
        logconfig.log(logconfig.Level.WARNING, text)


def log_line(text: str) -> None:
    """One line of a long-running command's log (``ckpt serve``) on stderr, flushed:
    it may carry what a peer sent, so it is ``printable``.  With a log configured
    (``--log-file``, ``--log-format``...) it is a record of that log instead."""
    if logconfig.active():
        logconfig.log(logconfig.Level.INFO, text, name="ckpt.serve")
        return
    sys.stderr.write(printable(text) + "\n")
    sys.stderr.flush()


def emit_json(document: object) -> None:
    """One JSON document on stdout, indented; non-ASCII text stays readable, control
    characters are JSON escapes."""
    text = json.dumps(document, indent=2, ensure_ascii=False, default=str)
    say(text.translate(_JSON_ESCAPES))


def json_line(document: object) -> str:
    """``document`` as JSON on one line; control characters are JSON escapes, as in
    ``emit_json``."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"), default=str)
    return text.translate(_JSON_ESCAPES)


def emit_json_line(document: object) -> None:
    """One JSON document on one line (a stream's record), flushed at once."""
    say(json_line(document))


def tables(
    renderables: Iterable[Any], lines: Iterable[str] = (), *, width: int | None = None
) -> None:
    """Rich tables at the terminal's width (at most ``width``), then plain ``lines``
    unwrapped (Go benchmark lines for benchstat, paths that must stay whole).

    A table too wide for the terminal folds what does not fit onto more lines; rich
    would cut it with an ellipsis, and a cut name is a name nobody can read."""
    console = out
    if width is not None:
        from rich.console import Console

        console = Console(highlight=False, width=min(width, Console().width))
    for renderable in renderables:
        console.print(_folding(renderable))
    for line in lines:
        say(line)


class Suite(Protocol):
    """A benchmark suite module as the bench commands print it."""

    def render(self, report: Any) -> Any: ...
    def go_lines(self, report: Any) -> list[str]: ...
    def to_json(self, report: Any) -> Any: ...


def suite_report(suite: Suite, report: Any, json_out: bool, *, width: int | None = None) -> None:
    """A suite's report as one JSON document, or as its table and Go benchmark lines:
    the same last step for every ``ckpt bench`` command that drives sandboxes."""
    if json_out:
        emit_json(suite.to_json(report))
        return
    tables([suite.render(report)], suite.go_lines(report), width=width)


def _folding(renderable: Any) -> Any:
    """``renderable``, with every column of every table in it that would cut its text
    (rich's default overflow) folding it instead, and every string in it ``printable``
    (rich passes an ESC or a C1 character through to the terminal)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if isinstance(renderable, Table):
        for attr in ("title", "caption"):  # line by line: a caption's lines stay lines
            value = getattr(renderable, attr)
            if isinstance(value, str):
                value = "\n".join(printable(line) for line in value.split("\n"))
            else:
                value = _printable_cell(value, Text)
            setattr(renderable, attr, value)
        for column in renderable.columns:
            if column.overflow == "ellipsis" and not column.no_wrap:
                column.overflow = "fold"
            column.header = _printable_cell(column.header, Text)
            column._cells[:] = [_folding(_printable_cell(c, Text)) for c in column._cells]
    elif isinstance(renderable, Group):
        for i, inner in enumerate(renderable.renderables):
            renderable.renderables[i] = _folding(_printable_cell(inner, Text))
    return renderable


def _printable_cell(cell: Any, text_type: type) -> Any:
    """A table cell (a string or a rich ``Text``) with its control characters escaped."""
    if isinstance(cell, str):
        return printable(cell)
    if isinstance(cell, text_type) and cell.plain != printable(cell.plain):
        cell.plain = printable(cell.plain)
    return cell


class Result(Protocol):
    """What ``lifecycle.checkpoint`` and ``lifecycle.restore`` return, as read here."""

    timings: Any
    stats: dict[str, Any] | None
    stats_text: str | None


def result(headline: str, res: Result, *, title: str, table: bool, stats: bool) -> None:
    """A checkpoint's or restore's outcome: the headline, then its timings on one line,
    or as a table with ``table`` or ``stats``, then the engine's per-type stats."""
    say(headline)
    if not (table or stats):
        say("  " + res.timings.summary())
        return
    from ckpt.sandbox.client import render

    shown = [render.timings_table(title, res.timings)]
    if stats:
        shown.append(render.stats_renderable(res.stats, res.stats_text))
    tables(shown)
