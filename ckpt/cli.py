"""The ``ckpt`` command line: typer commands that parse options and call library code.

Commands hold no logic of their own.  Library code raises ``CkptError`` and never
prints; ``main`` is the one place that renders errors: a single ``error: ...`` line
on stderr and a non-zero exit, with the traceback only under ``--debug``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer
from rich.console import Console

from ckpt import __version__
from ckpt.errors import CkptError
from ckpt.sandbox import paths as sandbox_paths

app = typer.Typer(
    name="ckpt",
    help="Checkpoint and restore sandboxes running a simulated kernel, fast.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
bench_app = typer.Typer(help="Benchmark suites (rich table, --json, Go benchmark lines).")
inspect_app = typer.Typer(help="Show what an image holds.")
app.add_typer(bench_app, name="bench")
app.add_typer(inspect_app, name="inspect")

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class Globals:
    """Options given before the command, shared by every command."""

    debug: bool = False
    root: Path | None = None


def default_root() -> Path:
    """``$CKPT_ROOT``, else ``/run/ckpt`` as root, else ``$XDG_RUNTIME_DIR/ckpt``."""
    if env := os.environ.get("CKPT_ROOT"):
        return Path(env)
    if os.geteuid() == 0:
        return Path("/run/ckpt")
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/ckpt-{os.getuid()}"
    return Path(runtime) / "ckpt"


def version_callback(value: bool) -> None:
    if value:
        out.print(f"ckpt {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            help="Directory holding one subdirectory per sandbox "
            "(default: $CKPT_ROOT, else /run/ckpt as root, else $XDG_RUNTIME_DIR/ckpt).",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Checkpoint and restore sandboxes running a simulated kernel, fast."""
    Globals.debug = debug
    Globals.root = root or default_root()


def main() -> None:
    """Console-script entry point: run the app, render CkptError as one line.

    Click's standalone mode handles usage errors (exit 2) and Ctrl-C itself; every
    other exception propagates here, where a CkptError becomes one line on stderr.
    """
    Globals.debug = "--debug" in sys.argv[1:]
    try:
        app(standalone_mode=True)
    except CkptError as exc:
        if Globals.debug:
            err.print_exception()
        err.print(f"error: {exc}", markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)


# --- state engine commands (ckpt/state) -------------------------------------------


@bench_app.command("state")
def bench_state(
    count: Annotated[int, typer.Option("--count", "-n", help="Repetitions per benchmark.")] = 5,
    filter: Annotated[
        str | None,
        typer.Option("--filter", "-f", help="Only benchmarks whose name/variant contains this."),
    ] = None,
    graph_nodes: Annotated[
        int, typer.Option("--graph-nodes", help="Nodes in the random graph.")
    ] = 20000,
    quick: Annotated[
        bool, typer.Option("--quick", help="A short run: --count 3, no memory pass.")
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON document instead of tables.")
    ] = False,
    go: Annotated[
        bool, typer.Option("--go/--no-go", help="Print Go benchmark lines for benchstat.")
    ] = True,
) -> None:
    """Save and load benchmark shapes with typed, reflect, C pickle and pure-Python pickle.

    Repetitions are interleaved (A B, B A, ...); figures are medians.  Ratios compare
    each variant with reflect; the targets table checks BENCHMARKS.md's goals.
    """
    import json

    from ckpt.bench import harness, state_bench

    if quick:
        count = min(count, 3)
    results = state_bench.run(
        count=count, filter=filter, graph_nodes=graph_nodes, memory=not quick, progress=not json_out
    )
    targets = state_bench.target_rows(results)
    if json_out:
        doc = harness.to_json(results, baseline="reflect")
        doc["targets"] = targets
        out.print_json(json.dumps(doc))
        return
    out.print(harness.render(results, baseline="reflect", title="ckpt bench state"))
    out.print(state_bench.render_targets(targets))
    if go:
        print("\n".join(harness.go_lines(results, prefix="State/")))


# --- statefile commands (ckpt/statefile) ------------------------------------------

SfJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]


