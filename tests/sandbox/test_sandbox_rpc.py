"""The control socket: typed replies, error classes carried across, 'busy' for overlap,
and requests that are not of this protocol refused with one line that says so."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from ckpt.errors import IntegrityError, SandboxBusy, SandboxError
from ckpt.sandbox.wire import protocol as p
from ckpt.sandbox.wire import rpc


@pytest.fixture
def server(tmp_path: Path):
    started = threading.Event()
    release = threading.Event()

    def slow(request: p.CheckpointRequest) -> p.CheckpointReply:
        started.set()
        release.wait(120)  # set by the test (or the teardown); the bound only ends a hang
        return p.CheckpointReply(
            checkpoint_ns=1, cpu_usec=2, stopping=False, handover_detail=request.image
        )

    def bad_image(request: p.RestoreRequest) -> p.RestoreReply:
        raise IntegrityError("checkpoint.img: HMAC mismatch (wrong key?)")

    def crash(request: p.PauseRequest) -> p.FrozenReply:
        raise RuntimeError("boom")

    srv = rpc.Server(
        tmp_path / "ctl.sock",
        {
            "ping": lambda r: p.PingReply(pid=1, booted=True, frozen=False),
            "checkpoint": slow,
            "restore": bad_image,
            "pause": crash,
            "boot": lambda r: p.BootReply(address=r.workload, cpu_usec=r.port),
        },
    )
    srv.start()
    srv.started, srv.release = started, release  # type: ignore[attr-defined]
    yield srv
    release.set()
    srv.close()


def _raw(server: rpc.Server, line: bytes) -> p.Envelope:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(str(server.path))
        s.sendall(line)
        return p.decode_envelope(s.makefile("rb").readline())


def test_call_returns_the_verbs_reply_type(server: rpc.Server) -> None:
    reply = rpc.call(server.path, p.BootRequest(workload="http", port=8080))
    assert reply == p.BootReply(address="http", cpu_usec=8080)
    assert type(reply) is p.BootReply


def test_ckpt_error_class_crosses_the_socket(server: rpc.Server) -> None:
    with pytest.raises(IntegrityError, match="HMAC mismatch"):
        rpc.call(server.path, p.RestoreRequest(image="/x"))


def test_internal_error_becomes_sandbox_error_and_server_keeps_serving(server: rpc.Server) -> None:
    with pytest.raises(SandboxError, match="RuntimeError: boom"):
        rpc.call(server.path, p.PauseRequest())
    assert rpc.call(server.path, p.PingRequest()).booted is True


def test_a_verb_without_a_handler_is_named(server: rpc.Server) -> None:
    with pytest.raises(SandboxError, match="unknown verb 'stop'"):
        rpc.call(server.path, p.StopRequest())


def test_second_exclusive_request_is_busy_but_ping_answers(server: rpc.Server) -> None:
    results: list = []
    t = threading.Thread(
        target=lambda: results.append(rpc.call(server.path, p.CheckpointRequest(image="/1")))
    )
    t.start()
    assert server.started.wait(60)  # type: ignore[attr-defined]
    with pytest.raises(SandboxBusy, match="busy with checkpoint"):
        rpc.call(server.path, p.CheckpointRequest(image="/2"))
    assert rpc.call(server.path, p.PingRequest()).pid == 1
    server.release.set()  # type: ignore[attr-defined]
    t.join(60)
    assert [r.handover_detail for r in results] == ["/1"]
    assert rpc.call(server.path, p.BootRequest(workload="after")).address == "after"


def test_no_server_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="not answering"):
        rpc.call(tmp_path / "missing.sock", p.PingRequest())


def test_malformed_request_gets_an_error_reply(server: rpc.Server) -> None:
    env = _raw(server, b"{not json\n")
    assert env.ok is False and env.kind == "SandboxError" and "bad request" in env.error


def test_a_request_of_another_protocol_gets_one_line_naming_both_versions(
    server: rpc.Server,
) -> None:
    """An older CLI's untyped request and a newer CLI's typed one are both refused with
    the versions named, and the sandbox goes on serving."""
    for line, theirs in (
        (b'{"method":"checkpoint","params":{"image":"/x"}}\n', 0),
        (b'{"verb":"ping","protocol":2}\n', 2),
    ):
        env = _raw(server, line)
        assert env.ok is False and env.kind == "SandboxError", env
        assert f"control protocol {theirs}, this sandbox speaks {p.PROTOCOL}" in env.error
    assert rpc.call(server.path, p.PingRequest()).pid == 1


def test_a_reply_of_the_wrong_shape_is_a_sandbox_error(tmp_path: Path) -> None:
    """A peer that answers with something that is not the verb's reply type is refused
    as a malformed reply, not handed on as a dict."""
    path = tmp_path / "odd.sock"
    srv = rpc.Server(path, {"ping": lambda r: p.BootReply(address=None, cpu_usec=1)})
    srv.start()
    try:
        with pytest.raises(SandboxError, match="malformed reply to ping"):
            rpc.call(path, p.PingRequest())
    finally:
        srv.close()
