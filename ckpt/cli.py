"""The ``ckpt`` command line: typer commands that parse options and call library code.

Commands hold no logic of their own.  Library code raises ``CkptError`` and never
prints; ``main`` is the one place that renders errors: a single ``error: ...`` line
on stderr and a non-zero exit, with the traceback only under ``--debug``.

Start-up is what a user waits for on every command, so this module stays lean
(measured with ``python -X importtime``): rich is imported only when a table or rule
is drawn, one-line results are written directly, library modules are imported by the
commands that use them, and typer builds only the command being run (see ``_pruned``).
typer is held below 0.29, which requires pydantic and imports it at parse time.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from ckpt import __version__
from ckpt.errors import CkptError


def _readable_help() -> None:
    """Help that a person reads at 80 columns, whatever typer and click would print.

    typer prints a required argument as ``{ID}`` and an option's value as its type
    (``<str>``, ``<float range>``); here an argument shows its metavar (``ID``) and an
    option its metavar, its choices (``[none|zstd]``), or else its name (``--count
    COUNT``).  Click's wrapper breaks lines at hyphens, which cut ``--leave-running``
    in two: it breaks at spaces only.
    """
    import typer._click._textwrap as textwrap  # typer 0.2x carries its own click
    import typer.core

    class SpacesOnly(textwrap.TextWrapper):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.break_on_hyphens = False

    textwrap.TextWrapper = SpacesOnly  # type: ignore[misc]

    def argument_metavar(self: Any, ctx: Any, *, usage: bool = False) -> str:
        name = self.metavar or (self.name or "").upper()
        return name if self.required or not usage else f"[{name}]"

    def option_metavar(self: Any, ctx: Any) -> str:
        if self.metavar is not None:
            return self.metavar
        choices = getattr(self.type, "choices", None)
        if choices:
            return "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"
        longest = max(self.opts, key=len, default="--value")
        return longest.lstrip("-").replace("-", "_").upper()

    typer.core.TyperArgument.make_metavar = argument_metavar  # type: ignore[method-assign]
    typer.core.TyperOption.make_metavar = option_metavar  # type: ignore[method-assign]


_readable_help()

app = typer.Typer(
    name="ckpt",
    help="Checkpoint and restore sandboxes running a simulated kernel, fast.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # plain help text: paragraphs refold to the terminal, "[x]" stays
)
bench_app = typer.Typer(help="Benchmark suites (rich table, --json, Go benchmark lines).")
inspect_app = typer.Typer(help="Show what an image holds.")
template_app = typer.Typer(
    help="The warm sandbox template: a process per root that forks sandboxes ready-made."
)
app.add_typer(bench_app, name="bench")
app.add_typer(inspect_app, name="inspect")
app.add_typer(template_app, name="template")


class _LazyConsole:
    """A rich Console made on first use: rich costs ~35 ms to import, and most
    commands print a line or a JSON document, which need none of it."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    def real(self) -> Any:
        """The rich Console itself, for code that takes one (progress bars, the demo)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


out: Any = _LazyConsole(highlight=False)
err: Any = _LazyConsole(stderr=True, highlight=False)


def say(text: str) -> None:
    """One line of user data on stdout, as is (no markup, no wrapping)."""
    sys.stdout.write(text + "\n")


def note(text: str) -> None:
    sys.stderr.write(f"note: {text}\n")


JsonDocOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document instead of tables.")
]


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
        from ckpt.state.native import native_status

        ok, why = native_status()
        say(f"ckpt {__version__}")
        say(f"native engine: {'available' if ok else 'unavailable'} ({why})")
        raise typer.Exit()


@app.callback()
def main_options(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            metavar="PATH",
            help="Directory holding one subdirectory per sandbox "
            "(default: $CKPT_ROOT, else /run/ckpt as root, else $XDG_RUNTIME_DIR/ckpt).",
        ),
    ] = None,
    no_template: Annotated[
        bool,
        typer.Option(
            "--no-template",
            help="Start sandboxes as fresh interpreters, not from the warm template "
            "(also CKPT_TEMPLATE=0).",
        ),
    ] = False,
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
    if no_template:
        os.environ["CKPT_TEMPLATE"] = "0"


_GLOBAL_OPTIONS_WITH_VALUE = {"--root"}


def _command_path(argv: list[str]) -> list[str]:
    """The command words in ``argv`` (``["bench", "state"]``), skipping global options."""
    words: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        if arg.startswith("-"):
            i += 2 if (arg in _GLOBAL_OPTIONS_WITH_VALUE and not words) else 1
            continue
        words.append(arg)
        if len(words) == 2:
            break
        i += 1
    return words


@contextlib.contextmanager
def _pruned(typer_app: typer.Typer, words: list[str]) -> Iterator[None]:
    """While inside, ``typer_app`` holds only the command ``words`` name, so typer
    builds just that one; everything is put back on the way out.

    typer turns every registered function into a click command on each run
    (signature, resolved annotations, converters): ~2 ms a command, for ~25 commands,
    to run one.  An unknown word keeps everything, so click's own "No such command"
    and the full ``--help`` listing are unchanged.
    """
    saved: list[tuple[typer.Typer, list, list]] = []
    level = typer_app
    for name in words:
        commands = [c for c in level.registered_commands if _name(c) == name]
        groups = [g for g in level.registered_groups if g.name == name]
        if not commands and not groups:
            break
        saved.append((level, level.registered_commands, level.registered_groups))
        level.registered_commands, level.registered_groups = commands, groups
        if not groups:
            break
        level = groups[0].typer_instance
    try:
        yield
    finally:
        for level, commands, groups in saved:
            level.registered_commands, level.registered_groups = commands, groups


def _name(info: Any) -> str:
    return info.name or info.callback.__name__.replace("_", "-")


def main() -> None:
    """Console-script entry point: run the app, render CkptError as one line.

    Click's standalone mode handles usage errors (exit 2) and Ctrl-C itself; every
    other exception propagates here, where a CkptError becomes one line on stderr.
    """
    argv = sys.argv[1:]
    Globals.debug = "--debug" in argv
    try:
        with _pruned(app, _command_path(argv)):
            app(standalone_mode=True)
    except CkptError as exc:
        if Globals.debug:
            import traceback

            traceback.print_exc()
        sys.stderr.write(f"error: {exc}\n")
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
        int, typer.Option("--graph-nodes", metavar="N", help="Nodes in the random graph.")
    ] = 20000,
    quick: Annotated[
        bool, typer.Option("--quick", help="A short run: --count 3, no memory pass.")
    ] = False,
    json_out: JsonDocOpt = False,
    go: Annotated[
        bool, typer.Option("--go/--no-go", help="Print Go benchmark lines for benchstat.")
    ] = True,
) -> None:
    """Save and load benchmark shapes with typed, reflect, C pickle and pure-Python pickle.

    Repetitions are interleaved (A B, B A, ...); figures are medians.  Ratios compare
    each variant with reflect; the targets table checks each ratio against its goal.
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


