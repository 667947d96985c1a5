"""``ckpt bench`` suites of the engines and the image format, in-process: state,
state-scale, instructions, statefile, cgroup-stat, checkpointfile.

Each command runs ``ckpt.bench.<suite>`` (imported on use) and prints either one JSON
document or its tables followed by Go benchmark lines for benchstat.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ckpt.cli.options import GoOpt, JsonOpt, MemoryOpt, workdir_opt
from ckpt.cli.output import emit_json, tables

commands = typer.Typer()


@commands.command("state")
def bench_state(
    count: Annotated[int, typer.Option("--count", "-n", help="Repetitions per benchmark.")] = 5,
    filter: Annotated[
        str | None,
        typer.Option("--filter", "-f", help="Only benchmarks whose name/variant contains this."),
    ] = None,
    graph_nodes: Annotated[
        int, typer.Option("--graph-nodes", metavar="N", help="Nodes in the random graph.")
    ] = 20000,
    quick: Annotated[
        bool, typer.Option("--quick", help="A short run: --count 3, no memory pass.")
    ] = False,
    json_out: JsonOpt = False,
    go: GoOpt = True,
) -> None:
    """Save and load shapes: typed, reflect and two pickles.

    Each benchmark shape is saved and loaded with typed, reflect, C pickle and
    pure-Python pickle.
    Repetitions are interleaved (A B, B A, ...); figures are medians.  Ratios compare
    each variant with reflect; the targets table checks each ratio against its goal.
    """
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
        emit_json(doc)
        return
    tables(
        [
            harness.render(results, baseline="reflect", title="ckpt bench state"),
            state_bench.render_targets(targets),
        ],
        harness.go_lines(results, prefix="State/") if go else (),
    )


@commands.command("state-scale")
def bench_state_scale(
    sizes: Annotated[
        str,
        typer.Option(
            "--sizes",
            metavar="SIZES",
            help="Graph sizes in nodes, comma-separated (100k, 1M work).",
        ),
    ] = "20000,100000,400000",
    engines: Annotated[
        str,
        typer.Option(
            "--engines",
            metavar="ENGINES",
            help="Engines, comma-separated (pickle = C pickle).",
            show_default="native where built, typed, reflect, pickle",
        ),
    ] = "",
    count: Annotated[int, typer.Option("--count", "-n", help="Repetitions per size.")] = 3,
    memory: Annotated[
        bool, typer.Option("--memory/--no-memory", help="Also trace peak memory (untimed pass).")
    ] = True,
    json_out: JsonOpt = False,
    go: GoOpt = True,
) -> None:
    """Engine cost against graph size.

    Time per node, peak memory and stream size.

    The random graph of `bench state` at each size (default 20k, 100k and
    400k nodes; add 1M with --sizes 20k,100k,400k,1M), engines interleaved.
    Times are medians per node; "growth" divides by the smallest size's
    figure (flat means linear).  Peak memory is tracemalloc's peak of one
    save and one load in a separate untimed pass (not RSS).  C pickle runs
    at the default recursion limit; where it fails the table says so.
    Its own command, not a `bench state` option: a 1M round takes minutes.
    """
    from ckpt.bench import state_scale

    points = state_scale.run(
        state_scale.parse_sizes(sizes),
        state_scale.parse_engines(engines),
        count=count,
        memory=memory,
        progress=True,
    )
    if json_out:
        emit_json(state_scale.to_json(points))
        return
    tables([state_scale.render(points)], state_scale.go_lines(points) if go else ())


@commands.command("instructions")
def bench_instructions_cmd(
    filter: Annotated[
        str | None,
        typer.Option("--filter", "-f", help="Only benchmarks whose name contains this."),
    ] = None,
    variants: Annotated[
        str,
        typer.Option(
            "--variants",
            metavar="VARIANTS",
            help="Engines to count, comma-separated.",
            show_default="native where built, typed, reflect, pickle",
        ),
    ] = "",
    ops: Annotated[
        int | None,
        typer.Option(
            "--ops",
            min=1,
            metavar="N",
            help="Counted operations per case.",
            show_default="5; 1 on 20k-node graphs",
        ),
    ] = None,
    graph_nodes: Annotated[
        int, typer.Option("--graph-nodes", min=1, metavar="N", help="Nodes in the graph shapes.")
    ] = 20000,
    json_out: JsonOpt = False,
    go: GoOpt = True,
) -> None:
    """Instructions per operation, counted by callgrind.

    The benchmarks of `bench state`, each counted by callgrind.

    Each case runs in its own interpreter under valgrind; only the operations are
    counted (not imports, building the shape or the warm-up), so the figures are the
    same on any host and in any run.  A full run takes about 20 minutes on 2 cores;
    -f narrows it.  Needs valgrind and an interpreter that keeps its symbols.
    """
    from ckpt.bench import instructions

    names = instructions.benchmark_names(graph_nodes, filter)
    chosen = [v for v in variants.split(",") if v] or list(instructions.VARIANTS)
    counts = instructions.run(
        names,
        chosen,
        ops=ops,
        graph_nodes=graph_nodes,
        progress=None if json_out else (lambda line: print(line, file=sys.stderr, flush=True)),
    )
    if json_out:
        emit_json(instructions.to_json(counts))
        return
    tables(instructions.render(counts), instructions.go_lines(counts) if go else ())


@commands.command("statefile")
def bench_statefile_cmd(
    count: Annotated[int, typer.Option("--count", min=1, help="Repetitions per case.")] = 3,
    size_mib: Annotated[
        int, typer.Option("--size-mib", min=1, metavar="MIB", help="MiB of stream data per shape.")
    ] = 100,
    pages_mib: Annotated[
        int | None,
        typer.Option(
            "--pages-mib",
            min=1,
            metavar="MIB",
            help="MiB of pages.",
            show_default="64, less if --size-mib < 100",
        ),
    ] = None,
    memory: MemoryOpt = True,
    workdir: Annotated[Path | None, workdir_opt("the files")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Image write/read MB/s and CPU against a file copy.

    Also the cost of zero pages.
    """
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
        emit_json(doc)
        return
    tables(
        [
            harness.render(res["results"], baseline="copy", title="bench statefile"),
            bench_sf.render_summary(res["summary"], res["pages"]),
        ],
        harness.go_lines(res["results"], prefix="Statefile"),
    )


