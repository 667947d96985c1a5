"""Sandbox lifecycle commands: run, list, state, pause, resume, kill, delete,
checkpoint, restore, and cycle (checkpoint/restore repeated, engines interleaved).

Each command parses its options, calls ``ckpt.sandbox.client.lifecycle`` (imported on use) and
prints through ``ckpt.cli.output``.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from ckpt.cli.options import (
    Compression,
    CpuOpt,
    Engine,
    EngineOpt,
    IdArg,
    IgnoreCgroupsOpt,
    ImagePathOpt,
    JsonOpt,
    KeyOpt,
    StatsOpt,
    TimingsOpt,
    bridge_opt,
    lifecycle,
    port_opt,
    sandbox_root,
)
from ckpt.cli.output import emit_json, err, error_line, note, result, say, tables
from ckpt.errors import CkptError, UsageError

commands = typer.Typer()


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``, at its top level."""
    app.registered_commands += commands.registered_commands


@commands.command("run")
def run_cmd(
    sandbox_id: IdArg,
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            "-w",
            metavar="WORKLOAD",
            help="empty, http, nginx, files:N, graph:N, kv:N, memory:N (MiB) or "
            "memory:N@RATE (rewriting RATE bytes a second, K/M/G: memory:256@200M).",
        ),
    ],
    cpu: CpuOpt = "uncapped",
    port: Annotated[int, port_opt()] = 0,
    engine: Annotated[
        Engine | None,
        typer.Option(
            "--engine",
            help="Default engine for its checkpoints.",
            show_default="native where built, else typed",
        ),
    ] = None,
    ignore_cgroups: IgnoreCgroupsOpt = False,
    json_out: JsonOpt = False,
    bridge: Annotated[str | None, bridge_opt()] = None,
    ip: Annotated[
        str | None,
        typer.Option("--ip", metavar="ADDR/PREFIX", help="The sandbox's address (with --bridge)."),
    ] = None,
) -> None:
    """Start a sandbox running WORKLOAD, detached.

    Returns when it is ready to serve.
    """
    from ckpt.cli.progress import Status, wanted

    root = sandbox_root()
    starting = Status(_starting(root, sandbox_id, workload), enabled=wanted(json_out))
    with starting:
        res = lifecycle().run(
            root,
            sandbox_id,
            workload,
            cpus=lifecycle().parse_cpu(cpu),
            port=port,
            engine=engine.value if engine else None,
            ignore_cgroups=ignore_cgroups,
            bridge=bridge,
            ip=ip,
        )
    for text in res.notes:
        note(text)
    if json_out:
        emit_json({**res.state.to_json(), "timings": res.timings.as_dict()})
        return
    where = f", serving http://{res.state.address}/" if res.state.address else ""
    say(f"sandbox {res.state.id} running (pid {res.state.pid}{where})")


def _starting(root: Any, sandbox_id: str, workload: str) -> Callable[[], str]:
    """What ``run``'s status line says while a workload builds its state (``kv:256``
    takes seconds): how much memory the sandbox holds so far, once its process is
    recorded."""
    from ckpt.sandbox.client import procfs

    def text() -> str:
        head = f"starting {sandbox_id} ({workload})"
        try:
            pid = root.read(sandbox_id).pid
        except CkptError:
            return head
        size = procfs.resident(pid) if pid else None
        return f"{head}: {size / (1 << 20):.0f} MiB resident" if size else head

    return text


class ListFormat(enum.Enum):
    TABLE = "table"
    JSON = "json"


@commands.command("list")
def list_cmd(
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print the IDs only.")] = False,
    fmt: Annotated[
        ListFormat, typer.Option("--format", help="Output format (--json: json).")
    ] = ListFormat.TABLE,
) -> None:
    """List sandboxes under the root."""
    root = sandbox_root()
    if quiet:
        for sandbox_id in root.ids():
            say(sandbox_id)
        return
    states = lifecycle().list_sandboxes(root)
    if json_out or fmt is ListFormat.JSON:
        emit_json([st.to_json() for st in states])
    else:
        from ckpt.sandbox.client.render import sandboxes_table

        tables([sandboxes_table(states)])