@bench_app.command("state-scale")
def bench_state_scale(
    sizes: Annotated[
        str,
        typer.Option("--sizes", help="Graph sizes in nodes, comma-separated (100k, 1M work)."),
    ] = "20000,100000,400000",
    engines: Annotated[
        str,
        typer.Option(
            "--engines",
            help="Engines, comma-separated (default: native where built, typed, "
            "reflect, pickle = C pickle).",
        ),
    ] = "",
    count: Annotated[int, typer.Option("--count", "-n", help="Repetitions per size.")] = 3,
    memory: Annotated[
        bool, typer.Option("--memory/--no-memory", help="Also trace peak memory (untimed pass).")
    ] = True,
    json_out: JsonDocOpt = False,
    go: Annotated[
        bool, typer.Option("--go/--no-go", help="Print Go benchmark lines for benchstat.")
    ] = True,
) -> None:
    """Engine cost against graph size: time per node, peak memory, stream.

    The random graph of `bench state` at each size (default 20k, 100k and
    400k nodes; add 1M with --sizes 20k,100k,400k,1M), engines interleaved.
    Times are medians per node; "growth" divides by the smallest size's
    figure (flat means linear).  Peak memory is tracemalloc's peak of one
    save and one load in a separate untimed pass (not RSS).  C pickle runs
    at the default recursion limit; where it fails the table says so.
    Its own command, not a `bench state` option: a 1M round takes minutes.
    """
    import json

    from ckpt.bench import state_scale

    points = state_scale.run(
        state_scale.parse_sizes(sizes),
        state_scale.parse_engines(engines),
        count=count,
        memory=memory,
        progress=True,
    )
    if json_out:
        out.print_json(json.dumps(state_scale.to_json(points)))
        return
    out.print(state_scale.render(points))
    if go:
        print("\n".join(state_scale.go_lines(points)))


