"""The global ``--log-level``, ``--log-file`` and ``--log-format`` options.

stdlib logging, configured once by the root callback and only when one of them (or
``--debug``) is given: importing ``logging`` costs a command more start-up than most of
them spend on their work, so a command run without these options never imports it.

What is logged, under the ``ckpt`` logger:

- the command line, at debug;
- ``ckpt serve``'s lines (connections, migrations), at info: with logging configured
  they are records in the chosen format and place instead of plain lines on stderr;
- every ``note:`` (warning) and ``error:`` (error, with its traceback under ``--debug``)
  when ``--log-file`` is given.  These stay on stderr as the one line a user reads
  whatever the options; the file gets them too, so it tells the whole story.

Every message is escaped as printed text is (``output.printable``): a record may carry
what a peer sent.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Any

LOGGER = "ckpt"


class Level(enum.Enum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Format(enum.Enum):
    TEXT = "text"
    JSON = "json"


class _State:
    """Whether logging was configured, and whether to a file (set once, by
    ``configure``)."""

    active = False
    to_file = False


def active() -> bool:
    """Whether a log is configured: records are written somewhere."""
    return _State.active


def to_file() -> bool:
    """Whether the log goes to ``--log-file`` (so notes and errors are copied into it)."""
    return _State.to_file


def configure(
    level: Level | None, file: Path | None, fmt: Format | None, *, debug: bool = False
) -> None:
    """Set up the ``ckpt`` logger when any option asks for a log; else do nothing.

    The level is ``--log-level``, else debug under ``--debug``, else info: a log was
    asked for, so what ``serve`` says belongs in it."""
    if level is None and file is None and fmt is None and not debug:
        return
    import logging

    chosen = level or (Level.DEBUG if debug else Level.INFO)
    handler = logging.StreamHandler(_open_log(file) if file is not None else sys.stderr)
    handler.setFormatter(_formatter(fmt))
    logger = logging.getLogger(LOGGER)
    logger.handlers[:] = [handler]
    logger.setLevel(chosen.value.upper())
    logger.propagate = False
    _State.active = True
    _State.to_file = file is not None


def _open_log(path: Path) -> Any:
    """``--log-file``, opened for appending (made 0600 if new).  Opened without
    blocking, so a FIFO planted there is refused rather than waited on; a directory,
    FIFO or socket is refused, a regular file or a terminal taken."""
    import os
    import stat

    from ckpt.errors import UsageError

    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise UsageError(f"--log-file {path}: cannot open it ({exc.strerror})") from exc
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
        os.close(fd)
        raise UsageError(f"--log-file {path}: not a regular file; give a file's path")
    os.set_blocking(fd, True)
    return open(fd, "a", encoding="utf-8", errors="backslashreplace", buffering=1)


def log(level: Level, message: str, *, exc_info: bool = False, name: str = LOGGER) -> None:
    """One record, when a log is configured; nothing (and no import) otherwise."""
    if not _State.active:
        return
    import logging

    logging.getLogger(name).log(
        logging.getLevelName(level.value.upper()), message, exc_info=exc_info
    )


def _formatter(fmt: Format | None) -> Any:
    """The formatter of ``--log-format``; every message escaped as printed text is."""
    import logging
    import time

    from ckpt.cli.output import json_line, printable_lines

    class Text(logging.Formatter):
        """``2026-12-07T03:21:43Z INFO ckpt.serve: message``."""

        converter = time.gmtime

        def format(self, record: logging.LogRecord) -> str:
            return printable_lines(super().format(record))

    class Json(logging.Formatter):
        """One JSON object a line: ``time``, ``level``, ``logger``, ``message`` and,
        for an error under ``--debug``, ``traceback``."""

        def format(self, record: logging.LogRecord) -> str:
            document = {
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)),
                "level": record.levelname.lower(),
                "logger": record.name,
                "message": record.getMessage(),
            }
            if record.exc_info:
                document["traceback"] = self.formatException(record.exc_info)
            return json_line(document)

    if fmt is Format.JSON:
        return Json()
    return Text("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%SZ")
