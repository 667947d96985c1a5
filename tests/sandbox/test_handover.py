"""The drain and socket handover, through the real CLI: the listening socket and idle keep-alive connections
go to the warm template at a checkpoint and come back at the restore, so a client that
arrives in between is answered late but never refused, and an open connection is never
cut.  Also the fallback without a template, delete/kill/template stop while a socket is
held, a restore elsewhere, a failed restore (the socket stays held for a retry), and
leaks: the template's descriptors and TCP sockets are counted in /proc.

Every request goes to 127.0.0.1, on a port picked free for the test (a restore reuses
it).  Every wait is bounded and ends as soon as the event happens; no test asserts a
timing.  The ``cli`` fixture asserts that no process (template included) and no cgroup
is left.  The helpers are in handover_kit.py, shared with test_drain.py and
test_handover_template.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckpt.sandbox.client import template_client

from .conftest import Cli, cgroup_dirs, sandbox_processes
from .handover_kit import (
    HOST,
    WAIT_S,
    bindable,
    checkpoint,
    counters,
    error_line,
    free_port,
    gone,
    held,
    held_cli,
    refused,
    request_bytes,
    restore,
    run_http,
    sid,
    start_template,
    steady_fds,
    tcp_sockets,
    wait_for,
)

pytestmark = pytest.mark.slow

# -- a request that arrives while no sandbox runs -------------------------------------


def test_requests_sent_in_the_gap_are_answered_after_the_restore(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    """New connections made while no sandbox runs wait in the held listener's backlog;
    requests on parked keep-alive connections wait in their socket buffers.  All are
    answered once, by the restored sandbox, and the count goes on."""
    tpl = start_template(tcli)
    port, web, image = free_port(), sid("gap"), tmp_path / "img"
    run_http(tcli, web, port)
    baseline = steady_fds(tpl)
    parked = [clients(port) for _ in range(5)]
    assert sorted(p.get()["requests"] for p in parked) == [1, 2, 3, 4, 5]
    c = checkpoint(tcli, web, image)
    assert c["handover"] == "template" and c["connections_parked"] == 5, c
    assert held(tcli)[web]["sockets"] == 6
    assert tcp_sockets(tpl) == [(port, "ESTABLISHED")] * 5 + [(port, "LISTEN")]
    waiting = [clients(port) for _ in range(3)]  # connect: no refusal while none runs
    for w in waiting + parked:
        w.request("/gap")
    r = restore(tcli, web, image)
    assert r["listener"] == "handed over" and r["connections_adopted"] == 5, r
    answers = [w.response() for w in waiting + parked]
    assert all(s == 200 for s, _ in answers), answers
    assert all(b["restores"] == 1 and b["path"] == "/gap" for _, b in answers), answers
    assert sorted(b["requests"] for _, b in answers) == list(range(6, 14))  # each once
    assert tcli.get(web)["requests"] == 14
    assert held(tcli) == {}
    assert tcp_sockets(tpl) == [] and steady_fds(tpl) == baseline


def test_a_request_during_the_checkpoint_waits_for_the_restored_sandbox(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    """Sent after the drain, while the old sandbox still writes its image: the old one
    has stopped accepting, so the restored one answers it."""
    start_template(tcli)
    release = tmp_path / "release"
    port, web, image = free_port(), sid("during"), tmp_path / "img"
    st = run_http(tcli, web, port, env={"CKPT_FAULT": f"checkpoint-stall:120:{release}"})
    pending = tcli.popen("checkpoint", web, "--image-path", str(image))
    try:
        log = tcli.root / web / "sandbox.log"
        wait_for(lambda: "stalling" in log.read_text(), "the checkpoint to stall")
        late = clients(port)
        late.request("/late")
        assert not gone(st["pid"])  # the old sandbox is alive, and drained
    finally:
        release.touch()
    _, err = pending.communicate(timeout=WAIT_S)
    assert pending.returncode == 0, err
    assert restore(tcli, web, image)["listener"] == "handed over"
    status, body = late.response()
    assert status == 200 and body["restores"] == 1 and body["requests"] == 1, body


def test_an_idle_keepalive_connection_survives_two_cycles(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    tpl = start_template(tcli)
    port, web = free_port(), sid("keep")
    run_http(tcli, web, port)
    baseline = steady_fds(tpl)
    conn = clients(port)
    assert conn.get()["restores"] == 0
    for cycle in (1, 2):
        image = tmp_path / f"img{cycle}"
        c = checkpoint(tcli, web, image)
        assert c["connections_parked"] == 1 and c["handover"] == "template", c
        assert held(tcli)[web]["sockets"] == 2
        assert tcp_sockets(tpl) == [(port, "ESTABLISHED"), (port, "LISTEN")]
        # two pipelined requests on the parked connection, while no sandbox runs
        conn.send(request_bytes(f"/a{cycle}") + request_bytes(f"/b{cycle}"))
        r = restore(tcli, web, image)
        assert r["listener"] == "handed over" and r["connections_adopted"] == 1, r
        answers = [conn.response(), conn.response()]
        assert [(s, b["path"], b["requests"], b["restores"]) for s, b in answers] == [
            (200, f"/a{cycle}", 3 * cycle - 1, cycle),
            (200, f"/b{cycle}", 3 * cycle, cycle),
        ], answers
        assert conn.get()["requests"] == 3 * cycle + 1  # still keep-alive in the new sandbox
        # the same socket all along, and the template let go of its copies
        assert conn.sock.fileno() == conn.fileno and conn.sock.getsockname() == conn.local
        assert held(tcli) == {}
        assert tcp_sockets(tpl) == [] and steady_fds(tpl) == baseline
        pid = tcli.state(web)["pid"]
        assert tcp_sockets(pid) == [(port, "ESTABLISHED"), (port, "LISTEN")]


def test_a_restore_on_another_port_serves_there_and_lets_the_old_port_go(
    tcli: Cli, tmp_path: Path
) -> None:
    """The held listener is on the old port: the restore binds the new one and serves,
    and (a restore elsewhere) the template closes the held socket: otherwise
    clients of the old port would wait in a backlog nobody accepts from until the hold
    times out."""
    tpl = start_template(tcli)
    port, new_port, web, image = free_port(), free_port(), sid("port"), tmp_path / "img"
    run_http(tcli, web, port)
    checkpoint(tcli, web, image)
    r = restore(tcli, web, image, "--port", str(new_port))
    assert r["listener"].startswith("bound anew") and str(port) in r["listener"], r
    assert tcli.state(web)["address"] == f"{HOST}:{new_port}"
    assert tcli.get(web)["restores"] == 1
    assert held(tcli) == {}
    assert tcp_sockets(tpl) == []
    assert bindable(port)


# -- no template ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["flag", "env"])
def test_without_a_template_the_restore_binds_anew_and_says_so(
    cli: Cli, tmp_path: Path, clients: Any, how: str
) -> None:
    port, web, image = free_port(), sid(f"cold{how}"), tmp_path / "img"
    cli.ids.add(web)
    if how == "env":
        cli.env["CKPT_TEMPLATE"] = "0"
        pre: tuple[str, ...] = ()
    else:
        cli.env.pop("CKPT_TEMPLATE", None)
        pre = ("--no-template",)
    out = cli(*pre, "run", web, "--workload", "http", "--port", str(port), "--json")
    assert counters(out)["sandbox_start"] == "cold"
    conn = clients(port)
    assert conn.get()["requests"] == 1
    pid = cli.state(web)["pid"]
    c = counters(cli(*pre, "checkpoint", web, "--image-path", str(image), "--json"))
    assert c["handover"].startswith("none"), c
    assert gone(pid)
    assert conn.closed_by_server()  # cut, not left hanging
    assert refused(port)  # nothing holds the port in the gap
    out = cli(*pre, "restore", web, "--image-path", str(image), "--json")
    r = counters(out)
    assert r["sandbox_start"] == "cold"
    assert r["listener"].startswith("bound anew") and r["connections_adopted"] == 0, r
    assert "bound anew" in " ".join(out.stderr.split())
    body = cli.get(web)
    assert body["restores"] == 1 and body["requests"] == 2
    assert template_client.status(cli.root) is None  # and none was started meanwhile


# -- delete, kill and template stop while a socket is held -----------------------------


@pytest.mark.parametrize("verb", ["delete", "kill"])
def test_delete_or_kill_closes_the_held_sockets(
    tcli: Cli, tmp_path: Path, clients: Any, verb: str
) -> None:
    tpl = start_template(tcli)
    port, web, image = free_port(), sid(verb), tmp_path / "img"
    run_http(tcli, web, port)
    baseline = steady_fds(tpl)
    conn = clients(port)
    conn.get()
    checkpoint(tcli, web, image)
    assert held_cli(tcli)[web]["sockets"] == 2
    assert steady_fds(tpl) == baseline + 2
    tcli(verb, web)
    assert held_cli(tcli) == {}
    assert tcp_sockets(tpl) == [] and steady_fds(tpl) == baseline
    assert conn.closed_by_server()
    assert refused(port)
    assert bindable(port)
    if verb == "kill":  # the sandbox is still there, stopped: a restore binds anew
        assert tcli.state(web)["status"] == "stopped"
        r = restore(tcli, web, image)
        assert r["listener"] == "bound anew (nothing held)", r
        assert tcli.get(web)["restores"] == 1
    else:
        assert not (tcli.root / web).exists()


def test_template_stop_closes_the_held_sockets_and_the_restore_binds_anew(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    start_template(tcli)
    port, web, image = free_port(), sid("tstop"), tmp_path / "img"
    run_http(tcli, web, port)
    conn = clients(port)
    conn.get()
    checkpoint(tcli, web, image)
    tcli("template", "stop")
    assert conn.closed_by_server()
    assert refused(port) and bindable(port)
    r = restore(tcli, web, image)
    assert r["listener"].startswith("bound anew"), r
    assert tcli.get(web)["restores"] == 1


# -- a failed restore keeps the socket for a retry -------------------------------------


def _flip_pages(image: Path) -> None:
    data = bytearray((image / "pages.img").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (image / "pages.img").write_bytes(bytes(data))


def _cut_state_tail(image: Path) -> None:
    data = (image / "checkpoint.img").read_bytes()
    (image / "checkpoint.img").write_bytes(data[: len(data) - 64])


@pytest.mark.parametrize("damage", [_flip_pages, _cut_state_tail], ids=["pages", "state-tail"])
def test_a_failed_restore_keeps_the_held_socket_for_a_retry(
    tcli: Cli, tmp_path: Path, clients: Any, damage: Callable[[Path], None]
) -> None:
    tpl = start_template(tcli)
    port, web = free_port(), sid("retry")
    image, good = tmp_path / "img", tmp_path / "good"
    run_http(tcli, web, port)
    baseline = steady_fds(tpl)
    conn = clients(port)
    conn.get()
    checkpoint(tcli, web, image)
    shutil.copytree(image, good)
    damage(image)
    late = clients(port)
    late.request("/late")
    proc = tcli("restore", web, "--image-path", str(image), check=False)
    error_line(proc)
    # nothing of the failed sandbox is left; the template holds on
    assert [p.pid for p in sandbox_processes(tcli.root)] == [tpl]
    assert cgroup_dirs(web) == [] and not (tcli.root / web).exists()
    assert held(tcli)[web]["sockets"] == 2
    assert tcp_sockets(tpl) == [(port, "ESTABLISHED"), (port, "LISTEN")]
    assert not bindable(port)
    r = restore(tcli, web, good)
    assert r["listener"] == "handed over" and r["connections_adopted"] == 1, r
    status, body = late.response()
    assert status == 200 and body["restores"] == 1 and body["requests"] == 2, body
    assert conn.get()["requests"] == 3
    assert held(tcli) == {}
    assert tcp_sockets(tpl) == [] and steady_fds(tpl) == baseline