@bench_app.command("instructions")
def bench_instructions_cmd(
    filter: Annotated[
        str | None,
        typer.Option("--filter", "-f", help="Only benchmarks whose name contains this."),
    ] = None,
    variants: Annotated[
        str,
        typer.Option(
            "--variants",
            help="Comma-separated (default: native where built, typed, reflect, pickle).",
        ),
    ] = "",
    ops: Annotated[
        int | None,
        typer.Option(
            "--ops", min=1, help="Counted operations per case (default: 5; 1 on 20k-node graphs)."
        ),
    ] = None,
    graph_nodes: Annotated[
        int, typer.Option("--graph-nodes", min=1, metavar="N", help="Nodes in the graph shapes.")
    ] = 20000,
    json_out: JsonDocOpt = False,
    go: Annotated[
        bool, typer.Option("--go/--no-go", help="Print Go benchmark lines for benchstat.")
    ] = True,
) -> None:
    """Instructions per operation of `bench state`'s benchmarks, counted by callgrind.

    Each case runs in its own interpreter under valgrind; only the operations are
    counted (not imports, building the shape or the warm-up), so the figures are the
    same on any host and in any run.  A full run takes about 20 minutes on 2 cores;
    -f narrows it.  Needs valgrind and an interpreter that keeps its symbols.
    """
    import json

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
        out.print_json(json.dumps(instructions.to_json(counts)))
        return
    for table in instructions.render(counts):
        out.print(table)
    if go:
        print("\n".join(instructions.go_lines(counts)))


# --- statefile commands (ckpt/statefile) ------------------------------------------