@commands.command("state")
def state_cmd(sandbox_id: IdArg, json_out: JsonOpt = False) -> None:
    """Print a sandbox's record as JSON, with or without --json.

    Its id, pid, status, workload, cgroup, created and address.  A stopped sandbox's
    record says why in extra.stopped: its reason (checkpointed, killed, exited) and
    exit code or signal.
    """
    from ckpt.sandbox.client.status import refresh  # not lifecycle: what the verbs need

    emit_json(refresh(sandbox_root(), sandbox_id).to_json())


def _record(sandbox_id: str, **extra: object) -> None:
    """The sandbox's record as it is now, with ``extra`` keys: what ``--json`` prints
    for a command that acts on one sandbox."""
    emit_json({**lifecycle().state(sandbox_root(), sandbox_id).to_json(), **extra})


@commands.command("pause")
def pause_cmd(sandbox_id: IdArg, json_out: JsonOpt = False) -> None:
    """Freeze a sandbox; HTTP requests wait until resume."""
    lifecycle().pause(sandbox_root(), sandbox_id)
    if json_out:
        _record(sandbox_id)
        return
    say(f"sandbox {sandbox_id} paused")


@commands.command("resume")
def resume_cmd(sandbox_id: IdArg, json_out: JsonOpt = False) -> None:
    """Thaw a paused sandbox."""
    lifecycle().resume(sandbox_root(), sandbox_id)
    if json_out:
        _record(sandbox_id)
        return
    say(f"sandbox {sandbox_id} running")


OptIdArg = Annotated[
    str | None,
    typer.Argument(
        metavar="ID",
        help="Sandbox ID: its name under the root (not with --all).",
        show_default=False,
    ),
]
AllOpt = Annotated[bool, typer.Option("--all", help="Every sandbox under the root.")]


def _each(outcomes: list, done: str, verb: str, json_out: bool, **extra: object) -> None:
    """One line per sandbox of ``--all`` (or one JSON object listing them), then one
    error for those that failed."""
    from ckpt.sandbox.client import control

    if json_out:
        emit_json(
            {
                "sandboxes": [
                    {"id": o.id, **extra, "error": None if o.error is None else str(o.error)}
                    for o in outcomes
                ]
            }
        )
    for o in outcomes:
        if o.error is None and not json_out:
            say(f"sandbox {o.id} {done}")
        elif o.error is not None:
            sys.stderr.write(error_line(f"{o.id}: {o.error}") + "\n")
    control.failed(outcomes, verb)


def _one_id(sandbox_id: str | None, all_: bool) -> str:
    if all_ == (sandbox_id is not None):
        raise typer.BadParameter("give either a sandbox ID or --all", param_hint="ID")
    return sandbox_id or ""


