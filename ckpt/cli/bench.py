"""``ckpt bench``: the benchmark suites, one group made of two modules' commands
(``bench_engine``: in-process suites; ``bench_sandbox``: suites that run sandboxes)."""

from __future__ import annotations

import typer

from ckpt.cli import bench_engine, bench_sandbox

bench_app = typer.Typer(help="Benchmark suites (rich table, --json, Go benchmark lines).")
bench_app.registered_commands += bench_engine.commands.registered_commands
bench_app.registered_commands += bench_sandbox.commands.registered_commands


def register(app: typer.Typer) -> None:
    """Add ``ckpt bench`` to ``app``."""
    app.add_typer(bench_app, name="bench")