@inspect_app.command("statefile")
def inspect_statefile_cmd(
    path: Annotated[
        str,
        typer.Argument(
            metavar="PATH", help="An image directory, its checkpoint.img, or s3://.../NAME."
        ),
    ],
    key_file: Annotated[
        Path | None,
        typer.Option(
            "--key-file",
            metavar="PATH",
            help="File holding the HMAC key, to verify a signed image.",
        ),
    ] = None,
    objects: Annotated[
        int, typer.Option("--objects", min=0, help="Pretty-print the first N objects.")
    ] = 0,
    verify: Annotated[
        bool, typer.Option("--verify", help="Decode every record and check every page.")
    ] = False,
    json_out: JsonDocOpt = False,
) -> None:
    """Show an image: header, metadata, integrity, type table, pages, objects."""
    import json as _json

    from ckpt import statefile
    from ckpt.statefile.inspect import report_failed
    from ckpt.statefile.render import render_report

    key = statefile.read_key_file(str(key_file)) if key_file is not None else None
    if path.startswith("s3://"):
        from ckpt.cli_image import inspect_remote

        report = inspect_remote(path, key, objects=objects, verify=verify)
    else:
        report = statefile.inspect_image(Path(path), key, objects=objects, verify=verify)
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
        int, typer.Option("--size-mib", min=1, metavar="MIB", help="MiB of stream data per shape.")
    ] = 100,
    pages_mib: Annotated[
        int | None,
        typer.Option(
            "--pages-mib",
            min=1,
            metavar="MIB",
            help="MiB of pages (default 64, less if --size-mib < 100).",
        ),
    ] = None,
    memory: Annotated[
        bool, typer.Option("--memory/--no-memory", help="Measure peak traced memory.")
    ] = True,
    workdir: Annotated[
        Path | None, typer.Option("--dir", help="Where to write files (default: temp dir).")
    ] = None,
    json_out: JsonDocOpt = False,
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
    json_out: JsonDocOpt = False,
) -> None:
    """cgroup stat(): the lean reader against a naive one, on a live process's real cgroup.

    Needs root and a cgroup filesystem.  Goals (after containerd's cgroup2 Stat allocation work): at least 40% less time and
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
    json_out: JsonDocOpt = False,
) -> None:
    """Decode and re-encode an idle nginx kernel from its image, typed vs reflect;
    and files:N save/load with per-type stats on vs off."""
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


@bench_app.command("lifecycle")
def bench_lifecycle_cmd(
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="Timed rounds.")] = 5,
    workloads: Annotated[
        str, typer.Option("--workloads", help="Comma-separated workloads.")
    ] = "http,nginx",
    cpu: Annotated[str, typer.Option("--cpu", help="Comma-separated quotas.")] = "uncapped,0.25",
    commands: Annotated[
        str | None,
        typer.Option("--commands", help="Only these (run,checkpoint,restore,state)."),
    ] = None,
    json_out: JsonDocOpt = False,
) -> None:
    """Each CLI command timed as a whole process, exec to exit, against `python -c pass`.

    run (cold and from the template), checkpoint, restore (template and cold) and state,
    per workload and CPU quota, rounds interleaved; medians and spread.  Needs root for
    quotas other than uncapped.
    """
    from ckpt.bench import lifecycle

    report = lifecycle.run(
        count=count,
        workloads=[w for w in workloads.split(",") if w],
        quotas=[q for q in cpu.split(",") if q],
        commands=commands.split(",") if commands else None,
        progress=not json_out,
    )
    if json_out:
        _print_json(lifecycle.to_json(report))
        return
    out.print(lifecycle.render(report))
    for line in lifecycle.go_lines(report):
        say(line)


@bench_app.command("frozen")
def bench_frozen_cmd(
    sizes: Annotated[
        str, typer.Option("--sizes", help="Comma-separated MiB sizes.")
    ] = "64,256,1024",
    kinds: Annotated[str, typer.Option("--workloads", help="memory, kv or both.")] = "memory,kv",
    modes: Annotated[
        str, typer.Option("--modes", help="stop, leave-running, pre-copy, chain.")
    ] = "stop,leave-running,pre-copy,chain",
    rate: Annotated[
        int, typer.Option("--rate", min=4096, help="kv write load, bytes a second.")
    ] = 2 << 20,
    plot_path: Annotated[
        Path | None,
        typer.Option("--plot", help="Also draw frozen time against size to FILE.png."),
    ] = None,
    json_out: JsonDocOpt = False,
) -> None:
    """Frozen time, longest request, total time, image size and lost writes per mode.

    memory:N and kv:N at each size, loaded by a client on 127.0.0.1 while the
    checkpoint runs; each image is restored and every acknowledged write read back.
    """
    from ckpt.bench import frozen, scale
    from ckpt.bench.harness import BenchError

    plot_to = scale.check_plot(plot_path) if plot_path is not None else None
    try:
        size_list = [int(s) for s in sizes.split(",") if s]
    except ValueError:
        raise BenchError(f"bad --sizes {sizes!r}: give MiB counts such as 64,256") from None
    report = frozen.run(
        size_list,
        [k for k in kinds.split(",") if k],
        [m for m in modes.split(",") if m],
        rate,
        progress=None if json_out else (lambda text: say(f"  {text}")),
    )
    if plot_to is not None:
        frozen.plot(report, plot_to)
    if json_out:
        _print_json(report)
        return
    out.print(frozen.render(report))
    for line in frozen.go_lines(report):
        say(line)


@bench_app.command("load")
def bench_load_cmd(
    clients: Annotated[int, typer.Option("--clients", min=1, help="Concurrent clients.")] = 8,
    cycles: Annotated[
        int, typer.Option("--cycles", min=1, help="Checkpoint/restore cycles per mode.")
    ] = 8,
    modes: Annotated[
        str, typer.Option("--modes", help="template, cold, or both (comma-separated).")
    ] = "template,cold",
    json_out: JsonDocOpt = False,
) -> None:
    """Real HTTP clients keep an http sandbox busy across checkpoint/restore cycles.

    Requests answered, refused and dropped, latency, and the server's count against the
    clients', with the warm template (socket handover) and without.  127.0.0.1 only."""
    from ckpt.bench import load

    chosen = tuple(m.strip() for m in modes.split(",") if m.strip())
    if not chosen or any(m not in ("template", "cold") for m in chosen):
        from ckpt.bench.harness import BenchError

        raise BenchError(f"--modes {modes!r}: give template, cold, or both")
    report = load.run(clients=clients, cycles=cycles, modes=chosen, progress=not json_out)
    if json_out:
        _print_json(load.to_json(report))
        return
    out.print(load.render(report))
    for line in load.go_lines(report):
        say(line)