@inspect_app.command("statefile")
def inspect_statefile_cmd(
    path: Annotated[Path, typer.Argument(help="An image directory or its checkpoint.img.")],
    key_file: Annotated[
        Path | None,
        typer.Option("--key-file", help="File holding the HMAC key, to verify a signed image."),
    ] = None,
    objects: Annotated[
        int, typer.Option("--objects", min=0, help="Pretty-print the first N objects.")
    ] = 0,
    verify: Annotated[
        bool, typer.Option("--verify", help="Decode every record and check every page.")
    ] = False,
    json_out: SfJson = False,
) -> None:
    """Show an image: header, metadata, integrity, type table, pages, objects."""
    import json as _json

    from ckpt import statefile
    from ckpt.statefile.inspect import report_failed
    from ckpt.statefile.render import render_report

    key = statefile.read_key_file(str(key_file)) if key_file is not None else None
    report = statefile.inspect_image(path, key, objects=objects, verify=verify)
    if json_out:
        typer.echo(_json.dumps(report, indent=2, ensure_ascii=False, default=str))
    else:
        out.print(render_report(report))
    if report_failed(report):
        raise typer.Exit(1)


@bench_app.command("statefile")
def bench_statefile_cmd(
    count: Annotated[int, typer.Option("--count", min=1, help="Repetitions per case.")] = 3,
    size_mib: Annotated[
        int, typer.Option("--size-mib", min=1, help="MiB of stream data per shape.")
    ] = 100,
    pages_mib: Annotated[
        int | None,
        typer.Option(
            "--pages-mib", min=1, help="MiB of pages (default 64, less if --size-mib < 100)."
        ),
    ] = None,
    memory: Annotated[
        bool, typer.Option("--memory/--no-memory", help="Measure peak traced memory.")
    ] = True,
    workdir: Annotated[
        Path | None, typer.Option("--dir", help="Where to write files (default: temp dir).")
    ] = None,
    json_out: SfJson = False,
) -> None:
    """Image write/read MB/s and CPU vs a plain file copy; zero-page cost."""
    import json as _json

    from ckpt.bench import harness
    from ckpt.bench import statefile as bench_sf

    pages = pages_mib if pages_mib is not None else min(64, size_mib * 64 // 100 or 1)
    res = bench_sf.run(
        size_mib, pages, count, memory=memory, progress=not json_out, workdir=workdir
    )
    if json_out:
        doc = harness.to_json(res["results"], baseline="copy")
        doc["throughput"] = res["summary"]
        doc["pages"] = res["pages"]
        typer.echo(_json.dumps(doc, indent=2))
        return
    out.print(harness.render(res["results"], baseline="copy", title="bench statefile"))
    out.print(bench_sf.render_summary(res["summary"], res["pages"]))
    for line in harness.go_lines(res["results"], prefix="Statefile"):
        typer.echo(line)  # unwrapped, for benchstat


# --- cgroup commands (ckpt/cgroups) -----------------------------------------------


@bench_app.command("cgroup-stat")
def bench_cgroup_stat(
    count: Annotated[int, typer.Option("--count", "-n", help="Repetitions per reader.")] = 10,
    batch: Annotated[
        int, typer.Option("--batch", help="stat() calls per timed sample (figures are per call).")
    ] = 200,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON document instead of tables.")
    ] = False,
) -> None:
    """cgroup stat(): the lean reader against a naive one, on a live process's real cgroup.

    Needs root and a cgroup filesystem.  Targets (seed 003): at least 40% less time and
    40% fewer allocated blocks than the naive reader.
    """
    import json

    from ckpt.bench import cgroup_stat, harness

    suite = cgroup_stat.run_suite(count=count, batch=batch, progress=not json_out)
    if json_out:
        out.print_json(json.dumps(cgroup_stat.to_json(suite)))
        return
    out.print(harness.render(suite["results"], baseline="naive", title="ckpt bench cgroup-stat"))
    for line in cgroup_stat.summary_lines(suite):
        typer.echo(line)  # unwrapped: paths stay whole
    for line in harness.go_lines(suite["results"], prefix="Cgroup/"):
        typer.echo(line)  # unwrapped, for benchstat


# --- kernel commands (ckpt/kernel) ------------------------------------------------


