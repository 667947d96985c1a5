"""What the new commands parse and pass to the library, through typer's ``CliRunner``
with the library calls replaced: kill's signals and --all, delete --all, list -q and
--format, events --stats and --count, wait --timeout, logs' escaping, check's document.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ckpt import cli
from ckpt.errors import SandboxError
from ckpt.sandbox.client import control, hostcheck, observe
from ckpt.sandbox.wire.paths import STOPPED, Root, SandboxState

from .test_stop_reasons import record


def invoke(root: Path, *args: str) -> Any:
    return CliRunner().invoke(cli.app, ["--root", str(root), *args])


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The library's kill and delete, recorded instead of run."""
    seen: list[tuple] = []

    def kill(root: Root, sid: str, signo: signal.Signals = signal.SIGKILL) -> None:
        seen.append(("kill", sid, signo))

    def kill_all(root: Root, signo: signal.Signals = signal.SIGKILL) -> list:
        seen.append(("kill_all", signo))
        return [control.Outcome("a"), control.Outcome("b", error="it is paused")]

    def delete_all(root: Root, *, force: bool = False) -> list:
        seen.append(("delete_all", force))
        return [control.Outcome("a")]

    monkeypatch.setattr(control, "kill", kill)
    monkeypatch.setattr(control, "kill_all", kill_all)
    monkeypatch.setattr(control, "delete_all", delete_all)
    return seen


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["kill", "a"], ("kill", "a", signal.SIGKILL)),
        (["kill", "a", "TERM"], ("kill", "a", signal.SIGTERM)),
        (["kill", "a", "SIGHUP"], ("kill", "a", signal.SIGHUP)),
        (["kill", "a", "int"], ("kill", "a", signal.SIGINT)),
        (["kill", "a", "15"], ("kill", "a", signal.SIGTERM)),
        (["kill", "--all"], ("kill_all", signal.SIGKILL)),
        (["kill", "--all", "TERM"], ("kill_all", signal.SIGTERM)),
        (["delete", "--all"], ("delete_all", False)),
        (["delete", "--all", "--force"], ("delete_all", True)),
    ],
)
def test_kill_and_delete_pass_the_sandbox_and_signal(
    tmp_path: Path, calls: list, args: list[str], want: tuple
) -> None:
    res = invoke(tmp_path, *args)
    assert calls == [want]
    if want[0] == "kill_all":
        assert res.exit_code == 1  # one of the two failed: said per sandbox, then once
        assert "sandbox a " in res.stdout
        assert "b: it is paused" in res.output
    else:
        assert res.exit_code == 0, res.output


@pytest.mark.parametrize(
    "args",
    [["kill"], ["kill", "--all", "a", "TERM"], ["delete"], ["delete", "a", "--all"]],
)
def test_an_id_or_all_is_required_and_not_both(tmp_path: Path, calls: list, args: list) -> None:
    res = invoke(tmp_path, *args)
    assert res.exit_code == 2, res.output
    assert calls == []


def test_an_unknown_signal_is_one_error_line(tmp_path: Path, calls: list) -> None:
    res = invoke(tmp_path, "kill", "a", "BOGUS")
    assert calls == []
    assert isinstance(res.exception, SandboxError)  # base.main prints it as one line
    assert "unknown signal 'BOGUS'" in str(res.exception)


@pytest.mark.parametrize(
    ("text", "want"),
    [("KILL", signal.SIGKILL), ("sigterm", signal.SIGTERM), (" 2 ", signal.SIGINT)],
)
def test_parse_signal_takes_names_and_numbers(text: str, want: signal.Signals) -> None:
    assert control.parse_signal(text) is want
    assert control.short_name(want) == want.name[3:]


@pytest.mark.parametrize("text", ["", "0", "999", "SIGNOPE", "-9", "TERM2"])
def test_parse_signal_refuses_the_rest(text: str) -> None:
    with pytest.raises(SandboxError, match="unknown signal"):
        control.parse_signal(text)