# --- scale (ckpt/bench/scale.py) --------------------------------------------------


@bench_app.command("scale")
def bench_scale_cmd(
    files: Annotated[
        str, typer.Option("--files", help="files:N sizes, comma-separated ('' to skip).")
    ] = "1000,10000,100000",
    graphs: Annotated[
        str, typer.Option("--graphs", help="graph:N sizes, comma-separated ('' to skip).")
    ] = "1000,4000,16000,100000",
    memory: Annotated[
        str, typer.Option("--memory", help="memory:N sizes in MiB, comma-separated.")
    ] = "16,64,256,1024",
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="Repetitions per size.")] = 1,
    workdir: Annotated[
        Path | None, typer.Option("--dir", help="Where sandboxes and images go (default: temp).")
    ] = None,
    plot_path: Annotated[
        Path | None,
        typer.Option(
            "--plot", metavar="FILE", help="Also draw cost against size to FILE.png (needs [plot])."
        ),
    ] = None,
    json_out: JsonDocOpt = False,
) -> None:
    """Checkpoint and restore cost against object count and memory size, real sandboxes."""
    import json as _json

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
        typer.echo(f"plot written to {scale.plot(res, plot_to)}", err=True)
    if json_out:
        typer.echo(_json.dumps(scale.to_json(res), indent=2, default=str))
        return
    out.print(scale.render(res))
    for line in scale.go_lines(res["points"]):
        typer.echo(line)  # unwrapped, for benchstat


# --- sandbox lifecycle commands (ckpt/sandbox) ------------------------------------


def _sandbox_root() -> Any:
    from ckpt.sandbox import paths

    return paths.Root(Globals.root or default_root()).check()


def _lifecycle() -> Any:
    """``ckpt.sandbox.lifecycle``, imported on use so other commands start fast."""
    from ckpt.sandbox import lifecycle

    return lifecycle


def _render() -> Any:
    from ckpt.sandbox import render

    return render


def _print_json(data: object) -> None:
    say(json.dumps(data, indent=2, default=str))


class Engine(enum.Enum):
    """lifecycle.ENGINES, as choices (without importing lifecycle)."""

    NATIVE = "native"
    TYPED = "typed"
    REFLECT = "reflect"


class Compression(enum.Enum):
    """statefile.COMPRESSIONS, as choices."""

    NONE = "none"
    ZSTD = "zstd"


IdArg = Annotated[str, typer.Argument(metavar="ID", help="Sandbox ID: its name under the root.")]
CpuOpt = Annotated[
    str | None,
    typer.Option(
        "--cpu",
        metavar="CPUS",
        help="CPU quota in CPUs (e.g. 0.5), or 'uncapped' (default).",
    ),
]
EngineOpt = Annotated[
    Engine | None,
    typer.Option(
        "--engine",
        help="State engine (default: the fastest built).",
    ),
]
KeyOpt = Annotated[
    Path | None,
    typer.Option("--key-file", metavar="PATH", help="HMAC-SHA256 key for the image (raw bytes)."),
]
StatsOpt = Annotated[
    bool, typer.Option("--stats", help="Per-type engine stats and CRIU-style counters.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
TimingsOpt = Annotated[
    bool, typer.Option("--timings", help="Every phase and counter as a table, not one line.")
]
IgnoreCgroupsOpt = Annotated[
    bool, typer.Option("--ignore-cgroups", help="Run without a cgroup (no quota, no freeze).")
]


@app.command("run")
def run_cmd(
    sandbox_id: IdArg,
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            "-w",
            help="empty, http, nginx, files:N, graph:N, kv:N or memory:N (MiB).",
        ),
    ],
    cpu: CpuOpt = None,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="TCP port to serve on; 0 = free.")
    ] = 0,
    engine: Annotated[
        Engine | None,
        typer.Option(
            "--engine",
            help="Default engine for its checkpoints (default: native where built, else typed).",
        ),
    ] = None,
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
        engine=engine.value if engine else None,
        ignore_cgroups=ignore_cgroups,
    )
    for text in res.notes:
        note(text)
    if json_out:
        _print_json({**res.state.to_json(), "timings": res.timings.as_dict()})
        return
    where = f", serving http://{res.state.address}/" if res.state.address else ""
    say(f"sandbox {res.state.id} running (pid {res.state.pid}{where})")


