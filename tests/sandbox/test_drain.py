"""The drain before a checkpoint that stops the sandbox, through the real CLI:
it stops accepting, waits for the requests already read, and parks idle connections.
A request half sent when the checkpoint starts is held across it and answered by the
old sandbox; past ``--drain-timeout`` the checkpoint fails in one line and the sandbox
serves on, the half-sent request included.  A checkpoint that fails later undrains.

Every request goes to 127.0.0.1; every wait is bounded; no test asserts a timing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cli
from .handover_kit import (
    HOST,
    WAIT_S,
    busy_with,
    checkpoint,
    error_line,
    free_port,
    held,
    restore,
    run_http,
    sid,
    start_template,
    wait_for,
)

pytestmark = pytest.mark.slow


HALF = f"GET /half HTTP/1.1\r\nHost: {HOST}\r\n".encode()  # the blank line is missing
REST = b"\r\n"


def test_a_half_sent_request_is_held_across_the_checkpoint_and_answered(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    start_template(tcli)
    port, web, image = free_port(), sid("half"), tmp_path / "img"
    st = run_http(tcli, web, port)
    conn = clients(port)
    assert conn.get()["requests"] == 1  # accepted and served: the server reads what comes
    conn.send(HALF)
    pending = tcli.popen(
        "checkpoint", web, "--image-path", str(image), "--json", "--drain-timeout", "120"
    )
    try:
        wait_for(lambda: busy_with(st) == "checkpoint", "the checkpoint to start")
        assert pending.poll() is None  # the drain waits for the half-sent request
        assert not image.exists()  # and nothing is frozen or written before it ends
        conn.send(REST)
        status, body = conn.response()
    finally:
        out, err = pending.communicate(timeout=WAIT_S)
    assert status == 200 and body["path"] == "/half", body
    assert body["restores"] == 0 and body["requests"] == 2  # the old sandbox answered
    assert pending.returncode == 0, err
    c = json.loads(out)["timings"]["counters"]
    assert c["connections_parked"] == 1 and c["handover"] == "template", c
    # the answered request is in the image, and the connection goes on after the restore
    assert restore(tcli, web, image)["connections_adopted"] == 1
    after = conn.get()
    assert after["restores"] == 1 and after["requests"] == 3, after


def test_a_drain_that_times_out_fails_in_one_line_and_serves_on(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    start_template(tcli)
    port, web, image = free_port(), sid("late"), tmp_path / "img"
    st = run_http(tcli, web, port)
    idle, conn = clients(port), clients(port)
    idle.get()  # parked by the drain, served again after it fails
    conn.get()
    conn.send(HALF)
    proc = tcli(
        "checkpoint", web, "--image-path", str(image), "--drain-timeout", "0.5", check=False
    )
    line = error_line(proc)
    assert "1 request(s) still in progress" in line and "--drain-timeout" in line, line
    assert not image.exists()
    now = tcli.state(web)
    assert now["status"] == "running" and now["pid"] == st["pid"]
    assert held(tcli) == {}
    assert tcli.get(web)["requests"] == 3  # a new connection is accepted again
    assert idle.get()["requests"] == 4  # and the parked one is served again
    conn.send(REST)  # the half-sent request is still being read, and is answered
    status, body = conn.response()
    assert status == 200 and body["path"] == "/half" and body["requests"] == 5, body
    assert conn.get()["requests"] == 6
    # nothing is left of the failed drain: the next checkpoint drains and parks, and
    # with nothing in flight it needs no time at all
    c = checkpoint(tcli, web, image, "--drain-timeout", "0")
    assert c["connections_parked"] == 2 and c["handover"] == "template", c
    restore(tcli, web, image)
    assert conn.get()["requests"] == 7 and idle.get()["restores"] == 1


def test_a_zero_drain_timeout_is_kept_not_replaced_by_the_default(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    """``--drain-timeout 0`` (allowed by the CLI) means no wait, not the 10 s default."""
    start_template(tcli)
    port, web, image = free_port(), sid("zero"), tmp_path / "img"
    run_http(tcli, web, port)
    conn = clients(port)
    conn.get()
    conn.send(HALF)
    proc = tcli("checkpoint", web, "--image-path", str(image), "--drain-timeout", "0", check=False)
    line = error_line(proc)
    assert "after 0 s" in line, line
    conn.send(REST)
    assert conn.response()[0] == 200


def test_a_checkpoint_that_fails_after_the_drain_undrains(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    start_template(tcli)
    port, web, image = free_port(), sid("undrain"), tmp_path / "img"
    st = run_http(tcli, web, port)
    conn = clients(port)
    conn.get()
    image.mkdir()
    (image / "precious").write_text("keep me")
    proc = tcli("checkpoint", web, "--image-path", str(image), check=False)
    assert "not an image directory" in error_line(proc, 4)  # refused as unsafe
    assert tcli.state(web)["pid"] == st["pid"] and held(tcli) == {}
    assert conn.get()["restores"] == 0  # the parked connection is served again
    assert tcli.get(web)["requests"] == 3  # and new ones are accepted


def test_checkpointing_a_paused_sandbox_with_a_waiting_request(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    """A request read while the sandbox is paused waits for the kernel, so the drain
    cannot finish it.  Either the checkpoint still succeeds and the request is answered
    once (by the restored sandbox), or it fails saying the sandbox is paused (not that
    it "goes on serving", nor that more --drain-timeout would help), stays paused, and
    answers the request on resume."""
    start_template(tcli)
    port, web, image = free_port(), sid("paused"), tmp_path / "img"
    run_http(tcli, web, port)
    conn = clients(port)
    conn.get()
    tcli("pause", web)
    conn.request("/waiting")
    proc = tcli("checkpoint", web, "--image-path", str(image), "--drain-timeout", "1", check=False)
    if proc.returncode == 0:
        restore(tcli, web, image)
        status, body = conn.response()
        assert status == 200 and body["restores"] == 1 and body["requests"] == 2, body
        return
    line = error_line(proc)
    assert tcli.state(web)["status"] == "paused"
    tcli("resume", web)
    status, body = conn.response()
    assert status == 200 and body["path"] == "/waiting" and body["requests"] == 2, body
    assert "paused" in line and "goes on serving" not in line, line
