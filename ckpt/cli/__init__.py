"""The ``ckpt`` command line: typer commands that parse options, call library code and
print through ``output``.  Library code raises ``CkptError`` and never prints; ``main``
in ``base`` renders errors.

One module per command group, each with ``register(app)``::

    base.py           the root app, global options, --version, error rendering
    options.py        shared arguments and options: ID, --image-path, --cpu, --engine...
    output.py         the one place that prints: lines, JSON, tables, results
    logconfig.py      --log-level, --log-file, --log-format (stdlib logging, lazily)
    docgen.py         writes docs/cli.md from the commands (python3 -m ckpt.cli.docgen)
    sandbox.py        run, list, state, pause, resume, kill, delete, checkpoint,
                      restore, cycle
    observe.py        ps, events, wait, logs, check
    demo.py           demo
    bench.py          bench: the commands of bench_engine.py and bench_sandbox.py
    inspect.py        inspect statefile
    template.py       template status|start|stop
    image.py          image ls|rm|prune
    migrate.py        serve, migrate, and bench migrate

``GROUPS`` is the one place a group is added: its module name and the top-level words
it adds, in the order ``ckpt --help`` lists them (commands first, then groups).  A module
that adds a command to another group (``bench migrate``) also claims that group's word
and comes after it.
``main`` imports only the group that owns the command being run, so a command group
costs nothing to the others' start-up; ``app`` (``from ckpt.cli import app``) is the
whole CLI, every group registered, for tests and ``--help``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from ckpt.cli import base

GROUPS: dict[str, tuple[str, ...]] = {
    "sandbox": (
        "run",
        "list",
        "state",
        "pause",
        "resume",
        "kill",
        "delete",
        "checkpoint",
        "restore",
        "cycle",
    ),
    "observe": ("ps", "events", "wait", "logs", "check"),
    "demo": ("demo",),
    "bench": ("bench",),
    "inspect": ("inspect",),
    "template": ("template",),
    "image": ("image",),
    "migrate": ("serve", "migrate", "bench"),
}

_loaded: set[str] = set()


def load(word: str | None = None) -> Any:
    """The root app with every group that adds or extends the top-level ``word``
    registered, or every group when ``word`` is None or no group claims it (click then
    says "No such command" and lists them all).

    Each group registers once, in ``GROUPS`` order (a group that extends another comes
    after it), and the root's commands are kept in that order, so ``--help`` lists them
    the same way whatever was loaded first."""
    wanted = {name for name, words in GROUPS.items() if word in words} or set(GROUPS)
    for name in GROUPS:
        if name in wanted and name not in _loaded:
            _loaded.add(name)
            importlib.import_module(f"ckpt.cli.{name}").register(base.app)
    order = [w for words in GROUPS.values() for w in words]

    def rank(word: str | None) -> int:
        return order.index(word) if word in order else len(order)

    base.app.registered_commands.sort(key=lambda info: rank(base.command_name(info)))
    base.app.registered_groups.sort(key=lambda info: rank(info.name))
    return base.app


def __getattr__(name: str) -> Any:
    """``ckpt.cli.app``: the whole CLI, built on first use (PEP 562)."""
    if name == "app":
        return load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point: register what the command line needs, then run.

    ``--version`` alone needs no command; an empty command line or ``--help`` lists
    them all."""
    argv = sys.argv[1:]
    words = base.command_path(argv)
    if words:
        load(words[0])
    elif "--version" not in argv:
        load()
    base.main()


__all__ = ["GROUPS", "app", "load", "main"]
