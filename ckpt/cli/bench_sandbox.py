"""``ckpt bench`` suites that drive real sandboxes: lifecycle, frozen, load, scale,
store.

Each command runs ``ckpt.bench.<suite>`` (imported on use) and prints either one JSON
document or its tables followed by Go benchmark lines for benchstat.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ckpt.cli.options import JsonOpt, workdir_opt
from ckpt.cli.output import say, suite_report

commands = typer.Typer()


@commands.command("lifecycle")
def bench_lifecycle_cmd(
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="Timed rounds.")] = 5,
    workloads: Annotated[
        str, typer.Option("--workloads", metavar="WORKLOADS", help="Comma-separated workloads.")
    ] = "http,nginx",
    cpu: Annotated[
        str, typer.Option("--cpu", metavar="CPUS", help="Comma-separated quotas.")
    ] = "uncapped,0.25",
    only: Annotated[
        str | None,
        typer.Option(
            "--commands",
            metavar="COMMANDS",
            help="Only these, comma-separated (run, checkpoint, restore, state).",
            show_default="all",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Each CLI command timed as a whole process.

    From exec to exit, against `python -c pass`.

    run (cold and from the template), checkpoint, restore (template and cold) and state,
    per workload and CPU quota, rounds interleaved; medians and spread.  Needs root for
    quotas other than uncapped.
    """
    from ckpt.bench import lifecycle

    report = lifecycle.run(
        count=count,
        workloads=[w for w in workloads.split(",") if w],
        quotas=[q for q in cpu.split(",") if q],
        commands=only.split(",") if only else None,
        progress=not json_out,
    )
    suite_report(lifecycle, report, json_out)


@commands.command("frozen")
def bench_frozen_cmd(
    sizes: Annotated[
        str, typer.Option("--sizes", metavar="SIZES", help="Comma-separated MiB sizes.")
    ] = "64,256,1024",
    kinds: Annotated[
        str,
        typer.Option(
            "--workloads", metavar="WORKLOADS", help="memory, kv or both, comma-separated."
        ),
    ] = "memory,kv",
    modes: Annotated[
        str,
        typer.Option(
            "--modes",
            metavar="MODES",
            help="Comma-separated, of stop, leave-running, pre-copy, chain.",
        ),
    ] = "stop,leave-running,pre-copy,chain",
    rate: Annotated[
        int,
        typer.Option("--rate", min=4096, metavar="BYTES", help="kv write load, bytes a second."),
    ] = 2 << 20,
    plot_path: Annotated[
        Path | None,
        typer.Option(
            "--plot", metavar="FILE", help="Also draw frozen time against size to FILE.png."
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Frozen time, longest request and lost writes per mode.

    Also total time and image size.

    memory:N and kv:N at each size, loaded by a client on 127.0.0.1 while the
    checkpoint runs; each image is restored and every acknowledged write read back.
    """
    from ckpt.bench import frozen, scale
    from ckpt.bench.harness import mib_sizes

    plot_to = scale.check_plot(plot_path) if plot_path is not None else None
    report = frozen.run(
        mib_sizes(sizes),
        [k for k in kinds.split(",") if k],
        [m for m in modes.split(",") if m],
        rate,
        progress=None if json_out else (lambda text: say(f"  {text}")),
    )
    if plot_to is not None:
        frozen.plot(report, plot_to)
    suite_report(frozen, report, json_out)


@commands.command("load")
def bench_load_cmd(
    clients: Annotated[
        int, typer.Option("--clients", min=1, metavar="N", help="Concurrent clients.")
    ] = 8,
    cycles: Annotated[
        int,
        typer.Option("--cycles", min=1, metavar="N", help="Checkpoint/restore cycles per mode."),
    ] = 8,
    modes: Annotated[
        str,
        typer.Option("--modes", metavar="MODES", help="template, cold, or both (comma-separated)."),
    ] = "template,cold",
    json_out: JsonOpt = False,
) -> None:
    """Checkpoint/restore cycles under real HTTP clients.

    The clients keep an http sandbox busy across the cycles.

    Requests answered, refused and dropped, latency, and the server's count against the
    clients', with the warm template (socket handover) and without.  127.0.0.1 only."""
    from ckpt.bench import load

    chosen = tuple(m.strip() for m in modes.split(",") if m.strip())
    if not chosen or any(m not in ("template", "cold") for m in chosen):
        from ckpt.bench.harness import BenchError

        raise BenchError(f"--modes {modes!r}: give template, cold, or both")
    report = load.run(clients=clients, cycles=cycles, modes=chosen, progress=not json_out)
    suite_report(load, report, json_out)


@commands.command("scale")
def bench_scale_cmd(
    files: Annotated[
        str,
        typer.Option(
            "--files", metavar="SIZES", help="files:N sizes, comma-separated ('' to skip)."
        ),
    ] = "1000,10000,100000",
    graphs: Annotated[
        str,
        typer.Option(
            "--graphs", metavar="SIZES", help="graph:N sizes, comma-separated ('' to skip)."
        ),
    ] = "1000,4000,16000,100000",
    memory: Annotated[
        str,
        typer.Option("--memory", metavar="SIZES", help="memory:N sizes in MiB, comma-separated."),
    ] = "16,64,256,1024",
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="Repetitions per size.")] = 1,
    workdir: Annotated[Path | None, workdir_opt("sandboxes and images")] = None,
    plot_path: Annotated[
        Path | None,
        typer.Option(
            "--plot", metavar="FILE", help="Also draw cost against size to FILE.png (needs [plot])."
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Checkpoint and restore cost against size.

    Object count and memory size, in real sandboxes.
    """
    from ckpt.bench import scale

    plot_to = scale.check_plot(plot_path) if plot_path is not None else None
    res = scale.run(
        scale.parse_sizes(files, "files"),
        scale.parse_sizes(graphs, "graphs"),
        scale.parse_sizes(memory, "memory"),
        count=count,
        workdir=workdir,
        progress=True,
    )
    if plot_to is not None:
        sys.stderr.write(f"plot written to {scale.plot(res, plot_to)}\n")
    suite_report(scale, res, json_out)


@commands.command("store")
def bench_store_cmd(
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            metavar="WORKLOAD",
            help="memory:N (its digest is checked), nginx, ...",
        ),
    ] = "memory:64",
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="Rounds.")] = 3,
    netns: Annotated[
        bool, typer.Option("--netns", help="Put the store behind a shaped veth.")
    ] = False,
    rate: Annotated[
        str, typer.Option("--rate", metavar="RATE", help="The link's tc rate.")
    ] = "1gbit",
    delay_ms: Annotated[
        float,
        typer.Option("--delay-ms", metavar="MS", min=0, help="Relay delay each way."),
    ] = 5.0,
    json_out: JsonOpt = False,
) -> None:
    """A local image directory against S3.

    A SeaweedFS is started for the run; the same sandbox goes to each.

    Checkpoint wall, upload MB/s, restore wall and first response (eager and
    --background), and the bytes a second checkpoint of the unchanged sandbox uploads;
    medians; rich table, --json, Go benchmark lines.  --netns: the store in a network
    namespace, behind a veth shaped to --rate and a relay adding --delay-ms each way.
    """
    from ckpt.bench import store

    link = store.Link(rate, delay_ms) if netns else None
    report = store.run(workload=workload, count=count, link=link)
    suite_report(store, report, json_out, width=80)
