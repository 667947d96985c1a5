"""The destination's commit, in process, against a scripted source: its ``Restored``
carries the proof the source checks, it never answers ``Done`` with an ``Error`` (a
signal after the commit still gets ``Ack`` and keeps the sandbox), and a signal before
it cancels (the source hears ``Error``, the restored sandbox is removed).  The sandbox
calls are stand-ins: no sandbox is started."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ckpt.migration import Ack, Done, Offer, PeerError, Restored, RoundEnd, StateChunk, proof
from ckpt.migration import guard as guard_mod
from ckpt.migration import messages as m
from ckpt.migration.session import receive
from ckpt.sandbox.client import lifecycle
from ckpt.sandbox.wire.paths import Root

from .conftest import open_pair

SID = "s1"
ADDRESS = "127.0.0.1:18081"
STATE = b"the kernel state " * 100


class Signal(BaseException):
    """As ``serve``'s ``Stopping``: a SIGTERM raised wherever the server is."""


class StandIns:
    """The destination's sandbox calls: a record of what was made and removed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, status: str = "running") -> None:
        self.status = status
        self.calls: list[str] = []
        monkeypatch.setattr(lifecycle, "prepare_restore", self.prepare_restore)
        monkeypatch.setattr(lifecycle, "restore", self.restore)
        monkeypatch.setattr(lifecycle, "state", self.state)
        monkeypatch.setattr(lifecycle, "delete", self.delete)

    def prepare_restore(self, root: Any, sid: str, cpus: Any, engine: Any) -> object:
        self.calls.append("prepare")
        return object()

    def restore(self, root: Any, sid: str, image: Path, **kw: Any) -> Any:
        self.calls.append("restore")
        return SimpleNamespace(state=SimpleNamespace(address=ADDRESS), notes=[])

    def state(self, root: Any, sid: str) -> Any:
        return SimpleNamespace(status=self.status, address=ADDRESS)

    def delete(self, root: Any, sid: str, force: bool = False) -> None:
        self.calls.append("delete")


@pytest.fixture(autouse=True)
def no_template(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CKPT_TEMPLATE", "0")
    yield


def _signal_on(monkeypatch: pytest.MonkeyPatch, when: bytes) -> None:
    """The guard is told ``when``, then the server gets its signal."""
    real = guard_mod.Guard.say

    def say(self: Any, what: bytes) -> None:
        real(self, what)
        if what == when:
            raise Signal("SIGTERM")

    monkeypatch.setattr(guard_mod.Guard, "say", say)


def _session(tmp_path: Path, source, server_hook=None) -> tuple[Any, BaseException | None]:  # type: ignore[no-untyped-def]
    """Run ``receive`` against ``source(client, nonce)``; returns (what the source
    script returned, what ``receive`` raised)."""
    root = Root(tmp_path / "root")
    root.ensure()
    client, server = open_pair(server_options={"io_timeout": 10})
    if server_hook is not None:
        server_hook(server)
    raised: list[BaseException] = []

    def dest() -> None:
        try:
            receive(server, root)
        except BaseException as exc:
            raised.append(exc)
        finally:
            server.close()

    t = threading.Thread(target=dest, daemon=True)
    t.start()
    try:
        got = source(client)
    finally:
        t.join(30)
        client.close()
    assert not t.is_alive()
    return got, (raised[0] if raised else None)


NONCE = bytes(range(32))


def _send_final(client) -> Restored:  # type: ignore[no-untyped-def]
    client.send(Offer(sandbox_id=SID, workload="kv:1", engine="", pages=1 << 20, nonce=NONCE))
    assert isinstance(client.recv(), Ack)
    client.send(StateChunk(offset=0, data=STATE, last=True))
    client.send(m.pack_pages(0, [(0, b"\x01" * 4096)]))
    client.send(RoundEnd(round=0, pages=1, final=True, state_bytes=len(STATE)))
    restored = client.recv()
    assert isinstance(restored, Restored)
    return restored


def test_restored_carries_the_proof_the_source_expects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    sandbox = StandIns(monkeypatch)

    def source(client) -> Any:  # type: ignore[no-untyped-def]
        restored = _send_final(client)
        client.send(Done(frames=client.frames_sent))
        return restored, client.recv()

    (restored, answer), raised = _session(tmp_path, source)
    assert raised is None and isinstance(answer, Ack)
    want = proof.proof(NONCE, SID, ADDRESS, hashlib.sha256(STATE).digest())
    assert restored.address == ADDRESS and proof.matches(want, restored.proof)
    assert "delete" not in sandbox.calls


def test_a_signal_after_the_commit_still_answers_ack_and_keeps_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    sandbox = StandIns(monkeypatch)
    _signal_on(monkeypatch, guard_mod.COMMITTED)

    def source(client) -> Any:  # type: ignore[no-untyped-def]
        _send_final(client)
        client.send(Done(frames=client.frames_sent))
        return client.recv()

    answer, raised = _session(tmp_path, source)
    assert isinstance(raised, Signal)
    assert isinstance(answer, Ack)  # never an Error: the source deletes its copy on it
    assert "delete" not in sandbox.calls


def test_a_signal_before_done_cancels_and_the_source_hears_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    """A server stopped after Restored, before it read Done: it removes what it
    restored and says so; the source (see test_source_commit) then resumes."""
    sandbox = StandIns(monkeypatch)

    def hook(server) -> None:  # type: ignore[no-untyped-def]
        send, recv = server.send, server.recv
        sent_restored = threading.Event()

        def sending(msg: m.Message) -> None:
            send(msg)
            if isinstance(msg, Restored):
                sent_restored.set()

        def receiving() -> m.Message:
            if sent_restored.is_set():
                raise Signal("SIGTERM")
            return recv()

        server.send, server.recv = sending, receiving

    def source(client) -> Any:  # type: ignore[no-untyped-def]
        _send_final(client)
        client.send(Done(frames=client.frames_sent))
        with pytest.raises(PeerError) as info:
            client.recv()
        return info.value.code

    code, raised = _session(tmp_path, source, hook)
    assert isinstance(raised, Signal)
    assert code == m.ErrorCode.CANCELLED
    assert sandbox.calls[-1] == "delete"


def test_a_restored_sandbox_that_does_not_run_is_not_proven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    sandbox = StandIns(monkeypatch, status="stopped")

    def source(client) -> Any:  # type: ignore[no-untyped-def]
        client.send(Offer(sandbox_id=SID, workload="kv:1", engine="", pages=1 << 20, nonce=NONCE))
        assert isinstance(client.recv(), Ack)
        client.send(StateChunk(offset=0, data=STATE, last=True))
        client.send(RoundEnd(round=0, pages=0, final=True, state_bytes=len(STATE)))
        with pytest.raises(PeerError, match="not running"):
            client.recv()

    _, raised = _session(tmp_path, source)
    assert raised is not None and "not running" in str(raised)
    assert sandbox.calls[-1] == "delete"


@pytest.mark.parametrize(
    "msg",
    [
        Offer(sandbox_id=SID, workload="kv:1", engine="", pages=1, nonce=bytes(65)),
        Restored(address=ADDRESS, restore_ms=1.0, proof=bytes(65)),
    ],
)
def test_an_over_long_nonce_or_proof_is_refused_on_decode(msg: m.Message) -> None:
    from ckpt.migration import FrameError

    with pytest.raises(FrameError, match="over-long nonce or proof"):
        m.decode(msg.KIND, m.encode(msg))


def test_the_proof_changes_with_each_of_its_inputs() -> None:
    sha = hashlib.sha256(STATE).digest()
    base = proof.proof(NONCE, SID, ADDRESS, sha)
    assert proof.matches(base, proof.proof(NONCE, SID, ADDRESS, sha))
    for other in (
        proof.proof(bytes(32), SID, ADDRESS, sha),
        proof.proof(NONCE, "s2", ADDRESS, sha),
        proof.proof(NONCE, SID, None, sha),
        proof.proof(NONCE, SID, ADDRESS, hashlib.sha256(b"x").digest()),
    ):
        assert not proof.matches(base, other)
    assert not proof.matches(base, b"") and not proof.matches(base, base[:16])
