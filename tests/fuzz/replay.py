"""Run saved inputs through a fuzz target without atheris (for the AddressSanitizer pass).

    python -m tests.fuzz.replay TARGET PATH... [--current FILE] [--timeout S]

Each PATH is an input file or a directory of them (a libFuzzer corpus).  Every input
must end in a value or a CkptError (``targets.py``); a finding prints the target's
message and the input, and the exit status is 1.  A hang past ``--timeout`` seconds is
a finding too.  A sanitizer report aborts the process itself: ``--current FILE`` holds
the path of the input being run, so the caller can name (and print) the culprit.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .run import describe
from .targets import TARGETS, Finding


class Hang(Exception):
    """An input ran past the per-input time limit."""


def inputs(paths: list[Path]) -> Iterator[Path]:
    """Every file named or held (not recursively) by ``paths``, sorted per directory."""
    for p in paths:
        if p.is_dir():
            yield from sorted(f for f in p.iterdir() if f.is_file())
        elif p.is_file():
            yield p


def replay(target: str, paths: list[Path], current: Path | None, timeout: float) -> int:
    """Run every input; return the number of findings (each printed to stderr)."""
    run = TARGETS[target]

    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"no result after {timeout:g} s")

    signal.signal(signal.SIGALRM, fire)
    status = os.open(current, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if current else -1
    findings = count = 0
    started = last = time.monotonic()
    try:
        for path in inputs(paths):
            data = path.read_bytes()
            if status >= 0:
                os.ftruncate(status, 0)
                os.pwrite(status, os.fsencode(str(path)), 0)
            count += 1
            try:  # the timer is armed inside: a short limit may fire before run() starts
                signal.setitimer(signal.ITIMER_REAL, timeout)
                run(data)
            except (Finding, Hang) as exc:
                findings += 1
                print(f"replay {target}: FINDING in {path}: {exc}", file=sys.stderr)
                print(f"replay {target}: input: {describe(data)}", file=sys.stderr)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if time.monotonic() - last > 10:
                last = time.monotonic()
                print(f"replay {target}: {count} inputs ...", file=sys.stderr)
    finally:
        if status >= 0:
            os.close(status)
    took = time.monotonic() - started
    print(f"replay {target}: {count} inputs, {findings} findings in {took:.1f} s", file=sys.stderr)
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.replay", description=__doc__)
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--current", type=Path, help="file that names the input being run")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per input")
    args = parser.parse_args(argv)
    return 1 if replay(args.target, args.paths, args.current, args.timeout) else 0


if __name__ == "__main__":
    sys.exit(main())