@bench_app.command("checkpointfile")
def bench_checkpointfile_cmd(
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="Repetitions per case.")] = 5,
    filter: Annotated[
        str | None,
        typer.Option("--filter", "-f", help="Only cases whose name/variant contains this."),
    ] = None,
    files: Annotated[
        int,
        typer.Option("--files", min=0, help="Open files in the stats on/off case (0: skip it)."),
    ] = 20000,
    workers: Annotated[int, typer.Option("--workers", min=1, help="nginx workers.")] = 4,
    memory: Annotated[
        bool, typer.Option("--memory/--no-memory", help="Measure peak traced memory.")
    ] = True,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON document instead of tables.")
    ] = False,
) -> None:
    """Decode and re-encode an idle nginx kernel from its image, typed vs reflect;
    and files:N save/load with per-type stats on vs off (seed 001)."""
    import json as _json

    from ckpt.bench import checkpointfile, harness

    res = checkpointfile.run(
        count=count,
        filter=filter,
        files=files,
        workers=workers,
        memory=memory,
        progress=not json_out,
    )
    if json_out:
        doc = harness.to_json(res["checkpointfile"], baseline="reflect")
        doc["stats"] = harness.to_json(res["stats"], baseline="stats-off", machine=False)["results"]
        doc["sizes"] = res["sizes"]
        doc["targets"] = res["targets"]
        typer.echo(_json.dumps(doc, indent=2))
        return
    if res["checkpointfile"]:
        title = "ckpt bench checkpointfile (nginx, idle)"
        out.print(harness.render(res["checkpointfile"], baseline="reflect", title=title))
        out.print(checkpointfile.render_sizes(res["sizes"]))
    if res["stats"]:
        out.print(harness.render(res["stats"], baseline="stats-off", title="per-type stats cost"))
    out.print(checkpointfile.render_targets(res["targets"]))
    lines = harness.go_lines(res["checkpointfile"], prefix="CheckpointFile/")
    lines += harness.go_lines(res["stats"], prefix="Stats/")
    for line in lines:
        typer.echo(line)  # unwrapped, for benchstat


# --- scale (ckpt/bench/scale.py) --------------------------------------------------


@bench_app.command("scale")
def bench_scale_cmd(
    files: Annotated[
        str, typer.Option("--files", help="files:N sizes, comma-separated ('' to skip).")
    ] = "1000,10000,100000",
    graphs: Annotated[
        str, typer.Option("--graphs", help="graph:N sizes, comma-separated ('' to skip).")
    ] = "1000,4000,16000",
    memory: Annotated[
        str, typer.Option("--memory", help="memory:N sizes in MiB, comma-separated.")
    ] = "16,64,256,1024",
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="Repetitions per size.")] = 1,
    workdir: Annotated[
        Path | None, typer.Option("--dir", help="Where sandboxes and images go (default: temp).")
    ] = None,
    plot_path: Annotated[
        Path | None,
        typer.Option("--plot", help="Also draw cost against size to FILE.png (needs [plot])."),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON document instead of tables.")
    ] = False,
) -> None:
    """Checkpoint and restore cost against object count and memory size, real sandboxes."""
    import json as _json

    from ckpt.bench import scale

    res = scale.run(
        scale.parse_sizes(files, "files"),
        scale.parse_sizes(graphs, "graphs"),
        scale.parse_sizes(memory, "memory"),
        count=count,
        workdir=workdir,
        progress=True,
    )
    if plot_path is not None:
        scale.plot(res, plot_path)
    if json_out:
        typer.echo(_json.dumps(scale.to_json(res), indent=2, default=str))
        return
    out.print(scale.render(res))
    for line in scale.go_lines(res["points"]):
        typer.echo(line)  # unwrapped, for benchstat


# --- sandbox lifecycle commands (ckpt/sandbox) ------------------------------------


def _sandbox_root() -> sandbox_paths.Root:
    return sandbox_paths.Root(Globals.root or default_root())


def _lifecycle() -> ModuleType:
    """``ckpt.sandbox.lifecycle``, imported on use (psutil) so other commands start fast."""
    from ckpt.sandbox import lifecycle

    return lifecycle


def _render() -> ModuleType:
    from ckpt.sandbox import render

    return render


def _print_json(data: object) -> None:
    out.print_json(json.dumps(data))


