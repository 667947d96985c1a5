"""``ckpt demo``: the guided tour (``ckpt.demo`` does it; imported on use)."""

from __future__ import annotations

import typer

from ckpt.cli.output import out


def demo_cmd() -> None:
    """A guided tour of ckpt.

    Run, query, checkpoint, inspect, restore under a quota, clean up.
    """
    from ckpt import demo

    demo.run(out.real())


def register(app: typer.Typer) -> None:
    """Add ``ckpt demo`` to ``app``."""
    app.command("demo")(demo_cmd)
