"""The sandbox process parses its three options by hand (no argparse at start-up)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ckpt.sandbox.host.process import parse_args


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["--id", "a", "--socket", "/s"], ("a", "/s", None, None)),
        (["--socket=/s", "--id=a", "--ready-fd", "7"], ("a", "/s", 7, None)),
        (["--id", "a", "--socket", "/s", "--ready-fd=0"], ("a", "/s", 0, None)),
        (["--id", "x=y", "--socket", "/p q"], ("x=y", "/p q", None, None)),
        (["--id", "a", "--socket", "/s", "--root", "/r oot"], ("a", "/s", None, "/r oot")),
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
    assert err.startswith("usage: python -m ckpt.sandbox.host.process")
    assert message in err


def test_help_exits_0(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["--help"])
    assert exc.value.code == 0
    assert "--ready-fd" in capsys.readouterr().out


def test_process_starts_without_argparse_or_typing() -> None:
    """What the process imports before it is ready (its SandboxCreate cost)."""
    probe = "import sys, ckpt.sandbox.host.process; print(' '.join(sys.modules))"
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
    assert "ckpt.sandbox.wire.rpc" in loaded
    assert {"argparse", "typing", "ckpt.kernel", "ckpt.state"} & loaded == set()


def test_bad_command_line_exits_2() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ckpt.sandbox.host.process", "--id", "a"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "required: --socket" in out.stderr


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("checkpoint-stall", (5.0, "")),
        ("checkpoint-stall:2", (2.0, "")),
        ("checkpoint-stall:30:/tmp/go", (30.0, "/tmp/go")),
        ("checkpoint-stall:30:/a:b", (30.0, "/a:b")),
        ("restore-stall", (5.0, "")),
        ("pages-fill-delay:0.5", (0.5, "")),
        ("pause:migrate:round", (0.0, "migrate:round")),
    ],
)
def test_checkpoint_stall_fault_spec(spec: str, want: tuple) -> None:
    from ckpt import faults

    got = faults.parse(spec)
    assert (got.seconds, got.text) == want
    assert str(got) == spec  # what a child is given reads back the same


def test_checkpoint_stall_ends_once_its_release_file_exists(tmp_path, monkeypatch) -> None:
    from ckpt.sandbox.host import process

    release = tmp_path / "go"
    naps: list[float] = []

    def nap(seconds: float) -> None:  # the release file appears during the third nap
        naps.append(seconds)
        if len(naps) == 3:
            release.touch()

    monkeypatch.setattr(process.time, "sleep", nap)
    process._stall(3600, str(release))
    assert len(naps) == 3 and max(naps) <= 0.02