CpuOpt = Annotated[
    str | None,
    typer.Option("--cpu", help="CPU quota in CPUs (e.g. 0.5), or 'uncapped' (default)."),
]
EngineOpt = Annotated[str | None, typer.Option("--engine", help="State engine: typed or reflect.")]
KeyOpt = Annotated[
    Path | None, typer.Option("--key-file", help="HMAC-SHA256 key for the image (raw bytes).")
]
StatsOpt = Annotated[
    bool, typer.Option("--stats", help="Per-type engine stats and CRIU-style counters.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
IgnoreCgroupsOpt = Annotated[
    bool, typer.Option("--ignore-cgroups", help="Run without a cgroup (no quota, no freeze).")
]


@app.command("run")
def run_cmd(
    sandbox_id: Annotated[str, typer.Argument(metavar="ID", help="Sandbox ID.")],
    workload: Annotated[
        str, typer.Option("--workload", "-w", help="empty, http, nginx, files:N or graph:N.")
    ],
    cpu: CpuOpt = None,
    port: Annotated[int, typer.Option("--port", help="TCP port to serve on; 0 = free.")] = 0,
    engine: Annotated[
        str, typer.Option("--engine", help="Default engine for checkpoints.")
    ] = "typed",
    ignore_cgroups: IgnoreCgroupsOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Start a detached sandbox running WORKLOAD; returns when it is ready."""
    res = _lifecycle().run(
        _sandbox_root(),
        sandbox_id,
        workload,
        cpus=_lifecycle().parse_cpu(cpu),
        port=port,
        engine=engine,
        ignore_cgroups=ignore_cgroups,
    )
    for note in res.notes:
        err.print(f"note: {note}", markup=False)
    if json_out:
        _print_json({**res.state.to_json(), "timings": res.timings.as_dict()})
        return
    where = f", serving http://{res.state.address}/" if res.state.address else ""
    out.print(f"sandbox {res.state.id} running (pid {res.state.pid}{where})", markup=False)


@app.command("list")
def list_cmd(json_out: JsonOpt = False) -> None:
    """List sandboxes under the root."""
    states = _lifecycle().list_sandboxes(_sandbox_root())
    if json_out:
        _print_json([st.to_json() for st in states])
    else:
        out.print(_render().sandboxes_table(states))


@app.command("state")
def state_cmd(sandbox_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Print a sandbox's state as JSON (id, pid, status, workload, cgroup, created, address)."""
    _print_json(_lifecycle().state(_sandbox_root(), sandbox_id).to_json())


@app.command("pause")
def pause_cmd(sandbox_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Freeze a sandbox's kernel and cgroup; HTTP requests wait until resume."""
    _lifecycle().pause(_sandbox_root(), sandbox_id)
    out.print(f"sandbox {sandbox_id} paused", markup=False)


@app.command("resume")
def resume_cmd(sandbox_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Thaw a paused sandbox."""
    _lifecycle().resume(_sandbox_root(), sandbox_id)
    out.print(f"sandbox {sandbox_id} running", markup=False)


@app.command("kill")
def kill_cmd(sandbox_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """SIGKILL a sandbox and free its cgroup (its state stays, as stopped)."""
    _lifecycle().kill(_sandbox_root(), sandbox_id)
    out.print(f"sandbox {sandbox_id} stopped", markup=False)


@app.command("delete")
def delete_cmd(
    sandbox_id: Annotated[str, typer.Argument(metavar="ID")],
    force: Annotated[bool, typer.Option("--force", help="Kill it first if running.")] = False,
) -> None:
    """Remove a sandbox: its process (with --force), cgroup and files."""
    _lifecycle().delete(_sandbox_root(), sandbox_id, force=force)
    out.print(f"sandbox {sandbox_id} deleted", markup=False)


@app.command("checkpoint")
def checkpoint_cmd(
    sandbox_id: Annotated[str, typer.Argument(metavar="ID")],
    image_path: Annotated[Path, typer.Option("--image-path", help="Image directory to write.")],
    leave_running: Annotated[
        bool, typer.Option("--leave-running", help="Keep the sandbox running afterwards.")
    ] = False,
    compression: Annotated[str, typer.Option("--compression", help="none or zstd.")] = "zstd",
    compression_level: Annotated[
        int | None, typer.Option("--compression-level", help="zstd level.")
    ] = None,
    engine: EngineOpt = None,
    stats: StatsOpt = False,
    key_file: KeyOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing image.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the timings as JSON.")] = False,
) -> None:
    """Checkpoint a sandbox into an image; it stops afterwards unless --leave-running."""
    res = _lifecycle().checkpoint(
        _sandbox_root(),
        sandbox_id,
        image_path,
        leave_running=leave_running,
        compression=compression,
        level=compression_level,
        engine=engine,
        stats=stats,
        key=_lifecycle().read_key(key_file),
        force=force,
    )
    if json_out:
        _print_json(
            {
                "id": sandbox_id,
                "image": str(res.image),
                "status": res.state.status,
                "timings": res.timings.as_dict(),
                "stats": res.stats,
            }
        )
        return
    out.print(
        f"checkpoint of {sandbox_id} written to {res.image} (sandbox {res.state.status})",
        markup=False,
    )
    out.print(_render().timings_table("checkpoint timings", res.timings))
    if stats:
        out.print(_render().stats_renderable(res.stats, res.stats_text))


@app.command("restore")
def restore_cmd(
    sandbox_id: Annotated[str, typer.Argument(metavar="ID")],
    image_path: Annotated[Path, typer.Option("--image-path", help="Image directory to load.")],
    cpu: CpuOpt = None,
    engine: EngineOpt = None,
    stats: StatsOpt = False,
    background: Annotated[
        bool, typer.Option("--background", help="Load memory pages lazily in the background.")
    ] = False,
    key_file: KeyOpt = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Listen here instead of the saved port.")
    ] = None,
    ignore_cgroups: IgnoreCgroupsOpt = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the timings as JSON.")] = False,
) -> None:
    """Restore an image into a new sandbox process under an optional CPU quota."""
    res = _lifecycle().restore(
        _sandbox_root(),
        sandbox_id,
        image_path,
        cpus=_lifecycle().parse_cpu(cpu),
        engine=engine,
        stats=stats,
        background=background,
        key=_lifecycle().read_key(key_file),
        port=port,
        ignore_cgroups=ignore_cgroups,
    )
    for note in res.notes:
        err.print(f"note: {note}", markup=False)
    if json_out:
        _print_json({**res.state.to_json(), "timings": res.timings.as_dict(), "stats": res.stats})
        return
    where = f", serving http://{res.state.address}/" if res.state.address else ""
    out.print(f"sandbox {sandbox_id} restored (pid {res.state.pid}{where})", markup=False)
    out.print(_render().timings_table("restore timings", res.timings))
    if stats:
        out.print(_render().stats_renderable(res.stats, res.stats_text))


@app.command("cycle")
def cycle_cmd(
    sandbox_id: Annotated[str, typer.Argument(metavar="ID")],
    image_path: Annotated[
        Path, typer.Option("--image-path", help="Directory for the cycles' images.")
    ],
    count: Annotated[int, typer.Option("--count", min=1, help="Cycles per engine and quota.")] = 5,
    cpu: Annotated[
        str, typer.Option("--cpu", help="Comma-separated quotas, e.g. uncapped,1,0.25.")
    ] = "uncapped",
    hold: Annotated[
        float, typer.Option("--hold", min=0.0, help="Seconds to wait between cycles.")
    ] = 0.0,
    engines: Annotated[
        str, typer.Option("--engines", help="Comma-separated engines; the first is the baseline.")
    ] = "reflect,typed",
    json_out: JsonOpt = False,
) -> None:
    """Checkpoint/restore a running sandbox repeatedly, engines interleaved ABBA."""
    from ckpt.bench import cycle

    plan = cycle.Plan.parse(
        sandbox_id, image_path, count=count, cpu=cpu, hold=hold, engines=engines
    )
    report = cycle.run(_sandbox_root(), plan, console=None if json_out else err)
    if json_out:
        _print_json(report.to_json())
        return
    out.print(cycle.render(report))
    for line in cycle.go_lines(report):
        out.print(line, markup=False, soft_wrap=True)


@app.command("demo")
def demo_cmd() -> None:
    """A guided tour: run, query, checkpoint, inspect, restore under a quota, clean up."""
    from ckpt import demo

    demo.run(out)


if __name__ == "__main__":
    main()
