"""``ckpt template status|start|stop``: the warm template of a root, a process that
forks sandboxes ready-made (``ckpt.sandbox.client.template_client`` does the work)."""

from __future__ import annotations

from typing import Any

import typer

from ckpt.cli.options import JsonOpt, sandbox_root
from ckpt.cli.output import emit_json, say

template_app = typer.Typer(help="The warm template that forks sandboxes ready-made.")


def register(app: typer.Typer) -> None:
    """Add ``ckpt template`` to ``app``."""
    app.add_typer(template_app, name="template")


@template_app.command("status")
def template_status_cmd(json_out: JsonOpt = False) -> None:
    """Show the root's template: pid, version, uptime, forks, memory."""
    from ckpt.sandbox.client import template_client

    root = sandbox_root().path
    info = template_client.status(root)
    if json_out:
        emit_json(_template_json(root, info))
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


def _template_json(root: object, info: dict[str, Any] | None, **extra: object) -> dict:
    """What ``template status|start|stop --json`` print: whether a template serves the
    root, the root, then what the template says of itself (pid, version, ...)."""
    return {"running": info is not None, "root": str(root), **(info or {}), **extra}


@template_app.command("start")
def template_start_cmd(json_out: JsonOpt = False) -> None:
    """Start the root's template now.

    run and restore otherwise start it when they first need it.
    """
    from ckpt.sandbox.client import template_client

    root = sandbox_root().path
    if template_client.status(root) is None:
        template_client.start(root, wait=True)
    info = template_client.status(root)
    if json_out:
        emit_json(_template_json(root, info))
        return
    say(f"template pid {(info or {}).get('pid')} serving {root}")


@template_app.command("stop")
def template_stop_cmd(json_out: JsonOpt = False) -> None:
    """Stop the root's template; sandboxes it forked keep running."""
    from ckpt.sandbox.client import template_client

    root = sandbox_root().path
    stopped = template_client.stop(root)
    if json_out:
        emit_json(_template_json(root, None, stopped=stopped))
    elif stopped:
        say(f"template of {root} stopped")
    else:
        say(f"no template serving {root}")
