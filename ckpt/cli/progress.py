"""A status line on stderr while a command waits on something slow.

``run`` of a large workload, a migration's rounds, ``--forward``'s relay: each can take
seconds with nothing printed.  ``Status`` shows what is happening, refreshed a few times
a second, but only when stderr is a terminal and the command prints text (never with
``--json``, never into a pipe or a log), and only once the wait has lasted ``delay``
seconds: a command that ends sooner draws nothing and imports nothing (rich costs tens
of milliseconds).  The line is transient: it is gone when the command prints its result.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

REFRESH_S = 0.25
DELAY_S = 1.0


def wanted(json_out: bool) -> bool:
    """Show a status line: text output, to a terminal."""
    return not json_out and sys.stderr.isatty()


class Status:
    """``with Status(text, enabled=...):`` shows ``text()`` (with the seconds waited)
    on stderr until the block ends; ``text`` is called from another thread, so it
    reads plain attributes and never raises."""

    def __init__(
        self,
        text: Callable[[], str],
        *,
        enabled: bool,
        delay: float = DELAY_S,
        elapsed: bool = True,
        console: Any = None,
    ) -> None:
        self.text = text
        self.enabled = enabled
        self.delay = delay
        self.elapsed = elapsed  # add the seconds waited (not for a countdown)
        self.console = console  # tests pass one; else rich's, on stderr
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()

    def line(self) -> str:
        """What is shown: the text and the seconds waited so far."""
        try:
            text = self.text()
        except Exception:  # a status line never breaks the command it describes
            text = "working"
        return f"{text} · {time.monotonic() - self._t0:.0f} s" if self.elapsed else text

    def __enter__(self) -> Status:
        self._t0 = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._show, name="ckpt-status", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _show(self) -> None:
        if self._done.wait(self.delay):
            return
        from rich.text import Text  # plain text: a "[" in an ID is not markup

        from ckpt.cli.output import printable

        console = self.console
        if console is None:
            from rich.console import Console

            console = Console(stderr=True)

        def shown_line() -> Text:  # one line: cut short, never wrapped
            return Text(printable(self.line()), no_wrap=True, overflow="ellipsis")

        with console.status(shown_line()) as shown:
            while not self._done.wait(REFRESH_S):
                shown.update(shown_line())
