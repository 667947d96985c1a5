"""The guard's decision for a process that died mid-migration, for each state it was
told, and the pipe that carries those states to the forked watchdog."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from ckpt.migration import guard as g
from ckpt.migration.guard import (
    CANCELLED,
    COMMITTED,
    COMMITTING,
    DONE,
    PAGING,
    RESTORING,
    Action,
    Guard,
    destination_action,
    source_action,
)
from ckpt.sandbox.client import lifecycle

# what was told, in order -> what the source's guard does with the source's sandbox
SOURCE = {
    b"": Action.RESUME,  # died in a round or frozen: the destination keeps nothing
    RESTORING: Action.RESUME,
    COMMITTING: Action.LEAVE,  # Done may have been read: it may run there, or not
    COMMITTING + COMMITTED: Action.DELETE,  # the destination acknowledged: it runs there
    COMMITTING + CANCELLED: Action.RESUME,  # the destination answered Done with an Error
    # post-copy: it runs there, without pages only this copy holds: keep it, paused
    COMMITTING + PAGING: Action.LEAVE,
    COMMITTING + PAGING + COMMITTED: Action.DELETE,  # it said it holds every page
}
DESTINATION = {
    b"": Action.LEAVE,  # nothing made yet
    RESTORING: Action.DELETE,  # made or restored, not committed: remove it
    RESTORING + COMMITTED: Action.LEAVE,  # it read Done: it keeps the sandbox
}


@pytest.mark.parametrize("said", list(SOURCE), ids=lambda b: b.decode() or "nothing")
def test_source_decision_for_each_state(said: bytes) -> None:
    assert source_action(said) is SOURCE[said]


@pytest.mark.parametrize("said", list(DESTINATION), ids=lambda b: b.decode() or "nothing")
def test_destination_decision_for_each_state(said: bytes) -> None:
    assert destination_action(said) is DESTINATION[said]


@pytest.mark.parametrize("said", list(SOURCE), ids=lambda b: b.decode() or "nothing")
def test_source_act_does_what_was_decided(said: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(lifecycle, "resume", lambda root, sid: calls.append(f"resume {sid}"))
    monkeypatch.setattr(
        lifecycle, "delete", lambda root, sid, force=False: calls.append(f"delete {sid}")
    )
    g.source_act(object(), "s1")(said)
    want = {Action.RESUME: ["resume s1"], Action.DELETE: ["delete s1"], Action.LEAVE: []}
    assert calls == want[SOURCE[said]]


@pytest.mark.parametrize("said", list(DESTINATION), ids=lambda b: b.decode() or "nothing")
def test_destination_act_does_what_was_decided(
    said: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(
        lifecycle, "delete", lambda root, sid, force=False: calls.append(f"delete {sid}")
    )
    root = SimpleNamespace(exists=lambda sid: True)
    g.destination_act(root, "s1")(said)
    assert calls == (["delete s1"] if DESTINATION[said] is Action.DELETE else [])


def _died(tmp_path: Path, *said: bytes) -> str:
    """A guard told ``said`` whose process dies (its pipe closes without DONE): what
    its stand-in ``act`` was called with, and the working directory removed."""
    out = tmp_path / "acted"
    work = tmp_path / "work"
    work.mkdir()

    def act(told: bytes) -> None:  # runs in the forked watchdog
        out.write_text(source_action(told).value)

    guard = Guard(work, act)
    for s in said:
        guard.say(s)
    os.close(guard._w)  # as the kernel does when the process is killed
    guard._w = -1
    os.waitpid(guard.pid, 0)
    assert not work.exists()
    return out.read_text() if out.exists() else ""


@pytest.mark.parametrize(
    ("said", "acted"),
    [
        ((), "resume"),
        ((COMMITTING,), "leave"),
        ((COMMITTING, COMMITTED), "delete"),
        ((COMMITTING, CANCELLED), "resume"),
    ],
)
def test_a_dead_process_has_its_guard_act_on_what_it_told(
    tmp_path: Path, said: tuple[bytes, ...], acted: str, watchdog
) -> None:
    assert _died(tmp_path, *said) == acted


def test_a_process_that_finished_has_its_guard_do_nothing(tmp_path: Path, watchdog) -> None:
    out = tmp_path / "acted"
    guard = Guard(tmp_path, lambda told: out.write_text("acted"))
    guard.say(COMMITTING)
    guard.close()  # writes DONE, waits for the guard to exit
    assert not out.exists()
    assert DONE not in COMMITTING + COMMITTED + CANCELLED + RESTORING  # never mistaken