@app.command("list")
def list_cmd(json_out: JsonOpt = False) -> None:
    """List sandboxes under the root."""
    states = _lifecycle().list_sandboxes(_sandbox_root())
    if json_out:
        _print_json([st.to_json() for st in states])
    else:
        out.print(_render().sandboxes_table(states))


@app.command("state")
def state_cmd(sandbox_id: IdArg) -> None:
    """Print a sandbox's state as JSON (id, pid, status, workload, cgroup, created, address)."""
    _print_json(_lifecycle().state(_sandbox_root(), sandbox_id).to_json())


@app.command("pause")
def pause_cmd(sandbox_id: IdArg) -> None:
    """Freeze a sandbox's kernel and cgroup; HTTP requests wait until resume."""
    _lifecycle().pause(_sandbox_root(), sandbox_id)
    say(f"sandbox {sandbox_id} paused")


@app.command("resume")
def resume_cmd(sandbox_id: IdArg) -> None:
    """Thaw a paused sandbox."""
    _lifecycle().resume(_sandbox_root(), sandbox_id)
    say(f"sandbox {sandbox_id} running")


@app.command("kill")
def kill_cmd(sandbox_id: IdArg) -> None:
    """SIGKILL a sandbox and free its cgroup (its state stays, as stopped)."""
    _lifecycle().kill(_sandbox_root(), sandbox_id)
    say(f"sandbox {sandbox_id} stopped")


@app.command("delete")
def delete_cmd(
    sandbox_id: IdArg,
    force: Annotated[bool, typer.Option("--force", help="Kill it first if running.")] = False,
) -> None:
    """Remove a sandbox: its process (with --force), cgroup and files."""
    _lifecycle().delete(_sandbox_root(), sandbox_id, force=force)
    say(f"sandbox {sandbox_id} deleted")


@app.command("checkpoint")
def checkpoint_cmd(
    sandbox_id: IdArg,
    image_path: Annotated[
        str,
        typer.Option(
            "--image-path", metavar="PATH", help="Image directory, or s3://BUCKET/PREFIX/NAME."
        ),
    ],
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
        Path | None,
        typer.Option(
            "--parent-path",
            metavar="PATH",
            help="The last image taken of this sandbox: write only the pages dirtied "
            "since it, and link to it.",
        ),
    ] = None,
    pre_copy: Annotated[
        bool,
        typer.Option(
            "--pre-copy",
            help="Copy memory in rounds while serving, then freeze briefly for the rest.",
        ),
    ] = False,
    timings: TimingsOpt = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the timings as JSON.")] = False,
) -> None:
    """Checkpoint a sandbox into an image; it stops afterwards unless --leave-running."""
    from ckpt.sandbox import precopy

    options = precopy.cli_options(pre_dump, parent_path, pre_copy)
    res = _lifecycle().checkpoint(
        _sandbox_root(),
        sandbox_id,
        image_path,
        leave_running=leave_running,
        compression=compression.value,
        level=compression_level,
        engine=engine.value if engine else None,
        stats=stats,
        key=_lifecycle().read_key(key_file),
        force=force,
        drain_timeout=drain_timeout,
        options=options,
    )
    if json_out:
        _print_json(
            {
                "id": sandbox_id,
                "image": str(res.image),
                "status": res.state.status,
                "timings": res.timings.as_dict(),
                "stats": res.stats,
                **({"rounds": res.rounds} if res.rounds else {}),
            }
        )
        return
    say(f"checkpoint of {sandbox_id} written to {res.image} (sandbox {res.state.status})")
    if timings or stats:
        out.print(_render().timings_table("checkpoint timings", res.timings))
    else:
        say("  " + res.timings.summary())
    if stats:
        out.print(_render().stats_renderable(res.stats, res.stats_text))


