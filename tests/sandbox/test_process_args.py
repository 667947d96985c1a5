"""The sandbox process parses its three options by hand (no argparse at start-up)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ckpt.sandbox.process import parse_args


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["--id", "a", "--socket", "/s"], ("a", "/s", None)),
        (["--socket=/s", "--id=a", "--ready-fd", "7"], ("a", "/s", 7)),
        (["--id", "a", "--socket", "/s", "--ready-fd=0"], ("a", "/s", 0)),
        (["--id", "x=y", "--socket", "/p q"], ("x=y", "/p q", None)),
    ],
)
def test_good_arguments(argv: list[str], want: tuple) -> None:
    assert parse_args(argv) == want


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--id", "a"], "required: --socket"),
        ([], "required: --id, --socket"),
        (["--id"], "--id: expected one argument"),
        (["--id", "a", "--socket", "/s", "--ready-fd", "x"], "invalid int value: 'x'"),
        (["--id", "a", "--socket", "/s", "extra"], "unrecognized argument: extra"),
        (["--idx", "a"], "unrecognized argument: --idx"),
    ],
)
def test_bad_arguments_exit_2_with_usage(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m ckpt.sandbox.process")
    assert message in err


def test_help_exits_0(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["--help"])
    assert exc.value.code == 0
    assert "--ready-fd" in capsys.readouterr().out


def test_process_starts_without_argparse_or_typing() -> None:
    """What the process imports before it is ready (its SandboxCreate cost)."""
    probe = "import sys, ckpt.sandbox.process; print(' '.join(sys.modules))"
    path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    loaded = set(out.stdout.split())
    assert "ckpt.sandbox.rpc" in loaded
    assert {"argparse", "typing", "ckpt.kernel", "ckpt.state"} & loaded == set()


def test_bad_command_line_exits_2() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ckpt.sandbox.process", "--id", "a"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "required: --socket" in out.stderr