def test_list_quiet_prints_ids_and_format_json_prints_one_document(tmp_path: Path) -> None:
    root = Root(tmp_path)
    record(root, "b", STOPPED, stopped={"reason": "checkpointed"})
    record(root, "a", STOPPED, stopped={"reason": "killed", "signal": "KILL"})
    res = invoke(tmp_path, "list", "-q")
    assert (res.exit_code, res.stdout) == (0, "a\nb\n")
    for args in (["list", "--format", "json"], ["list", "--json"]):
        res = invoke(tmp_path, *args)
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert [(d["id"], d["status"], d["extra"]["stopped"]) for d in doc] == [
            ("a", "stopped", {"reason": "killed", "signal": "KILL"}),
            ("b", "stopped", {"reason": "checkpointed"}),
        ]
    res = invoke(tmp_path, "list", "--format", "table")
    assert "checkpointed" in res.stdout and "killed" in res.stdout
    assert invoke(tmp_path, "list", "--format", "yaml").exit_code == 2


def test_state_says_why_it_stopped(tmp_path: Path) -> None:
    record(Root(tmp_path), "a", STOPPED, stopped={"reason": "exited", "code": 1})
    doc = json.loads(invoke(tmp_path, "state", "a").stdout)
    assert doc["status"] == "stopped"  # what scripts test stays as it was
    assert doc["extra"]["stopped"] == {"reason": "exited", "code": 1}


def test_events_stats_is_one_sample_and_count_bounds_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple] = []

    def events(root: Root, sid: str, *, interval: float, count: int | None = None) -> Any:
        asked.append((sid, interval, count))
        for i in range(count or 3):
            yield {"type": "stats", "id": sid, "n": i}

    monkeypatch.setattr(observe, "events", events)
    res = invoke(tmp_path, "events", "a", "--stats")
    assert res.exit_code == 0 and asked[-1] == ("a", 5.0, 1)
    assert [json.loads(line)["n"] for line in res.stdout.splitlines()] == [0]
    res = invoke(tmp_path, "events", "a", "--count", "2", "--interval", "0.5")
    assert asked[-1] == ("a", 0.5, 2)
    assert len(res.stdout.splitlines()) == 2  # JSON lines: one document a line
    assert invoke(tmp_path, "events", "a", "--interval", "0").exit_code == 2
    assert invoke(tmp_path, "events", "a", "--count", "0").exit_code == 2


def test_wait_prints_how_it_ended_and_json_one_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list = []
    st = SandboxState("a", 5, STOPPED, "http", None, "", extra={"stopped": {"reason": "killed"}})

    def wait(root: Root, sid: str, timeout: float | None = None) -> SandboxState:
        asked.append(timeout)
        return st

    monkeypatch.setattr(observe, "wait", wait)
    assert invoke(tmp_path, "wait", "a").stdout == "sandbox a killed\n"
    res = invoke(tmp_path, "wait", "a", "--timeout", "2.5", "--json")
    assert asked == [None, 2.5]
    assert json.loads(res.stdout) == {
        "id": "a",
        "status": "killed",
        "reason": "killed",
        "exit_code": None,
        "signal": None,
    }
    assert invoke(tmp_path, "wait", "a", "--timeout", "-1").exit_code == 2


def test_wait_timeout_exits_124_as_timeout_does() -> None:
    from ckpt.errors import WaitTimeout

    assert WaitTimeout.exit_code == 124


def test_logs_print_what_was_written_with_control_characters_escaped(tmp_path: Path) -> None:
    root = Root(tmp_path)
    record(root, "a", STOPPED)
    root.log_path("a").write_bytes(
        b"booted\n\x1b]0;owned\x07 tab\there\n" + "\x9b2J \xe9\n".encode() + b"\xff\n"
    )
    res = invoke(tmp_path, "logs", "a")
    assert res.exit_code == 0, res.output
    assert res.stdout_bytes == (
        b"booted\n\\x1b]0;owned\\x07 tab\there\n" + "\\x9b2J \xe9\n".encode() + b"\\xff\n"
    )


def test_check_json_is_one_object_of_items(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        hostcheck,
        "check",
        lambda root, env=None, run=None: [
            hostcheck.Item("tc", False, "tc is not installed"),
            hostcheck.Item("native engine", True, "C extension loaded"),
        ],
    )
    res = invoke(tmp_path, "check", "--json")
    assert res.exit_code == 0
    assert json.loads(res.stdout) == {
        "items": [
            {"name": "tc", "ok": False, "detail": "tc is not installed"},
            {"name": "native engine", "ok": True, "detail": "C extension loaded"},
        ]
    }
    res = invoke(tmp_path, "check")
    assert res.exit_code == 0 and "missing" in res.stdout and "tc is not installed" in res.stdout
