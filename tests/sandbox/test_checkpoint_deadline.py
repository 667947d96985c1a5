"""The checkpoint RPC has a deadline too: past it the CLI stops waiting with one line,
and never kills the sandbox, which may still finish its image."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt.sandbox.client import deadlines

from .conftest import Cli
from .test_fault_campaign import cold, new_id, one_line_error
from .waiting import gone, wait_for


@pytest.mark.slow
def test_a_checkpoint_past_its_deadline_ends_the_wait_and_spares_the_sandbox(
    cli: Cli, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    cold(cli)
    sandbox_id = new_id("dl")
    cli(
        "run",
        sandbox_id,
        "--workload",
        "http",
        env={"CKPT_FAULT": f"checkpoint-stall:60:{release}"},
    )
    pid = cli.state(sandbox_id)["pid"]
    target = tmp_path / "img"
    done = cli(
        "checkpoint",
        sandbox_id,
        "--image-path",
        str(target),
        check=False,
        env={deadlines.CHECKPOINT_TIMEOUT_ENV: "2"},
    )
    assert done.returncode == 124, done.stderr  # a deadline passed
    one_line_error(done.returncode, done.stderr)
    assert "did not finish within 2 s" in done.stderr
    assert f"ckpt kill {sandbox_id}" in done.stderr
    assert not gone(pid)  # stopping the wait did not stop the sandbox
    release.touch()  # it finishes the image it was writing, and exits as asked
    wait_for(lambda: gone(pid), "the sandbox to finish its checkpoint and exit", 60)
    assert (target / "checkpoint.img").is_file()
    assert cli.state_cli(sandbox_id)["status"] == "stopped"


def test_the_environment_sets_the_checkpoint_deadline(monkeypatch) -> None:
    from ckpt.settings import SettingsError

    monkeypatch.setenv(deadlines.CHECKPOINT_TIMEOUT_ENV, "7.5")
    assert deadlines.checkpoint_timeout() == 7.5
    monkeypatch.setenv(deadlines.CHECKPOINT_TIMEOUT_ENV, "")
    assert deadlines.checkpoint_timeout() == 1800.0  # empty: unset
    for bad in ("0", "-1", "soon", "nan"):
        monkeypatch.setenv(deadlines.CHECKPOINT_TIMEOUT_ENV, bad)
        with pytest.raises(SettingsError, match=deadlines.CHECKPOINT_TIMEOUT_ENV):
            deadlines.checkpoint_timeout()
