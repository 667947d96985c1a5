"""``ckpt template status|start|stop``: the warm template of a root, a process that
forks sandboxes ready-made (``ckpt.sandbox.template_client`` does the work)."""

from __future__ import annotations

import typer

from ckpt.cli.options import JsonOpt, sandbox_root
from ckpt.cli.output import emit_json, say

template_app = typer.Typer(
    help="The warm sandbox template: a process per root that forks sandboxes ready-made."
)


def register(app: typer.Typer) -> None:
    """Add ``ckpt template`` to ``app``."""
    app.add_typer(template_app, name="template")


@template_app.command("status")
def template_status_cmd(json_out: JsonOpt = False) -> None:
    """Show the root's template: pid, code version, uptime, sandboxes forked, memory."""
    from ckpt.sandbox import template_client

    root = sandbox_root().path
    info = template_client.status(root)
    if json_out:
        emit_json({"running": info is not None, **(info or {})})
        return
    if info is None:
        say(f"no template serving {root} (the next run or restore starts one)")
        return
    say(
        f"template pid {info['pid']} serving {root}: version {info['version']}, "
        f"up {info['uptime_s']:.0f} s, {info['spawned']} sandboxes forked, "
        f"{info['rss_kib'] / 1024:.0f} MiB, warmed in "
        f"{info.get('import_ms', 0) + info.get('build_ms', 0):.0f} ms"
    )


@template_app.command("start")
def template_start_cmd() -> None:
    """Start the root's template now (run and restore otherwise start it on demand)."""
    from ckpt.sandbox import template_client

    root = sandbox_root().path
    if template_client.status(root) is None:
        template_client.start(root, wait=True)
    info = template_client.status(root) or {}
    say(f"template pid {info.get('pid')} serving {root}")


@template_app.command("stop")
def template_stop_cmd() -> None:
    """Stop the root's template.  Sandboxes it forked keep running."""
    from ckpt.sandbox import template_client

    root = sandbox_root().path
    if template_client.stop(root):
        say(f"template of {root} stopped")
    else:
        say(f"no template serving {root}")
