"""CLI parsing and error rendering for the sandbox commands (CliRunner, no sandboxes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ckpt.cli import app
from ckpt.sandbox.wire.paths import Root, SandboxState

runner = CliRunner()


def invoke(root: Path, *args: str):
    return runner.invoke(app, ["--root", str(root), *args])


def test_state_of_unknown_sandbox(tmp_path: Path) -> None:
    res = invoke(tmp_path, "state", "ghost")
    assert res.exit_code != 0
    assert "no sandbox 'ghost'" in str(res.exception)


def test_list_empty_root_as_json(tmp_path: Path) -> None:
    res = invoke(tmp_path / "nothing-here", "list", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == []


def test_list_and_state_show_a_recorded_sandbox_as_stopped(tmp_path: Path) -> None:
    # a state file whose process is long gone (pid 1 with a wrong start time)
    Root(tmp_path).write(
        SandboxState(
            id="old",
            pid=1,
            status="running",
            workload="http",
            cgroup=None,
            created="2026-01-01T00:00:00Z",
            address="127.0.0.1:1",
            pid_start=1.0,
        )
    )
    res = invoke(tmp_path, "state", "old")
    assert res.exit_code == 0, res.output
    st = json.loads(res.output)
    assert st["status"] == "stopped" and st["address"] is None
    assert st["extra"]["stopped"] == {"reason": "exited", "code": None}  # it logged none
    res = invoke(tmp_path, "list")
    assert "old" in res.output and "exited (code unknown)" in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("run", "x", "--workload", "http", "--cpu", "-1"), "bad CPU quota"),
        (("run", "x", "--workload", "http", "--cpu", "lots"), "bad CPU quota"),
        (("run", "../x", "--workload", "http"), "invalid sandbox ID"),
        (("checkpoint", "x", "--image-path", "/tmp/i"), "no sandbox 'x'"),
        (("pause", "x"), "no sandbox 'x'"),
        (("cycle", "x", "--image-path", "/tmp/i", "--engines", "a,b"), "unknown engine"),
    ],
)
def test_bad_input_is_a_ckpt_error(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    res = invoke(tmp_path, *args)
    assert res.exit_code != 0
    assert message in str(res.exception)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("command", ["run", "checkpoint", "restore"])
def test_an_unknown_engine_is_refused_by_the_parser_naming_the_choices(
    tmp_path: Path, command: str
) -> None:
    """--engine is a choice: a wrong one is a usage error (exit 2) that lists the
    engines, before anything is made."""
    needed = {"run": ("--workload", "http"), "checkpoint": ("--image-path", "/tmp/i")}
    extra = needed.get(command, ("--image-path", "/tmp/i"))
    res = invoke(tmp_path, command, "x", *extra, "--engine", "pickle")
    assert res.exit_code == 2, res.output
    assert "'pickle' is not one of" in res.output and "'reflect'" in res.output, res.output
    assert not (tmp_path / "x").exists()


def test_restore_from_missing_image_spawns_nothing(tmp_path: Path) -> None:
    res = invoke(tmp_path, "restore", "x", "--image-path", str(tmp_path / "none"))
    assert "no image at" in str(res.exception)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("run", "x"),  # --workload is required
        ("checkpoint", "x"),  # --image-path is required
        ("restore", "x"),
        ("cycle", "x", "--image-path", "/tmp/i", "--count", "0"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    assert invoke(tmp_path, *args).exit_code == 2


def test_error_renders_as_one_line_through_main(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "ckpt", "--root", str(tmp_path), "state", "[red]ghost"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: invalid sandbox ID '[red]ghost'")
    assert "Traceback" not in proc.stderr
