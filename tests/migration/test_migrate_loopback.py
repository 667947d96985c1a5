"""``ckpt migrate`` into ``ckpt serve`` between two roots on loopback, real processes.

A migration moves the sandbox with its memory and every acknowledged write; every
refusal and every death (of the destination, of the source CLI, in a round or frozen)
leaves exactly one running sandbox, the one that was running, and nothing behind.
No timing is asserted: the figures come from ``ckpt bench migrate``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading

import psutil
import pytest

from ckpt.errors import CkptError
from tests.sandbox.conftest import Cli, stop_template
from tests.sandbox.kv_client import check_values, put_values
from tests.sandbox.waiting import gone, wait_for

from . import test_tls
from .migrate_kit import Hosts, address, digest, leftovers, make_key, running, stopped

pytestmark = pytest.mark.slow
SID = f"mig-{os.getpid()}"


def _run(hosts: Hosts, workload: str = "kv:8", sid: str = SID) -> None:
    hosts.src("run", sid, "--workload", workload, "--port", "0", timeout=120)


def _put(hosts: Hosts, first: int, count: int) -> dict[str, bytes]:
    items = ((f"k{i % 50}", b"%06d-" % i * (1 + i % 200)) for i in range(first, first + count))
    return put_values(address(hosts.src, SID), items)


def _one_line_error(proc) -> str:  # type: ignore[no-untyped-def]
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_migration_moves_memory_and_values(hosts: Hosts) -> None:
    _run(hosts)
    acked = _put(hosts, 0, 300)
    before = digest(hosts.src, SID)
    serve = hosts.serve()
    proc = hosts.migrate(SID, serve, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert running(hosts.dst) == [SID] and running(hosts.src) == []
    assert not hosts.src.root.joinpath(SID).exists()
    assert digest(hosts.dst, SID) == before
    check_values(address(hosts.dst, SID), acked)
    assert report["address"] == hosts.dst.state(SID)["address"]
    assert report["id"] == SID and "sandbox_id" not in report  # named as every record
    assert report["rounds"][-1]["final"] and len(report["rounds"]) >= 2
    assert report["bytes_sent"] >= sum(r["bytes"] for r in report["rounds"])
    for name in ("downtime_ms", "frozen_time_ms", "pages_written", "restore_time_ms"):
        assert name in report
    assert leftovers(hosts) == []
    assert any(line.startswith(f"received {SID}") for line in serve.lines())
    assert serve.stop() == 0


def _record_pid(host: Cli) -> int:
    """The pid the sandbox's record holds, 0 while it has none (or no record yet)."""
    try:
        return host.state(SID)["pid"] or 0
    except CkptError:
        return 0


def test_the_destination_makes_the_sandbox_process_while_the_rounds_arrive(
    hosts: Hosts,
) -> None:
    """By the first round the destination's sandbox exists (creating, its process
    alive), so the frozen step only loads the image into it; then it runs."""
    _run(hosts)
    serve = hosts.serve()
    cli = hosts.migrate_popen(SID, serve, env={"CKPT_FAULT": "pause:migrate:round"})
    try:
        wait_for(lambda: stopped(cli), "the migrate CLI to stop in a round", 120)
        # the record is written as the sandbox appears (pid 0), then gets its process
        wait_for(lambda: _record_pid(hosts.dst), "the destination to make the sandbox process", 60)
        st = hosts.dst.state(SID)
        assert st["status"] == "creating" and psutil.pid_exists(st["pid"]), st
        cli.send_signal(signal.SIGCONT)
        _, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, err
    assert hosts.dst.state(SID)["pid"] == st["pid"]  # that process was restored
    assert running(hosts.dst) == [SID] and running(hosts.src) == []
    assert leftovers(hosts) == []


