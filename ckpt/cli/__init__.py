"""The ``ckpt`` command line: typer commands that parse options, call library code and
print through ``output``.  Library code raises ``CkptError`` and never prints; ``main``
renders errors.

One module per command group, each with ``register(app)``::

    base.py           the root app, global options, --version, main (error rendering)
    options.py        shared arguments and options: ID, --image-path, --cpu, --engine...
    output.py         the one place that prints: lines, JSON, tables, results
    sandbox.py        run, list, state, pause, resume, kill, delete, checkpoint,
                      restore, cycle
    demo.py           demo
    bench.py          bench: the commands of bench_engine.py and bench_sandbox.py
    inspect.py        inspect statefile
    template.py       template status|start|stop
    image.py          image ls|rm|prune

``GROUPS`` is the one place a group is added: a new module with ``register(app)`` goes
into it.  ``ckpt --help`` lists commands in this order (top-level commands, then groups).
"""

from __future__ import annotations

from ckpt.cli import bench, demo, image, inspect, sandbox, template
from ckpt.cli.base import app, main

GROUPS = (sandbox, demo, bench, inspect, template, image)

for _group in GROUPS:
    _group.register(app)

__all__ = ["GROUPS", "app", "main"]
