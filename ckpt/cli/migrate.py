"""``ckpt serve``, ``ckpt migrate`` and ``ckpt bench migrate``: live migration between hosts.

Commands parse options and call ``ckpt.migration``; every error is a CkptError that
``ckpt.cli.base.main`` renders as one line.  The migration package is imported by these
commands only, so other commands start no slower.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from ckpt.cli.options import JsonOpt, bridge_opt, port_opt, root_opt
from ckpt.cli.options import RequiredKeyOpt as KeyFileOpt
from ckpt.errors import CkptError, UsageError

DETACH_READY_S = 30.0

TlsCertOpt = Annotated[
    Path | None,
    typer.Option("--tls-cert", metavar="PEM", help="Serve over TLS with this certificate."),
]
TlsKeyOpt = Annotated[
    Path | None, typer.Option("--tls-key", metavar="PEM", help="The certificate's private key.")
]
TlsCaOpt = Annotated[
    Path | None,
    typer.Option("--tls-ca", metavar="PEM", help="Use TLS; trust the server signed by this CA."),
]
EncryptOpt = Annotated[
    bool,
    typer.Option(
        "--encrypt", help="Seal every frame with AES-256-GCM under --key-file (pages too)."
    ),
]


def _root(given: Path | None) -> Any:
    from ckpt.cli.base import Globals, default_root
    from ckpt.sandbox.wire import paths

    return paths.Root(given or Globals.root or default_root()).check()


def _one_root(given: Path | None) -> None:
    """``ckpt --root A serve --root B`` names two roots: refuse rather than pick one."""
    from ckpt.cli.base import Globals
    from ckpt.errors import UsageError as Conflict

    if given is None or not Globals.root_given or Globals.root is None:
        return
    if os.path.abspath(given) != os.path.abspath(Globals.root):
        raise Conflict(
            f"two roots given: --root {Globals.root} before the command and --root "
            f"{given} after serve; give one"
        )


def _secret(key_file: Path | None, encrypt: bool = False) -> bytes:
    from ckpt.migration import read_key_file

    if key_file is None and encrypt:
        raise UsageError(
            "--encrypt seals the channel under a key derived from --key-file, and TLS "
            "does not replace it: give --key-file PATH, the same file on both hosts"
        )
    if key_file is None:
        raise UsageError(
            "a key file is required: --key-file PATH, the same file on both hosts "
            "(make one with: head -c 32 /dev/urandom > PATH; chmod 600 PATH)"
        )
    return read_key_file(key_file)


def serve_cmd(
    listen: Annotated[
        str, typer.Option("--listen", metavar="HOST:PORT", help="Where to accept migrations.")
    ],
    key_file: KeyFileOpt = None,
    root: Annotated[Path | None, root_opt()] = None,
    detach: Annotated[
        bool, typer.Option("--detach", help="Run in the background; print its pid.")
    ] = False,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
    bridge: Annotated[str | None, bridge_opt("an arriving sandbox with its own address")] = None,
    json_out: JsonOpt = False,
    encrypt: Annotated[
        bool, typer.Option("--encrypt", help="Accept only migrate --encrypt: sealed frames.")
    ] = False,
) -> None:
    """Accept migrations into the root until SIGTERM or SIGINT.

    With --detach --json: {"pid": N, "address": HOST:PORT, "log": PATH} once it listens.

    One migration at a time. Before it proves the key, a connection has 5 s (TLS
    included); at most 4 such connections come from one address and 32 in all (when
    all are taken, a newcomer replaces the oldest of the address holding the most).
    A key holder keeps the slot while each step (an image, an answer) moves: 120 s plus
    1 s per 256 KiB it brings. Another key holder waits up to 10 s for the slot, then is
    told the server is busy.

    With --encrypt, a source that does not seal the channel (migrate --encrypt) is
    refused as it connects, in one line on both sides; without it, a source that asks
    gets sealed frames.
    """
    _one_root(root)
    from ckpt.migration import ServerTLS
    from ckpt.migration.serve import parse_address, ready_line_writer, serve

    host, port = parse_address(listen, "--listen")
    secret = _secret(key_file, encrypt)
    if (tls_cert is None) != (tls_key is None):
        raise UsageError("TLS needs both --tls-cert and --tls-key")
    tls = ServerTLS(tls_cert, tls_key) if tls_cert is not None and tls_key else None
    sandbox_root = _root(root)
    if detach:
        _detach(sandbox_root.path, json_out)
        return
    from ckpt.cli.base import Globals
    from ckpt.cli.output import log_line

    serve(
        sandbox_root,
        host,
        port,
        secret,
        tls=tls,
        say=log_line,  # its lines carry peers' words: escaped
        on_ready=ready_line_writer(),
        debug=Globals.debug,
        bridge=bridge,
        encrypt=encrypt,
    )


def _detach(root_dir: Path, json_out: bool) -> None:
    """Start this same command without --detach in its own session; print its pid once
    it listens (or its first error line)."""
    from ckpt.cli.base import Globals
    from ckpt.migration.serve import READY_FD_ENV
    from ckpt.pycommand import ckpt_argv, python_env

    argv = [a for a in sys.argv[1:] if a not in ("--detach", "--json")]
    if Globals.root is not None and "--root" not in argv:
        argv = ["--root", str(Globals.root), *argv]
    r, w = os.pipe()
    root_dir.mkdir(parents=True, exist_ok=True)
    log = root_dir / "serve.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ckpt_argv(*argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            pass_fds=(w,),
            env={**python_env(), READY_FD_ENV: str(w)},
            start_new_session=True,
        )
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], DETACH_READY_S)
        line = os.read(r, 256).decode(errors="replace").strip() if ready else ""
    finally:
        os.close(r)
    if not line:
        code = proc.poll()
        if code is None:
            proc.terminate()
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise CkptError(f"ckpt serve did not start ({tail[0]}); see {log}")
    from ckpt.cli.output import emit_json, say

    if json_out:
        emit_json({"pid": proc.pid, "address": line, "log": str(log)})
        return
    say(f"{proc.pid} listening on {line}")


def migrate_cmd(
    sandbox_id: Annotated[
        str, typer.Argument(metavar="ID", help="Sandbox ID: the running sandbox to move.")
    ],
    to: Annotated[
        str, typer.Option("--to", metavar="HOST:PORT", help="The destination's ckpt serve.")
    ],
    key_file: KeyFileOpt = None,
    rounds: Annotated[
        int | None,
        typer.Option(
            "--rounds",
            metavar="N",
            min=0,
            max=8,
            help="At most N pre-copy rounds (post-copy: exactly N, default 1).",
        ),
    ] = None,
    post_copy: Annotated[
        bool,
        typer.Option(
            "--post-copy",
            help="Resume there after the rounds; the pages left follow as it runs.",
        ),
    ] = False,
    auto: Annotated[
        bool,
        typer.Option("--auto", help="Post-copy if the rounds stop shrinking, else pre-copy."),
    ] = False,
    port: Annotated[int | None, port_opt("the saved port")] = None,
    forward: Annotated[
        float,
        typer.Option(
            "--forward",
            metavar="SECONDS",
            min=0,
            help="Relay the old address to the new one this long.",
        ),
    ] = 0.0,
    as_json: JsonOpt = False,
    tls_ca: TlsCaOpt = None,
    encrypt: EncryptOpt = False,
) -> None:
    """Move a running sandbox to another host.

    It keeps running there; on any failure it keeps running here.  It keeps its port
    unless --port says otherwise; when that port is taken on the destination (always
    so on this same host) it gets a free one, and the result line says where it
    serves.

    Pre-copy (the default) sends memory in rounds while it runs, then freezes it for
    the pages still dirty.  With --post-copy it freezes after --rounds rounds for the
    kernel state only and resumes there at once; the pages left come after, those it
    reads first ahead of the rest, and this copy stays paused until the last one has
    arrived.  The freeze then depends on neither the memory size nor how fast it
    writes, but until the last page arrives the sandbox needs both hosts.
    """
    from ckpt.cli.progress import Status, wanted
    from ckpt.migration import ClientTLS
    from ckpt.migration.outgoing import Migration, Options
    from ckpt.migration.serve import parse_address

    host, dport = parse_address(to, "--to")
    secret = _secret(key_file, encrypt)
    sandbox_root = _root(None)
    from ckpt.sandbox.client.status import refresh

    st = refresh(sandbox_root, sandbox_id)
    old_address = st.address
    if forward > 0 and _keeps_address(sandbox_root, st):
        from ckpt.cli.output import note

        note(f"--forward: sandbox {sandbox_id} takes its address {old_address} and its "
             "connections along, so no relay is needed; none is started")  # fmt: skip
        forward = 0.0
    old = _forward_from(sandbox_id, old_address, host, port) if forward > 0 else None
    if post_copy and auto:
        raise UsageError("--post-copy and --auto: give one (--auto chooses post-copy itself)")
    mode = "post-copy" if post_copy else "auto" if auto else "pre-copy"
    tls = ClientTLS(tls_ca) if tls_ca else None
    opts = Options(rounds=rounds, port=port, tls=tls, mode=mode, encrypt=encrypt)
    migration = Migration(sandbox_root, sandbox_id, host, dport, secret, opts)
    with Status(_migrating(migration, to), enabled=wanted(as_json), delay=0.5):
        report = migration.run()
    from ckpt.cli.output import emit_json, note, say

    if as_json:
        document = report.to_json()
        emit_json({"id": document.pop("sandbox_id"), **document})
    else:
        say(report.line())
        if moved := _port_moved(old_address, report.address, port):
            note(moved)
    if old is not None and report.address:
        from ckpt.migration.forward import relay

        new_host, new_port = parse_address(report.address, "the new address")
        if new_host in ("0.0.0.0", "::"):
            new_host = host
        if not as_json:
            note(
                f"relaying {old[0]}:{old[1]} to {new_host}:{new_port} for {forward:g} s "
                "(Ctrl-C stops it)"
            )
        deadline = time.monotonic() + forward
        left = _left(deadline, f"relaying {old[0]}:{old[1]} to {new_host}:{new_port}")
        with Status(left, enabled=wanted(as_json), delay=0.0, elapsed=False):
            relay(old, (new_host, new_port), seconds=forward, deadline=deadline, destination=host)


def _migrating(migration: Any, to: str) -> Any:
    """The status line of a migration: its step and the bytes sent so far."""

    def text() -> str:
        mib = migration.sent() / (1 << 20)
        return f"migrating {migration.sid} to {to}: {migration.stage}, {mib:.1f} MiB sent"

    return text


def _left(deadline: float, doing: str) -> Any:
    """The status line of a wait with an end: what, and the seconds left."""

    def text() -> str:
        return f"{doing}: {max(0.0, deadline - time.monotonic()):.0f} s left"

    return text


def _port_moved(old: str | None, new: str | None, asked: int | None) -> str | None:
    """Say so when the sandbox kept no port of its own choosing: the one it had was
    taken on the destination, so it serves on another one."""
    if asked is not None or not old or not new:
        return None
    old_port, new_port = old.rpartition(":")[2], new.rpartition(":")[2]
    if old_port == new_port:
        return None
    return f"port {old_port} was taken on the destination: it serves on port {new_port} now"


def _keeps_address(root: Any, st: Any) -> bool:
    """Does the sandbox have an address of its own (``run --bridge``), which moves with it?"""
    from ckpt.sandbox.wire import netns

    return netns.of(root, st) is not None


def _forward_from(
    sandbox_id: str, old_address: str | None, destination: str, port: int | None
) -> tuple[str, int]:
    """The address ``--forward`` relays from, checked before anything moves."""
    from ckpt.migration.forward import check_plan
    from ckpt.migration.serve import parse_address

    if not old_address:
        raise UsageError(f"--forward: sandbox {sandbox_id} has no address to relay from")
    old = parse_address(old_address, "the old address")
    check_plan(old, destination, port)
    return old


def bench_migrate_cmd(
    sizes: Annotated[str, typer.Option("--sizes", help="Comma-separated MiB sizes.")] = "64,256",
    kinds: Annotated[
        str,
        typer.Option(
            "--workloads",
            help="kv, memory (each at every size) or whole ones: kv:256, http (netns).",
        ),
    ] = "kv,memory",
    rate: Annotated[
        int, typer.Option("--rate", min=4096, help="kv write load, bytes a second.")
    ] = 2 << 20,
    link: Annotated[
        str, typer.Option("--link", help="loopback, or netns: two hosts on a LAN of namespaces.")
    ] = "loopback",
    runs: Annotated[
        int | None,
        typer.Option("--runs", min=1, metavar="N", help="netns: runs per workload, medians."),
    ] = None,
    shape: Annotated[
        str, typer.Option("--shape", metavar="RATE", help="netns: tbf rate of the link.")
    ] = "1gbit",
    delay_ms: Annotated[
        float,
        typer.Option("--delay-ms", metavar="MS", min=0, help="netns: added latency, each way."),
    ] = 0.0,
    loads: Annotated[
        str, typer.Option("--loads", help="write, keepalive (+4 keep-alive GETs) or both.")
    ] = "write",
    modes: Annotated[
        str,
        typer.Option("--modes", help="pre-copy, post-copy, auto: each cell in each mode."),
    ] = "pre-copy",
    baseline: Annotated[
        bool,
        typer.Option(
            "--baseline/--no-baseline",
            help="Also time a local checkpoint --pre-copy + restore (loopback).",
        ),
    ] = True,
    plot_path: Annotated[
        Path | None,
        typer.Option("--plot", metavar="FILE", help="Also draw the cells to FILE.png."),
    ] = None,
    as_json: JsonOpt = False,
    encrypt: Annotated[
        bool, typer.Option("--encrypt", help="Loopback: serve and migrate with --encrypt.")
    ] = False,
) -> None:
    """Downtime, bytes and lost writes of a migration.

    Frozen time, downtime, client-visible gap, bytes and lost writes.

    kv:N and memory:N at each size, between two roots on 127.0.0.1 under a client
    that retries every 5 ms; every acknowledged write is read back at the destination.

    --link netns (root only): host A, host B and a client on one LAN of network
    namespaces, A's uplink shaped to --shape; the sandbox has its own address on it
    and moves A to B with its connections, under 4 keep-alive clients and a writer
    that follow it: resets, refusals, reconnects, lost writes, the longest gap between
    answers; medians of --runs runs (default 5).
    """
    from ckpt.bench import migrate, scale
    from ckpt.bench.harness import mib_sizes
    from ckpt.cli.output import say, suite_report

    if plot_path is not None and link == "netns":
        from ckpt.bench.harness import BenchError

        raise BenchError("--plot draws the loopback cells; leave it out with --link netns")
    plot_to = scale.check_plot(plot_path) if plot_path is not None else None
    report = migrate.run(
        mib_sizes(sizes),
        [k for k in kinds.split(",") if k],
        rate,
        progress=None if as_json else (lambda text: say(f"  {text}")),
        link=link,
        shape=shape,
        delay_ms=delay_ms,
        loads=[x for x in loads.split(",") if x],
        with_baseline=baseline,
        runs=runs,
        modes=[x for x in modes.split(",") if x],
        encrypt=encrypt,
    )
    if plot_to is not None:
        migrate.plot(report, plot_to)
    suite_report(migrate, report, as_json)


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``migrate`` to the main app, ``migrate`` to ``bench``."""
    app.command("serve")(serve_cmd)
    app.command("migrate")(migrate_cmd)
    for group in app.registered_groups:
        if group.name == "bench" and group.typer_instance is not None:
            group.typer_instance.command("migrate")(bench_migrate_cmd)