@app.command("restore")
def restore_cmd(
    sandbox_id: IdArg,
    image_path: Annotated[
        str,
        typer.Option(
            "--image-path", metavar="PATH", help="Image directory, or s3://BUCKET/PREFIX/NAME."
        ),
    ],
    cpu: CpuOpt = None,
    engine: EngineOpt = None,
    stats: StatsOpt = False,
    background: Annotated[
        bool, typer.Option("--background", help="Load memory pages lazily in the background.")
    ] = False,
    key_file: KeyOpt = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port", min=0, max=65535, help="Listen here instead of the saved port (0 = free)."
        ),
    ] = None,
    ignore_cgroups: IgnoreCgroupsOpt = False,
    timings: TimingsOpt = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the timings as JSON.")] = False,
) -> None:
    """Restore an image into a new sandbox process under an optional CPU quota."""
    res = _lifecycle().restore(
        _sandbox_root(),
        sandbox_id,
        image_path,
        cpus=_lifecycle().parse_cpu(cpu),
        engine=engine.value if engine else None,
        stats=stats,
        background=background,
        key=_lifecycle().read_key(key_file),
        port=port,
        ignore_cgroups=ignore_cgroups,
    )
    for text in res.notes:
        note(text)
    if json_out:
        _print_json({**res.state.to_json(), "timings": res.timings.as_dict(), "stats": res.stats})
        return
    where = f", serving http://{res.state.address}/" if res.state.address else ""
    say(f"sandbox {sandbox_id} restored (pid {res.state.pid}{where})")
    if timings or stats:
        out.print(_render().timings_table("restore timings", res.timings))
    else:
        say("  " + res.timings.summary())
    if stats:
        out.print(_render().stats_renderable(res.stats, res.stats_text))


@app.command("cycle")
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
            help="Comma-separated engines; the first is the baseline "
            "(default: reflect,typed, and native where it is built).",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Checkpoint/restore a running sandbox repeatedly, engines interleaved ABBA."""
    from ckpt.bench import cycle

    if engines is None:
        from ckpt.state import native_status

        engines = "reflect,typed,native" if native_status()[0] else "reflect,typed"
    plan = cycle.Plan.parse(
        sandbox_id, image_path, count=count, cpu=cpu, hold=hold, engines=engines
    )
    report = cycle.run(_sandbox_root(), plan, console=None if json_out else err.real())
    if json_out:
        _print_json(report.to_json())
        return
    out.print(cycle.render(report))
    for line in cycle.go_lines(report):
        out.print(line, markup=False, soft_wrap=True)


@template_app.command("status")
def template_status_cmd(json_out: JsonOpt = False) -> None:
    """Show the root's template: pid, code version, uptime, sandboxes forked, memory."""
    from ckpt.sandbox import template_client

    root = _sandbox_root().path
    info = template_client.status(root)
    if json_out:
        _print_json({"running": info is not None, **(info or {})})
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

    root = _sandbox_root().path
    if template_client.status(root) is None:
        template_client.start(root, wait=True)
    info = template_client.status(root) or {}
    say(f"template pid {info.get('pid')} serving {root}")


@template_app.command("stop")
def template_stop_cmd() -> None:
    """Stop the root's template.  Sandboxes it forked keep running."""
    from ckpt.sandbox import template_client

    root = _sandbox_root().path
    if template_client.stop(root):
        say(f"template of {root} stopped")
    else:
        say(f"no template serving {root}")


@app.command("demo")
def demo_cmd() -> None:
    """A guided tour: run, query, checkpoint, inspect, restore under a quota, clean up."""
    from ckpt import demo

    demo.run(out.real())


from ckpt.cli_image import bench_store_cmd, image_app  # noqa: E402  (images in stores)

app.add_typer(image_app, name="image")
bench_app.command("store")(bench_store_cmd)
from ckpt.cli_migrate import register as register_migrate  # noqa: E402  (serve, migrate)

register_migrate(app)

if __name__ == "__main__":
    main()
