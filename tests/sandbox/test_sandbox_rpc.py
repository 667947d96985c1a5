"""The control socket: replies, error classes carried across, and 'busy' for overlap."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ckpt.errors import IntegrityError, SandboxBusy, SandboxError
from ckpt.sandbox import rpc


@pytest.fixture
def server(tmp_path: Path):
    started = threading.Event()
    release = threading.Event()

    def slow(params: dict) -> dict:
        started.set()
        release.wait(120)  # set by the test (or the teardown); the bound only ends a hang
        return {"done": params.get("n")}

    def bad_image(params: dict) -> None:
        raise IntegrityError("checkpoint.img: HMAC mismatch (wrong key?)")

    def crash(params: dict) -> None:
        raise RuntimeError("boom")

    srv = rpc.Server(
        tmp_path / "ctl.sock",
        {
            "ping": lambda p: {"pong": True},
            "slow": slow,
            "bad": bad_image,
            "crash": crash,
            "echo": lambda p: p,
        },
    )
    srv.start()
    srv.started, srv.release = started, release  # type: ignore[attr-defined]
    yield srv
    release.set()
    srv.close()


def test_call_returns_the_result(server: rpc.Server) -> None:
    assert rpc.call(server.path, "echo", {"a": [1, "x"]}) == {"a": [1, "x"]}


def test_ckpt_error_class_crosses_the_socket(server: rpc.Server) -> None:
    with pytest.raises(IntegrityError, match="HMAC mismatch"):
        rpc.call(server.path, "bad")


def test_internal_error_becomes_sandbox_error_and_server_keeps_serving(server: rpc.Server) -> None:
    with pytest.raises(SandboxError, match="RuntimeError: boom"):
        rpc.call(server.path, "crash")
    assert rpc.call(server.path, "ping") == {"pong": True}


def test_unknown_method(server: rpc.Server) -> None:
    with pytest.raises(SandboxError, match="unknown method 'nope'"):
        rpc.call(server.path, "nope")


def test_second_exclusive_request_is_busy_but_ping_answers(server: rpc.Server) -> None:
    results: list = []
    t = threading.Thread(target=lambda: results.append(rpc.call(server.path, "slow", {"n": 1})))
    t.start()
    assert server.started.wait(60)  # type: ignore[attr-defined]
    with pytest.raises(SandboxBusy, match="busy with slow"):
        rpc.call(server.path, "slow", {"n": 2})
    assert rpc.call(server.path, "ping") == {"pong": True}
    server.release.set()  # type: ignore[attr-defined]
    t.join(60)
    assert results == [{"done": 1}]
    assert rpc.call(server.path, "echo", {"after": 1}) == {"after": 1}


def test_no_server_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="not answering"):
        rpc.call(tmp_path / "missing.sock", "ping")


def test_malformed_request_gets_an_error_reply(server: rpc.Server) -> None:
    import json
    import socket

    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(server.path))
        s.sendall(b"{not json\n")
        reply = json.loads(s.makefile().readline())
    assert reply["ok"] is False and "bad request" in reply["error"]