@commands.command("cgroup-stat")
def bench_cgroup_stat(
    count: Annotated[int, typer.Option("--count", "-n", help="Repetitions per reader.")] = 10,
    batch: Annotated[
        int,
        typer.Option(
            "--batch", metavar="N", help="stat() calls per timed sample (figures are per call)."
        ),
    ] = 200,
    json_out: JsonOpt = False,
) -> None:
    """cgroup stat(): the lean reader against a naive one.

    Read on a live process's real cgroup.

    Needs root and a cgroup filesystem.  Goals (after containerd's cgroup2 Stat
    allocation work): at least 40% less time and 40% fewer allocated blocks than the
    naive reader.
    """
    from ckpt.bench import cgroup_stat, harness

    suite = cgroup_stat.run_suite(count=count, batch=batch, progress=not json_out)
    if json_out:
        emit_json(cgroup_stat.to_json(suite))
        return
    tables(
        [harness.render(suite["results"], baseline="naive", title="ckpt bench cgroup-stat")],
        [*cgroup_stat.summary_lines(suite), *harness.go_lines(suite["results"], prefix="Cgroup/")],
    )


@commands.command("checkpointfile")
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
    workers: Annotated[
        int, typer.Option("--workers", min=1, metavar="N", help="nginx workers.")
    ] = 4,
    memory: MemoryOpt = True,
    json_out: JsonOpt = False,
) -> None:
    """Re-encode an nginx kernel; stats on against off.

    Decode and re-encode an idle nginx kernel from its image, typed against reflect;
    and files:N save/load with per-type stats on against off.
    """
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
        emit_json(doc)
        return
    shown = []
    if res["checkpointfile"]:
        title = "ckpt bench checkpointfile (nginx, idle)"
        shown += [
            harness.render(res["checkpointfile"], baseline="reflect", title=title),
            checkpointfile.render_sizes(res["sizes"]),
        ]
    if res["stats"]:
        shown.append(
            harness.render(res["stats"], baseline="stats-off", title="per-type stats cost")
        )
    shown.append(checkpointfile.render_targets(res["targets"]))
    lines = harness.go_lines(res["checkpointfile"], prefix="CheckpointFile/")
    lines += harness.go_lines(res["stats"], prefix="Stats/")
    tables(shown, lines)
