"""A stopped sandbox says why: ``checkpointed`` and ``killed`` as recorded by the command
that stopped it, ``exited (code N)`` from the exit status its process logged, ``killed
(SIG)`` when it died without one after ``ckpt kill ID SIG``.  Records written here stand
for sandboxes whose processes are gone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckpt.sandbox.client import status
from ckpt.sandbox.wire import sandboxlog
from ckpt.sandbox.wire.paths import RUNNING, STOPPED, Root, SandboxState

GONE_PID = 4_000_000  # above pid_max's default: never a live process


def record(root: Root, sid: str, status_: str = RUNNING, **extra: object) -> SandboxState:
    st = SandboxState(
        id=sid,
        pid=GONE_PID,
        status=status_,
        workload="http",
        cgroup=None,
        created="2026-01-01T00:00:00Z",
        pid_start=1.0,
        extra=dict(extra),
    )
    root.write(st)
    return st


def log(root: Root, sid: str, text: str) -> None:
    with open(root.log_path(sid), "a") as f:
        f.write(text)


@pytest.fixture
def root(tmp_path: Path) -> Root:
    return Root(tmp_path / "root")


def test_a_sandbox_that_logged_its_exit_status_exited_with_it(root: Root) -> None:
    record(root, "a")
    log(root, "a", f"12:00:00.000 [{GONE_PID}] exiting\n12:00:00.001 [{GONE_PID}] exit status 3\n")
    st = status.refresh(root, "a")
    assert st.status == STOPPED
    assert status.stop_reason(st) == {"reason": "exited", "code": 3}
    assert status.status_text(st) == "exited (code 3)"


def test_only_the_sandboxs_own_exit_line_counts(root: Root) -> None:
    record(root, "a")
    log(root, "a", "12:00:00.000 [77] exit status 9\n")  # an earlier process of the ID
    st = status.refresh(root, "a")
    assert status.status_text(st) == "exited (code unknown)"


def test_the_last_exit_line_of_the_pid_wins_and_only_the_tail_is_read(root: Root) -> None:
    record(root, "a")
    log(root, "a", f"x [{GONE_PID}] exit status 1\n" + "filler\n" * 2000)
    assert sandboxlog.exit_status(root.log_path("a"), GONE_PID) is None  # past the tail
    log(root, "a", f"x [{GONE_PID}] exit status 4\n")
    assert sandboxlog.exit_status(root.log_path("a"), GONE_PID) == 4


def test_a_symlinked_log_is_not_followed(root: Root, tmp_path: Path) -> None:
    record(root, "a")
    elsewhere = tmp_path / "elsewhere.log"
    elsewhere.write_text(f"x [{GONE_PID}] exit status 5\n")
    os.symlink(elsewhere, root.log_path("a"))
    assert sandboxlog.exit_status(root.log_path("a"), GONE_PID) is None


def test_a_signalled_sandbox_that_said_nothing_was_killed_by_that_signal(root: Root) -> None:
    record(root, "a", signalled="HUP")
    st = status.refresh(root, "a")
    assert status.stop_reason(st) == {"reason": "killed", "signal": "HUP"}
    assert status.status_text(st) == "killed (HUP)"


def test_a_signalled_sandbox_that_exited_by_itself_exited(root: Root) -> None:
    record(root, "a", signalled="TERM")
    log(root, "a", f"x [{GONE_PID}] exit status 0\n")
    assert status.status_text(status.refresh(root, "a")) == "exited (code 0)"


@pytest.mark.parametrize(
    ("stopped", "text"),
    [
        ({"reason": "checkpointed"}, "checkpointed"),
        ({"reason": "killed", "signal": "KILL"}, "killed"),
        ({"reason": "killed", "signal": "TERM"}, "killed (TERM)"),
        ({"reason": "exited", "code": 137}, "exited (code 137)"),
        ({"reason": "exited", "code": None}, "exited (code unknown)"),
        ({"reason": "killed", "signal": "[red]\x1b]0;x"}, "killed (?)"),
        ({"reason": "something new"}, "stopped"),
        ("not a dict", "stopped"),
    ],
)
def test_a_recorded_reason_is_kept_and_worded(root: Root, stopped: object, text: str) -> None:
    record(root, "a", STOPPED, stopped=stopped)
    log(root, "a", f"x [{GONE_PID}] exit status 0\n")  # the record's reason wins
    assert status.status_text(status.refresh(root, "a")) == text


def test_a_record_without_a_reason_reads_as_stopped(root: Root) -> None:
    record(root, "a", STOPPED)
    assert status.status_text(status.refresh(root, "a")) == "stopped"


def test_killing_a_sandbox_that_had_exited_keeps_its_exit(root: Root) -> None:
    from ckpt.sandbox.client import lifecycle

    record(root, "a")
    log(root, "a", f"x [{GONE_PID}] exit status 2\n")
    lifecycle.kill(root, "a")
    st = root.read("a")
    assert status.status_text(st) == "exited (code 2)"
    record(root, "b", STOPPED, stopped={"reason": "checkpointed"})
    lifecycle.kill(root, "b")
    assert status.status_text(root.read("b")) == "checkpointed"


def test_exit_now_logs_its_status_as_the_last_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    logfile = tmp_path / "sandbox.log"
    with open(logfile, "wb") as f:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from ckpt.sandbox.wire import sandboxlog; sandboxlog.exit_now(7)",
            ],
            stderr=f,
        )
        assert proc.wait(timeout=60) == 7
    assert sandboxlog.exit_status(logfile, proc.pid) == 7