@commands.command("kill")
def kill_cmd(
    sandbox_id: OptIdArg = None,
    signal_name: Annotated[
        str | None,
        typer.Argument(metavar="SIGNAL", help="TERM, SIGTERM, 15...", show_default="KILL"),
    ] = None,
    all_: AllOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Send a signal to a sandbox (KILL unless told).

    KILL stops every process of it and frees its cgroup; its state stays, as stopped.
    Another signal goes to its process alone.  With --all: every sandbox not stopped,
    and the one argument is the SIGNAL.
    """
    from ckpt.sandbox.client import control

    if all_:  # the one argument is the SIGNAL
        if sandbox_id is not None and signal_name is not None:
            raise typer.BadParameter("with --all, give the SIGNAL only", param_hint="ID")
        sandbox_id, signal_name = None, signal_name or sandbox_id
    signo = control.parse_signal(signal_name or "KILL")
    name = control.short_name(signo)
    done = "stopped" if name == "KILL" else f"sent {name}"
    if all_:
        outcomes = control.kill_all(sandbox_root(), signo)
        _each(outcomes, done, f"kill {name}", json_out, signal=name)
        return
    sandbox_id = _one_id(sandbox_id, all_)
    control.kill(sandbox_root(), sandbox_id, signo)
    if json_out:
        _record(sandbox_id, signal=name)
        return
    say(f"sandbox {sandbox_id} {done}")


@commands.command("delete")
def delete_cmd(
    sandbox_id: OptIdArg = None,
    force: Annotated[bool, typer.Option("--force", help="Kill it first if running.")] = False,
    all_: AllOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Remove a sandbox: its process (with --force), cgroup, files.

    With --all: every stopped sandbox (and the others too with --force).
    """
    sandbox_id = _one_id(sandbox_id, all_)
    if all_:
        from ckpt.sandbox.client import control

        outcomes = control.delete_all(sandbox_root(), force=force)
        _each(outcomes, "deleted", "delete", json_out)
        return
    lifecycle().delete(sandbox_root(), sandbox_id, force=force)
    if json_out:
        emit_json({"id": sandbox_id, "status": "deleted"})
        return
    say(f"sandbox {sandbox_id} deleted")


@commands.command("checkpoint")
def checkpoint_cmd(
    sandbox_id: IdArg,
    image_path: ImagePathOpt,
    leave_running: Annotated[
        bool, typer.Option("--leave-running", help="Keep the sandbox running afterwards.")
    ] = False,
    compression: Annotated[
        Compression, typer.Option("--compression", help="Page compression.")
    ] = Compression.ZSTD,
    compression_level: Annotated[
        int | None, typer.Option("--compression-level", metavar="LEVEL", help="zstd level.")
    ] = None,
    engine: EngineOpt = None,
    stats: StatsOpt = False,
    key_file: KeyOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing image.")] = False,
    force_children: Annotated[
        bool,
        typer.Option(
            "--force-children",
            help="With --force, replace an image even if images beside it name it as "
            "their parent (they stop restoring).",
        ),
    ] = False,
    drain_timeout: Annotated[
        float,
        typer.Option(
            "--drain-timeout",
            min=0.0,
            metavar="SECONDS",
            help="Seconds accepted requests may take to finish before the sandbox stops; "
            "past it the checkpoint fails and the sandbox goes on serving.",
        ),
    ] = 10.0,
    pre_dump: Annotated[
        bool,
        typer.Option(
            "--pre-dump",
            help="Write memory pages only (all, or those dirtied since --parent-path); "
            "the sandbox keeps serving.",
        ),
    ] = False,
    parent_path: Annotated[
        str | None,
        typer.Option(
            "--parent-path",
            metavar="PATH",
            help="The last image taken of this sandbox: write only the pages dirtied "
            "since it, and link to it (an s3:// one in the image's repository).",
        ),
    ] = None,
    pre_copy: Annotated[
        bool,
        typer.Option(
            "--pre-copy",
            help="Copy memory in rounds while serving, then freeze briefly for the rest.",
        ),
    ] = False,
    encrypt: Annotated[
        bool,
        typer.Option(
            "--encrypt",
            help="Encrypt the image (AES-256-GCM) with the --key-file key; restore and "
            "inspect then need that key.  In an object store its chunks still deduplicate "
            "between images of one key.",
        ),
    ] = False,
    timings: TimingsOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Checkpoint a sandbox into an image.

    The sandbox stops afterwards unless --leave-running.
    """
    from ckpt.sandbox.client import precopy_options

    if compression is Compression.NONE and compression_level is not None:
        raise UsageError(
            "--compression-level sets the zstd level: drop it, or use --compression zstd"
        )
    from ckpt.images import Location

    where = Location.parse(image_path)  # decided once, here
    options = precopy_options.cli_options(pre_dump, parent_path, pre_copy, where)
    if encrypt:
        if key_file is None:
            raise UsageError("--encrypt seals the image with a key: pass --key-file PATH")
        options["encrypt"] = True
    res = lifecycle().checkpoint(
        sandbox_root(),
        sandbox_id,
        where,
        leave_running=leave_running,
        compression=compression.value,
        level=compression_level,
        engine=engine.value if engine else None,
        stats=stats,
        key=lifecycle().read_key(key_file),
        force=force,
        drain_timeout=drain_timeout,
        options=options,
        force_children=force_children,
    )
    if json_out:
        emit_json(
            {
                **res.state.to_json(),
                "image": str(res.image),
                "timings": res.timings.as_dict(),
                "stats": res.stats,
                **({"rounds": res.rounds} if res.rounds else {}),
            }
        )
        return
    headline = f"checkpoint of {sandbox_id} written to {res.image} (sandbox {res.state.status})"
    result(headline, res, title="checkpoint timings", table=timings, stats=stats)


@commands.command("restore")
def restore_cmd(
    sandbox_id: IdArg,
    image_path: ImagePathOpt,
    cpu: CpuOpt = "uncapped",
    engine: EngineOpt = None,
    stats: StatsOpt = False,
    background: Annotated[
        bool, typer.Option("--background", help="Load memory pages lazily in the background.")
    ] = False,
    key_file: KeyOpt = None,
    port: Annotated[int | None, port_opt("the saved port")] = None,
    ignore_cgroups: IgnoreCgroupsOpt = False,
    timings: TimingsOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Restore an image into a new sandbox.

    A new sandbox process, under an optional CPU quota.
    """
    from ckpt.images import Location

    res = lifecycle().restore(
        sandbox_root(),
        sandbox_id,
        Location.parse(image_path),
        cpus=lifecycle().parse_cpu(cpu),
        engine=engine.value if engine else None,
        stats=stats,
        background=background,
        key=lifecycle().read_key(key_file),
        port=port,
        ignore_cgroups=ignore_cgroups,
    )
    for text in res.notes:
        note(text)
    if json_out:
        emit_json(
            {
                **res.state.to_json(),
                "image": image_path,
                "timings": res.timings.as_dict(),
                "stats": res.stats,
            }
        )
        return
    where = f", serving http://{res.state.address}/" if res.state.address else ""
    headline = f"sandbox {sandbox_id} restored (pid {res.state.pid}{where})"
    result(headline, res, title="restore timings", table=timings, stats=stats)


@commands.command("cycle")
def cycle_cmd(
    sandbox_id: IdArg,
    image_path: Annotated[
        Path,
        typer.Option("--image-path", metavar="PATH", help="Directory for the cycles' images."),
    ],
    count: Annotated[int, typer.Option("--count", min=1, help="Cycles per engine and quota.")] = 5,
    cpu: Annotated[
        str,
        typer.Option("--cpu", metavar="CPUS", help="Comma-separated quotas, e.g. uncapped,1,0.25."),
    ] = "uncapped",
    hold: Annotated[
        float,
        typer.Option("--hold", min=0.0, metavar="SECONDS", help="Seconds to wait between cycles."),
    ] = 0.0,
    engines: Annotated[
        str | None,
        typer.Option(
            "--engines",
            metavar="ENGINES",
            help="Comma-separated engines; the first is the baseline.",
            show_default="reflect,typed, and native where it is built",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Checkpoint/restore a sandbox repeatedly.

    A running sandbox, its engines interleaved ABBA.
    """
    from ckpt.bench import cycle

    if engines is None:
        from ckpt.state import native_status

        engines = "reflect,typed,native" if native_status()[0] else "reflect,typed"
    plan = cycle.Plan.parse(
        sandbox_id, image_path, count=count, cpu=cpu, hold=hold, engines=engines
    )
    report = cycle.run(sandbox_root(), plan, console=None if json_out else err.real())
    if json_out:
        emit_json(report.to_json())
        return
    tables([cycle.render(report)], cycle.go_lines(report))
