"""Exactly one running copy, whatever the destination does: the source's session
against fake destinations that fail, drop, lie or cancel at each phase, in process
(see ``source_kit``).  A copy runs on the source (resumed and serving) or on the
destination (which read ``Done``, and the source's copy deleted), never both, and
never neither when the source can know which."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ckpt.migration import messages as m
from ckpt.migration import proof
from ckpt.migration.guard import CANCELLED, COMMITTED, COMMITTING, DONE

from .source_kit import FakeDestination, StandIn, iter_phases, migrate

DIRTY = [30, 20]  # a few rounds, then few dirty


def _error_at(where: str):  # type: ignore[no-untyped-def]
    def misbehave(phase: str, ch) -> bool:  # type: ignore[no-untyped-def]
        if phase != where:
            return False
        if phase == "done":  # it read Done but cancels instead of committing
            dest.keeps = False
        ch.send_error(m.ErrorCode.CANCELLED, f"the destination gave up at {phase}")
        return True

    dest = FakeDestination(misbehave=misbehave)
    return dest


@pytest.mark.parametrize("phase", list(iter_phases()))
def test_an_error_from_the_destination_leaves_the_source_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str, watchdog
) -> None:
    """The destination cancels only before it commits: an Error, even one answering
    Done (a server stopped by SIGTERM after Restored), means the source resumes."""
    out = migrate(tmp_path, StandIn(dirty=list(DIRTY)), _error_at(phase), monkeypatch)
    assert out.error is not None
    assert out.sandbox.status == "running", (phase, out.sandbox.calls, out.error)
    assert not out.dest.keeps and out.running_copies() == 1
    assert "runs on here as before" in str(out.error) and "\n" not in str(out.error)


@pytest.mark.parametrize("phase", list(iter_phases()))
def test_a_dropped_connection_leaves_exactly_one_running_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str, watchdog
) -> None:
    closed = threading.Event()

    def misbehave(p: str, ch) -> bool:  # type: ignore[no-untyped-def]
        if p != phase:
            return False
        ch.close()
        closed.set()
        return True

    sandbox = StandIn(dirty=list(DIRTY))
    sandbox.hooks["migrate:restored"] = lambda: closed.wait(10) if phase == "restored" else None
    out = migrate(tmp_path, sandbox, FakeDestination(misbehave=misbehave), monkeypatch)
    assert out.error is not None
    assert out.running_copies() == 1, (phase, out.sandbox.status, out.dest.keeps)
    if phase == "done":
        # it read Done and kept the sandbox; the source cannot know: it stays paused
        assert out.sandbox.status == "paused"
        assert "stays paused" in str(out.error)
    else:
        assert out.sandbox.status == "running" and not out.dest.keeps


def test_an_honest_destination_gets_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    out = migrate(tmp_path, StandIn(dirty=list(DIRTY)), FakeDestination(), monkeypatch)
    assert out.error is None
    assert out.sandbox.status == "deleted" and out.dest.keeps
    assert out.running_copies() == 1


LIES = {
    "no proof": lambda offer, sha: b"",
    "another nonce": lambda offer, sha: proof.proof(b"\0" * 32, offer.sandbox_id, None, sha),
    "another state": lambda offer, sha: proof.proof(
        offer.nonce, offer.sandbox_id, "127.0.0.1:18080", b"\0" * 32
    ),
    "another address": lambda offer, sha: proof.proof(
        offer.nonce, offer.sandbox_id, "127.0.0.1:1", sha
    ),
    "another sandbox": lambda offer, sha: proof.proof(offer.nonce, "s2", "127.0.0.1:18080", sha),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_destination_without_proof_never_gets_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lie: str, watchdog
) -> None:
    """Restored and a willing Ack are not enough: without the proof bound to the
    source's nonce and state, the source never sends Done and runs on."""
    dest = FakeDestination(lie=LIES[lie])
    out = migrate(tmp_path, StandIn(dirty=list(DIRTY)), dest, monkeypatch)
    assert out.error is not None and "without proof" in str(out.error)
    assert not dest.got_done
    assert out.sandbox.status == "running"
    assert "delete" not in out.sandbox.calls


def test_silence_after_done_leaves_the_source_paused_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    """The destination read Done (it keeps the sandbox) and never answers: the source
    neither resumes (two copies) nor deletes (maybe none); it says what to do."""

    def misbehave(phase: str, ch) -> bool:  # type: ignore[no-untyped-def]
        if phase == "done":
            ch.close()
            return True
        return False

    out = migrate(
        tmp_path, StandIn(dirty=list(DIRTY)), FakeDestination(misbehave=misbehave), monkeypatch
    )
    assert out.sandbox.status == "paused"
    assert "resume" not in out.sandbox.calls and "delete" not in out.sandbox.calls
    text = str(out.error)
    assert "did not confirm it keeps it" in text and "stays paused" in text
    assert "ckpt delete --force s1" in text and "ckpt resume s1" in text


def test_the_loser_of_two_migrations_does_not_say_it_runs_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    """Another migration moved and deleted the sandbox meanwhile: the one that fails
    must not claim the sandbox runs on here."""
    sandbox = StandIn(dirty=list(DIRTY))

    def misbehave(phase: str, ch) -> bool:  # type: ignore[no-untyped-def]
        if phase == "final":
            sandbox.status = "deleted"  # the winner committed and deleted it
            ch.send_error(m.ErrorCode.EXISTS, "sandbox s1 already exists on the destination")
            return True
        return False

    out = migrate(tmp_path, sandbox, FakeDestination(misbehave=misbehave), monkeypatch)
    text = str(out.error)
    assert "runs on here as before" not in text, text
    assert "no longer here" in text and "\n" not in text


def test_a_sandbox_left_paused_by_a_failed_resume_is_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    sandbox = StandIn(dirty=list(DIRTY))

    def broken_resume(root, sid) -> None:  # type: ignore[no-untyped-def]
        from ckpt.errors import SandboxError

        raise SandboxError("the cgroup did not thaw")

    dest = _error_at("final")
    sandbox.install(monkeypatch)
    monkeypatch.setattr(StandIn, "resume", lambda self, root, sid: broken_resume(root, sid))
    out = migrate(tmp_path, sandbox, dest, monkeypatch)
    text = str(out.error)
    assert "runs on here as before" not in text
    assert "is paused here" in text and "the cgroup did not thaw" in text


def _drop_at_done(phase: str, ch) -> bool:  # type: ignore[no-untyped-def]
    if phase == "done":
        ch.close()
        return True
    return False


@pytest.mark.parametrize(
    ("dest", "told"),
    [
        (FakeDestination, [COMMITTING, COMMITTED, DONE]),
        (lambda: _error_at("done"), [COMMITTING, CANCELLED, DONE]),
        (lambda: _error_at("restored"), [COMMITTING, CANCELLED, DONE]),
        (lambda: FakeDestination(misbehave=_drop_at_done), [COMMITTING, DONE]),
        (lambda: _error_at("final"), [DONE]),
    ],
    ids=["committed", "cancelled-at-done", "cancelled-after-restored", "silent", "failed"],
)
def test_the_guard_is_told_committing_before_done_and_the_outcome_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dest, told: list[bytes], watchdog
) -> None:
    """A CLI killed after sending Done must leave its copy paused (the guard heard
    COMMITTING before Done left), and one that heard the answer has it told."""
    fake = dest()
    out = migrate(tmp_path, StandIn(dirty=list(DIRTY)), fake, monkeypatch)
    assert out.sandbox.told == told
    if fake.got_done:
        assert fake.told_at_done == [COMMITTING]
