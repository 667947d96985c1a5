"""The new commands start as lean as the lifecycle ones: they import no engine, kernel
or renderer to fail on an unknown sandbox, and no other command imports them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandbox.conftest import Cli
from tests.sandbox.test_cli_startup import HEAVY, imported


@pytest.mark.parametrize(
    "args",
    [
        ("ps", "ghost"),
        ("ps", "ghost", "--json"),
        ("events", "ghost", "--stats"),
        ("wait", "ghost", "--timeout", "1"),
        ("logs", "ghost"),
        ("kill", "ghost", "TERM"),
        ("kill", "--all", "TERM"),
        ("delete", "--all"),
        ("list", "-q"),
        ("list", "--format", "json"),
    ],
)
def test_new_commands_import_no_rendering_or_engine(tmp_path: Path, args: tuple) -> None:
    mods = imported(tmp_path, *args)
    assert "ckpt.cli" in mods  # the probe really ran the CLI
    heavy = sorted(m for m in mods if m.split(".")[0] in HEAVY or m.startswith(HEAVY))
    assert heavy == []


def test_the_lifecycle_commands_do_not_import_the_observing_ones(tmp_path: Path) -> None:
    for args in (("state", "ghost"), ("list", "--json"), ("kill", "ghost")):
        mods = imported(tmp_path, *args)
        assert "ckpt.cli.observe" not in mods
        assert (
            not {
                "ckpt.sandbox.client.observe",
                "ckpt.sandbox.client.logs",
                "ckpt.sandbox.client.hostcheck",
            }
            & mods
        )


# What ``ckpt state`` of a sandbox must not load: it reads a record and checks a pid.
# psutil, msgspec (the control protocol), the verbs, images, stores and migration are
# for the commands that act on a sandbox.
NOT_FOR_STATE = (
    "psutil",
    "msgspec",
    "zstandard",
    "ckpt.sandbox.client.lifecycle",
    "ckpt.sandbox.wire.protocol",
    "ckpt.images",
    "ckpt.storage",
    "ckpt.migration",
    "ckpt.cgroups.inert",
)


def test_state_of_a_sandbox_imports_only_the_record_and_the_pid_check(tmp_path: Path) -> None:
    """A record that says running, of a process that is gone: ``state`` goes the whole
    way (record, cgroup, pid, socket, log) and says it stopped."""
    from ckpt.sandbox.wire.paths import Root, SandboxState, now_iso

    root = Root(tmp_path)
    root.dir("gone").mkdir(parents=True)
    root.write(
        SandboxState(
            id="gone",
            pid=2**22 + 1,  # above any pid_max: no such process
            status="running",
            workload="http",
            cgroup=None,
            created=now_iso(),
            pid_start=1.0,
        )
    )
    mods = imported(tmp_path, "state", "gone")
    assert "ckpt.sandbox.client.status" in mods  # the probe really checked the sandbox
    assert sorted(m for m in mods if m.startswith(NOT_FOR_STATE + HEAVY)) == []


def test_the_verbs_and_cgroups_load_without_psutil() -> None:
    """checkpoint and restore stand on lifecycle and cgroups; psutil is for a host
    without cgroups only (``InertManager``, still importable by name)."""
    probe = (
        "import sys, ckpt.sandbox.client.lifecycle, ckpt.cgroups\n"
        "print('psutil' in sys.modules)\n"
        "print(ckpt.cgroups.InertManager.__name__, 'psutil' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split("\n")
    assert out[:2] == ["False", "InertManager True"]


@pytest.mark.slow
def test_checkpoint_and_restore_load_neither_psutil_nor_the_image_reader(
    cli: Cli, tmp_path: Path, watchdog: None
) -> None:
    """The sandbox reads and writes the image; the CLI only asks it to.  A restore
    takes the workload's name from the sandbox's reply, not from the image."""
    cli("run", "lean", "--workload", "http", "--port", "0", timeout=120)
    image = str(tmp_path / "lean.img")
    for args in (
        ("checkpoint", "lean", "--image-path", image),
        ("restore", "lean", "--image-path", image),
    ):
        mods = imported(cli.root, *args)
        assert "ckpt.sandbox.client.lifecycle" in mods  # the probe really ran the verb
        assert (
            sorted(m for m in mods if m.startswith(("psutil", "ckpt.statefile", "zstandard"))) == []
        )
    assert cli.state("lean")["status"] == "running"
    assert cli.state("lean")["workload"] == "http"
