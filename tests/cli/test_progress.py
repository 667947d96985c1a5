"""The status line of a slow command: drawn on a terminal once the wait lasts, never
for a quick command, with --json or into a pipe; its text never breaks the command."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

from rich.console import Console

from ckpt.cli import progress
from ckpt.cli.progress import Status


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=80), out


def test_a_long_wait_shows_its_text_and_the_seconds(watchdog) -> None:
    console, out = _terminal()
    shown = threading.Event()

    def text() -> str:
        shown.set()
        return "round 1, pre-copy"

    with Status(text, enabled=True, delay=0.0, console=console):
        assert shown.wait(30)
    assert "round 1, pre-copy · 0 s" in out.getvalue()


def test_a_countdown_shows_no_seconds_waited(watchdog) -> None:
    status = Status(lambda: "relaying: 5 s left", enabled=True, elapsed=False)
    assert status.line() == "relaying: 5 s left"


def test_a_quick_command_draws_nothing(watchdog) -> None:
    console, out = _terminal()
    with Status(lambda: "never", enabled=True, delay=30.0, console=console):
        pass
    assert out.getvalue() == ""


def test_disabled_draws_nothing_and_starts_no_thread(watchdog) -> None:
    console, out = _terminal()
    status = Status(lambda: "never", enabled=False, delay=0.0, console=console)
    with status:
        pass
    assert status._thread is None and out.getvalue() == ""


def test_a_failing_text_does_not_break_the_command() -> None:
    def broken() -> str:
        raise KeyError("gone")

    assert Status(broken, enabled=False).line().startswith("working · ")


def test_wanted_only_for_text_on_a_terminal() -> None:
    assert progress.wanted(json_out=True) is False
    probe = "import sys; from ckpt.cli.progress import wanted; print(wanted(False))"
    piped = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert piped.stdout.strip() == "False"  # stderr is a pipe here


def test_run_says_how_much_memory_the_sandbox_holds_once_recorded(tmp_path) -> None:
    from ckpt.cli.sandbox import _starting
    from ckpt.sandbox.wire.paths import Root, SandboxState, now_iso

    root = Root(tmp_path)
    text = _starting(root, "big", "kv:256")
    assert text() == "starting big (kv:256)"  # no record yet
    root.dir("big").mkdir(parents=True)
    root.write(SandboxState("big", os.getpid(), "creating", "kv:256", None, now_iso()))
    line = text()
    assert line.startswith("starting big (kv:256): ") and line.endswith(" MiB resident")
