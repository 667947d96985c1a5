"""Held sockets and deadlines that a user can trust, through the real CLI.

- The sockets a checkpoint hands to the template go back to a restore of the same
  sandbox ID only: a copy of the image restored under another ID binds anew (or fails
  in one line naming ``--port``) and never takes them from their owner.
- A template that dies between a checkpoint and its restore loses what it held; the
  restore says so in one line and serves.
- A template too slow to answer a spawn is left running while it holds sockets: the
  restore starts cold and takes them over, so no queued or parked client is lost.
- A restore that hangs ends at its deadline (``CKPT_RESTORE_TIMEOUT_S``) with one line
  and leaves no process, cgroup or file behind.

Loopback only; every wait is bounded and ends as soon as the event happens; no test
asserts a timing.  The ``cli`` fixture asserts that nothing is left at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from ckpt.errors import EXIT_DEADLINE

from .conftest import Cli, cgroup_dirs, sandbox_processes
from .handover_kit import (
    HOST,
    WAIT_S,
    bindable,
    checkpoint,
    error_line,
    free_port,
    gone,
    held,
    restore,
    run_http,
    sid,
    start_template,
    tcp_sockets,
    wait_for,
)

pytestmark = pytest.mark.slow


def _notes(proc: Any) -> list[str]:
    return [line[len("note: ") :] for line in proc.stderr.splitlines() if line.startswith("note: ")]


# -- the held sockets belong to the sandbox that was checkpointed ----------------------


def test_a_restore_into_another_id_leaves_the_held_sockets_to_their_owner(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    tpl = start_template(tcli)
    port, web, other, image = free_port(), sid("own"), sid("copy"), tmp_path / "img"
    run_http(tcli, web, port)
    conn = clients(port)
    conn.get()
    checkpoint(tcli, web, image)
    # the copy wants the saved port, which the template holds for web: one line, --port
    proc = tcli("restore", other, "--image-path", str(image), check=False)
    line = error_line(proc)
    assert "--port" in line and web in line, line
    assert not (tcli.root / other).exists() and cgroup_dirs(other) == []
    assert tcli.state(web)["status"] == "stopped"  # the owner's record is untouched
    assert held(tcli)[web]["sockets"] == 2
    # with a free port the copy serves there, and still leaves web's sockets alone
    r = restore(tcli, other, image, "--port", "0")
    assert r["listener"].startswith("bound anew") and r["connections_adopted"] == 0, r
    assert tcli.state(other)["address"] != f"{HOST}:{port}"
    assert tcli.get(other)["restores"] == 1
    assert held(tcli)[web]["sockets"] == 2
    assert tcli.state(web)["status"] == "stopped"
    # the owner's restore gets its listener and its parked connection back
    r = restore(tcli, web, image)
    assert r["listener"] == "handed over" and r["connections_adopted"] == 1, r
    assert conn.get()["requests"] == 2
    assert held(tcli) == {} and tcp_sockets(tpl) == []


def test_two_restores_of_one_image_at_once_the_owner_gets_its_sockets(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    """Whichever starts first, the restore into the image's own ID takes the held
    listener and its parked connection; the one into another ID fails in one line
    naming --port (the port is taken) and deletes nothing of the owner."""
    start_template(tcli)
    port, web, other, image = free_port(), sid("own2"), sid("copy2"), tmp_path / "img"
    run_http(tcli, web, port)
    conn = clients(port)
    conn.get()
    checkpoint(tcli, web, image)
    tcli.ids.add(other)
    procs = {
        x: tcli.popen("restore", x, "--image-path", str(image), "--json") for x in (other, web)
    }
    done = {}
    for x, proc in procs.items():
        out, err = proc.communicate(timeout=WAIT_S)
        done[x] = (proc.returncode, out, err)
    rc, out, err = done[web]
    assert rc == 0, err
    r = json.loads(out)["timings"]["counters"]
    assert r["listener"] == "handed over" and r["connections_adopted"] == 1, r
    rc, out, err = done[other]
    assert rc == 1 and "Traceback" not in err and err.startswith("error: "), err
    assert err.strip().count("\n") == 0 and "--port" in err, err
    assert not (tcli.root / other).exists() and cgroup_dirs(other) == []
    assert tcli.state(web)["status"] == "running"
    assert conn.get()["requests"] == 2


# -- a template that dies between the checkpoint and the restore -----------------------


def test_a_template_killed_before_the_restore_is_noted_and_the_sandbox_serves(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    tpl = start_template(tcli)
    port, web, image = free_port(), sid("tdead"), tmp_path / "img"
    run_http(tcli, web, port)
    conn = clients(port)
    conn.get()
    checkpoint(tcli, web, image)
    assert held(tcli)[web]["sockets"] == 2
    os.kill(tpl, signal.SIGKILL)
    wait_for(lambda: gone(tpl), "the template to die")
    assert conn.closed_by_server()  # what it held went with it
    proc = tcli("restore", web, "--image-path", str(image))
    notes = _notes(proc)
    lost = [n for n in notes if "handed to the template at its checkpoint are gone" in n]
    assert len(lost) == 1 and "refused" in lost[0] and "cut" in lost[0], notes
    st = tcli.state(web)
    assert st["address"] == f"{HOST}:{port}"
    assert tcli.get(web)["restores"] == 1
    assert clients(port).get()["requests"] == 3


# -- a template too slow to answer keeps what it holds ---------------------------------


def test_a_template_too_slow_to_spawn_hands_its_sockets_to_the_cold_restore(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    """The template delays every spawn's reply past the client's reply timeout (a test
    hook, as a busy host would).  The restore starts cold; the template, which holds the
    listener and a parked connection, must not be killed: every client that connected
    or sent a request in the gap is answered by the restored sandbox."""
    tpl = start_template(tcli, CKPT_FAULT="spawn-reply-delay:4")
    port, web, image = free_port(), sid("slow"), tmp_path / "img"
    tcli("--no-template", "run", web, "--workload", "http", "--port", str(port))
    parked = clients(port)
    parked.get()
    checkpoint(tcli, web, image)
    assert held(tcli)[web]["sockets"] == 2
    parked.request("/parked")
    gap = [clients(port) for _ in range(6)]  # queued in the held listener's backlog
    for c in gap:
        c.request("/gap")
    proc = tcli(
        "restore",
        web,
        "--image-path",
        str(image),
        "--json",
        env={"CKPT_TEMPLATE_REPLY_TIMEOUT_S": "1"},
    )
    for client in [parked, *gap]:  # none refused, reset or cut
        status, body = client.response()
        assert status == 200 and body["restores"] == 1, body
    c = json.loads(proc.stdout)["timings"]["counters"]
    assert c["sandbox_start"] == "cold" and "left running" in c["cold_reason"], c
    assert c["listener"] == "handed over" and c["connections_adopted"] == 1, c
    assert tcli.get(web)["requests"] == 9
    assert held(tcli) == {}
    wait_for(lambda: tcp_sockets(tpl) == [], "the template to let go of the port")
    # the child the template forked for the abandoned spawn is gone, and only it
    pid = tcli.state(web)["pid"]
    wait_for(
        lambda: {p.pid for p in sandbox_processes(tcli.root)} == {tpl, pid},
        "the abandoned child to be killed",
        timeout=30,
    )


def test_a_child_that_does_not_join_in_time_is_killed_and_the_command_starts_cold(
    tcli: Cli,
) -> None:
    """The template's wait for its forked child to join the cgroup has a deadline below
    the client's: the client hears a refusal (and leaves the template alone), and the
    child that never joined is killed."""
    tpl = start_template(tcli, CKPT_FAULT="join-stall:30")
    web = sid("join")
    out = tcli("run", web, "--workload", "http", "--json")
    c = json.loads(out.stdout)["timings"]["counters"]
    assert c["sandbox_start"] == "cold", c
    assert "could not join" in c["cold_reason"] and "killed" in c["cold_reason"], c
    assert not gone(tpl)  # refused, not killed as a wedged template would be
    pid = tcli.state(web)["pid"]
    assert {p.pid for p in sandbox_processes(tcli.root)} == {tpl, pid}
    assert tcli.get(web)["requests"] == 1


def test_a_hold_that_times_out_leaves_the_sockets_alive_for_the_restore(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    """The template takes the sockets only after the checkpointed sandbox stopped
    waiting for its answer (a test hook delays the hold; the sandbox waits 1 s).  The
    sandbox must close its descriptors without shutting the sockets down: the restore
    then adopts a live listener, and the clients of the gap are answered."""
    start_template(tcli, CKPT_FAULT="hold-delay:3")
    port, web, image = free_port(), sid("holdto"), tmp_path / "img"
    tcli(
        "run", web, "--workload", "http", "--port", str(port),
        env={"CKPT_HANDOVER_TIMEOUT_S": "1"},
    )  # fmt: skip
    parked = clients(port)
    parked.get()
    c = checkpoint(tcli, web, image)
    assert c["handover"].startswith("unknown"), c
    parked.request("/parked")
    gap = [clients(port) for _ in range(4)]
    for client in gap:
        client.request("/gap")
    r = restore(tcli, web, image)
    for client in [parked, *gap]:  # none refused, reset or cut
        status, body = client.response()
        assert status == 200 and body["restores"] == 1, body
    assert r["listener"] == "handed over" and r["connections_adopted"] == 1, r
    assert held(tcli) == {}


def test_adopt_refuses_a_held_listener_that_no_longer_listens(
    tcli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckpt.sandbox.client import template_client
    from ckpt.sandbox.wire import handover
    from ckpt.sandbox.wire.protocol import BindReason, Handover

    start_template(tcli)
    info = template_client.status(tcli.root)
    assert info is not None
    monkeypatch.setenv(handover.ENV, info["socket"])
    lst = socket.create_server((HOST, 0))
    with lst:
        assert handover.hold("hovdead", [lst]) == (Handover.TEMPLATE, "")
        lst.shutdown(socket.SHUT_RDWR)  # ends it in the template too
    listener, conns, reason, why = handover.adopt("hovdead")
    assert listener is None and conns == [] and "no longer listens" in why, why
    assert reason is BindReason.NOT_LISTENING
    assert handover.release(info["socket"], "hovdead")


# -- a restore that hangs ends at its deadline ------------------------------------------


@pytest.mark.parametrize("template", [True, False], ids=["template", "cold"])
def test_a_hung_restore_ends_at_its_deadline_and_leaves_nothing(
    tcli: Cli, tmp_path: Path, template: bool
) -> None:
    pre = () if template else ("--no-template",)
    if template:
        start_template(tcli)
    port, web, image = free_port(), sid(f"hang{int(template)}"), tmp_path / "img"
    tcli(*pre, "run", web, "--workload", "http", "--port", str(port))
    tcli(*pre, "checkpoint", web, "--image-path", str(image))
    before = {p.pid for p in sandbox_processes(tcli.root)}
    proc = tcli(
        *pre,
        "restore",
        web,
        "--image-path",
        str(image),
        check=False,
        timeout=60,
        env={"CKPT_FAULT": "restore-stall:20", "CKPT_RESTORE_TIMEOUT_S": "2"},
    )
    line = error_line(proc, EXIT_DEADLINE)
    assert "within 2 s" in line and "CKPT_RESTORE_TIMEOUT_S" in line, line
    wait_for(
        lambda: {p.pid for p in sandbox_processes(tcli.root)} <= before,
        "the hung sandbox to be gone",
    )
    assert cgroup_dirs(web) == [] and not (tcli.root / web).exists()
    if not template:
        assert bindable(port)


def test_a_fifo_for_a_statefile_ends_the_restore_within_its_deadline(
    tcli: Cli, tmp_path: Path
) -> None:
    """The restoring sandbox blocks opening a FIFO named checkpoint.img (unless the
    reader refuses it first): either way the CLI ends in one line, within the deadline,
    and leaves nothing behind."""
    web, image = sid("fifo"), tmp_path / "img"
    tcli("--no-template", "run", web, "--workload", "http")
    tcli("--no-template", "checkpoint", web, "--image-path", str(image))
    (image / "checkpoint.img").unlink()
    os.mkfifo(image / "checkpoint.img")
    proc = tcli(
        "--no-template",
        "restore",
        web,
        "--image-path",
        str(image),
        check=False,
        timeout=60,
        env={"CKPT_RESTORE_TIMEOUT_S": "3"},
    )
    error_line(proc)
    wait_for(lambda: sandbox_processes(tcli.root) == [], "the blocked sandbox to be gone")
    assert cgroup_dirs(web) == [] and not (tcli.root / web).exists()