def test_writes_acknowledged_during_migration_all_arrive(hosts: Hosts) -> None:
    _run(hosts)
    serve = hosts.serve()
    acked: dict[str, bytes] = {}
    done = threading.Event()

    def writer() -> None:
        i = 0
        while not done.is_set():  # until the source stops answering (it was deleted)
            try:
                got = put_values(address(hosts.src, SID), [(f"w{i % 64}", b"%08d" % i * 64)])
            except Exception:
                return
            if not got:
                return
            acked.update(got)
            i += 1

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    wait_for(lambda: len(acked) >= 20, "the writer to get going", 60)
    proc = hosts.migrate(SID, serve)
    done.set()
    t.join(60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"migrated {SID} to ") and "downtime" in proc.stdout
    assert len(acked) >= 20
    check_values(address(hosts.dst, SID), acked)


def test_to_this_host_a_taken_port_gives_way_to_a_free_one(hosts: Hosts) -> None:
    """Without --port the sandbox keeps its port, but on this same host the source
    holds it until the move ends: the destination takes a free one, and the result
    line names where the sandbox serves now, not the server's address."""
    _run(hosts)
    old = address(hosts.src, SID)
    serve = hosts.serve()
    proc = hosts.src(
        "migrate", SID, "--to", serve.address, "--key-file", str(hosts.key),
        check=False, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    new = address(hosts.dst, SID)
    assert new[1] != old[1]
    line = proc.stdout.strip()
    assert line.startswith(
        f"migrated {SID} to {serve.address}, serving http://{new[0]}:{new[1]}/: "
    )
    assert f"port {old[1]} was taken on the destination" in proc.stderr
    assert running(hosts.dst) == [SID] and running(hosts.src) == []
    assert leftovers(hosts) == []


def test_a_port_asked_for_that_is_taken_fails_and_the_source_runs_on(hosts: Hosts) -> None:
    """--port is the user's choice: taken, it is an error, never another port."""
    _run(hosts)
    old = address(hosts.src, SID)
    serve = hosts.serve()
    proc = hosts.src(
        "migrate", SID, "--to", serve.address, "--key-file", str(hosts.key),
        "--port", str(old[1]), check=False, timeout=180,
    )  # fmt: skip
    line = _one_line_error(proc)
    assert f"cannot listen on 127.0.0.1:{old[1]}" in line
    assert running(hosts.src) == [SID] and running(hosts.dst) == []
    assert leftovers(hosts) == []


def test_wrong_key_is_refused_and_the_source_runs_on(hosts: Hosts) -> None:
    _run(hosts)
    serve = hosts.serve(make_key(hosts.tmp / "other-key"))
    proc = hosts.migrate(SID, serve)
    line = _one_line_error(proc)
    assert "key" in line
    assert running(hosts.src) == [SID] and running(hosts.dst) == []
    assert hosts.src.state(SID)["status"] == "running"
    assert leftovers(hosts) == []


def test_existing_id_on_the_destination_is_refused(hosts: Hosts) -> None:
    _run(hosts)
    hosts.dst("run", SID, "--workload", "kv:4", "--port", "0", timeout=120)
    theirs = digest(hosts.dst, SID)
    serve = hosts.serve()
    proc = hosts.migrate(SID, serve)
    line = _one_line_error(proc)
    assert "already exists" in line
    assert running(hosts.src) == [SID] and running(hosts.dst) == [SID]
    assert digest(hosts.dst, SID) == theirs  # the destination's own sandbox, untouched
    assert leftovers(hosts) == []


@pytest.mark.parametrize("phase", ["round", "frozen", "restored"])
def test_destination_killed_leaves_the_source_running(hosts: Hosts, phase: str) -> None:
    """``restored``: the server dies after restoring, before the source commits; its
    guard stops what it restored, and the source sees it gone and resumes."""
    _run(hosts)
    acked = _put(hosts, 0, 100)
    before = digest(hosts.src, SID)
    serve = hosts.serve()
    cli = hosts.migrate_popen(SID, serve, env={"CKPT_FAULT": f"pause:migrate:{phase}"})
    try:
        wait_for(lambda: stopped(cli), f"the migrate CLI to stop at {phase}", 120)
        serve.proc.kill()
        serve.proc.wait(30)
        cli.send_signal(signal.SIGCONT)
        _, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 1 and len(err.strip().splitlines()) == 1, err
    wait_for(lambda: running(hosts.dst) == [], "the destination's guard to stop its copy", 60)
    assert running(hosts.src) == [SID]
    assert digest(hosts.src, SID) == before
    check_values(address(hosts.src, SID), acked)
    hosts.serve()  # a new server sweeps what the killed one was receiving
    assert leftovers(hosts) == []


@pytest.mark.parametrize("phase", ["round", "frozen"])
def test_source_cli_killed_leaves_the_source_running(hosts: Hosts, phase: str) -> None:
    _run(hosts)
    acked = _put(hosts, 0, 100)
    before = digest(hosts.src, SID)
    serve = hosts.serve()
    cli = hosts.migrate_popen(SID, serve, env={"CKPT_FAULT": f"pause:migrate:{phase}"})
    try:
        wait_for(lambda: stopped(cli), f"the migrate CLI to stop at {phase}", 120)
        cli.kill()
        cli.wait(30)
    finally:
        if cli.poll() is None:
            cli.kill()
    # the CLI's guard resumes the source; the server sees the connection end and discards
    wait_for(lambda: leftovers(hosts) == [], "the guard and the server to clean up", 60)
    wait_for(
        lambda: any(line.startswith("migration failed") for line in serve.lines()),
        "the server to give up on the session",
        60,
    )
    wait_for(lambda: hosts.src.state(SID)["status"] == "running", "the source to resume", 60)
    assert running(hosts.src) == [SID] and running(hosts.dst) == []
    assert digest(hosts.src, SID) == before
    check_values(address(hosts.src, SID), acked)
    assert serve.proc.poll() is None  # the server goes on serving


def test_destination_disk_full_is_refused_and_the_source_runs_on(hosts: Hosts) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    hosts.dst.root.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(hosts.dst.root)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        _run(hosts, "memory:16")  # pages that do not compress: more than 1 MiB
        serve = hosts.serve()
        line = _one_line_error(hosts.migrate(SID, serve))
        assert "disk is full" in line
        assert running(hosts.src) == [SID] and running(hosts.dst) == []
        assert leftovers(hosts) == []
        assert serve.stop() == 0
    finally:
        stop_template(hosts.dst.root)  # while its socket is still on the mount
        subprocess.run(["umount", "-l", str(hosts.dst.root)], check=False)


def test_serve_refuses_to_start_without_a_key(hosts: Hosts) -> None:
    proc = hosts.dst("serve", "--listen", "127.0.0.1:0", check=False)
    assert proc.returncode == 2  # a usage error
    assert proc.stderr.startswith("error: a key file is required")
    assert len(proc.stderr.strip().splitlines()) == 1
    loose = make_key(hosts.tmp / "loose")
    os.chmod(loose, 0o644)
    proc = hosts.dst("serve", "--listen", "127.0.0.1:0", "--key-file", str(loose), check=False)
    assert proc.returncode == 1 and "chmod 600" in proc.stderr


def test_serve_detach_prints_its_pid_and_stops_on_sigterm(hosts: Hosts) -> None:
    proc = hosts.dst(
        "serve", "--listen", "127.0.0.1:0", "--key-file", str(hosts.key), "--detach", timeout=60
    )
    pid_text, _, rest = proc.stdout.strip().partition(" ")
    pid = int(pid_text)
    try:
        assert rest.startswith("listening on 127.0.0.1:")
        assert psutil.Process(pid).is_running()
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_for(lambda: gone(pid), "the detached server to stop", 30)
    assert "stopping on SIGTERM" in (hosts.dst.root / "serve.log").read_text()


def test_forward_serves_clients_at_the_old_address(hosts: Hosts) -> None:
    _run(hosts)
    acked = _put(hosts, 0, 50)
    old = address(hosts.src, SID)
    serve = hosts.serve()
    cli = hosts.src.popen(
        "migrate", SID, "--to", serve.address, "--key-file", str(hosts.key), "--port", "0",
        "--forward", "8",
    )  # fmt: skip
    try:
        line = cli.stdout.readline()  # printed once migrated, before the relay starts
        assert line.startswith(f"migrated {SID}"), line or cli.stderr.read()
        new = address(hosts.dst, SID)
        assert new != old

        def relayed() -> bool:
            try:
                check_values(old, acked)  # through the relay, from the destination
            except OSError:
                return False
            return True

        wait_for(relayed, "the relay on the old address", 30)
        cli.wait(60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait(10)
    assert cli.returncode == 0, cli.stderr.read()


def test_source_cli_killed_after_the_commit_leaves_the_destination_running(
    hosts: Hosts,
) -> None:
    _run(hosts)
    acked = _put(hosts, 0, 100)
    before = digest(hosts.src, SID)
    serve = hosts.serve()
    cli = hosts.migrate_popen(SID, serve, env={"CKPT_FAULT": "pause:migrate:committed"})
    try:
        wait_for(lambda: stopped(cli), "the migrate CLI to stop once committed", 120)
        cli.kill()
        cli.wait(30)
    finally:
        if cli.poll() is None:
            cli.kill()
    # the guard deletes the source's copy: the destination runs the sandbox
    wait_for(lambda: not hosts.src.root.joinpath(SID).exists(), "the guard to delete it", 60)
    wait_for(lambda: leftovers(hosts) == [], "the guard to clean up", 60)
    assert running(hosts.src) == [] and running(hosts.dst) == [SID]
    assert digest(hosts.dst, SID) == before
    check_values(address(hosts.dst, SID), acked)


def test_source_cli_killed_after_sending_done_leaves_one_running_copy(hosts: Hosts) -> None:
    """Done has left: the destination reads it and keeps the sandbox; the CLI's guard
    heard COMMITTING, so it leaves the source's copy paused, never running beside it."""
    _run(hosts)
    acked = _put(hosts, 0, 100)
    before = digest(hosts.src, SID)
    serve = hosts.serve()
    cli = hosts.migrate_popen(SID, serve, env={"CKPT_FAULT": "pause:migrate:committing"})
    try:
        wait_for(lambda: stopped(cli), "the migrate CLI to stop after sending Done", 120)
        wait_for(
            lambda: any(line.startswith(f"received {SID}") for line in serve.lines()),
            "the destination to commit",
            60,
        )
        cli.kill()
        cli.wait(30)
    finally:
        if cli.poll() is None:
            cli.kill()
    wait_for(lambda: not list(hosts.src.root.glob(".migrate-*")), "the guard to finish", 60)
    assert running(hosts.dst) == [SID] and running(hosts.src) == []
    assert hosts.src.state(SID)["status"] == "paused"  # for the user to delete
    assert digest(hosts.dst, SID) == before
    check_values(address(hosts.dst, SID), acked)


@pytest.fixture
def cert_and_key(tmp_path):  # type: ignore[no-untyped-def]
    return test_tls.self_signed.__wrapped__(tmp_path)  # the same cert, made the same way


def test_migration_over_tls(hosts: Hosts, cert_and_key) -> None:
    cert, tls_key = cert_and_key
    _run(hosts)
    acked = _put(hosts, 0, 50)
    before = digest(hosts.src, SID)
    serve = hosts.serve(None, "--tls-cert", str(cert), "--tls-key", str(tls_key))
    plain = hosts.migrate(SID, serve)  # a source without the CA cannot speak to it
    assert plain.returncode == 1 and running(hosts.src) == [SID]
    proc = hosts.migrate(SID, serve, "--tls-ca", str(cert))
    assert proc.returncode == 0, proc.stderr
    assert running(hosts.dst) == [SID] and running(hosts.src) == []
    assert digest(hosts.dst, SID) == before
    check_values(address(hosts.dst, SID), acked)


def test_no_pre_copy_round_sends_everything_in_the_final_image(hosts: Hosts) -> None:
    _run(hosts, "kv:4")
    acked = _put(hosts, 0, 60)
    before = digest(hosts.src, SID)
    serve = hosts.serve()
    proc = hosts.migrate(SID, serve, "--rounds", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    (final,) = json.loads(proc.stdout)["rounds"]
    assert final["final"] and final["pages"] > 0
    assert digest(hosts.dst, SID) == before
    check_values(address(hosts.dst, SID), acked)
