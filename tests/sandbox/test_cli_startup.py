"""The CLI stays lean: lifecycle commands import only what they use, and building only
the invoked command changes nothing a user can see."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ckpt import cli
from ckpt.cli import base as cli_base
from ckpt.cli.bench import bench_app

# Run the real entry point in a child, then list what it imported.
PROBE = """
import sys, runpy
sys.argv = ["ckpt", *{args!r}]
try:
    from ckpt.entry import main
    main()
except SystemExit:
    pass
sys.stdout.flush()
sys.stderr.write("\\nMODULES " + " ".join(sorted(sys.modules)) + "\\n")
"""

HEAVY = ("rich", "pydantic", "ckpt.kernel", "ckpt.state", "ckpt.statefile", "ckpt.bench")


def imported(tmp_path: Path, *args: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=["--root", str(tmp_path), *args])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = proc.stderr.rsplit("MODULES ", 1)[-1]
    return set(line.split())


@pytest.mark.parametrize(
    "args",
    [
        ("list",),
        ("list", "--json"),
        ("state", "ghost"),
        ("kill", "ghost"),
        ("delete", "ghost"),
        ("template", "status"),
    ],
)
def test_lifecycle_commands_import_no_rendering_or_engine(tmp_path: Path, args: tuple) -> None:
    mods = imported(tmp_path, *args)
    assert "ckpt.cli" in mods  # the probe really ran the CLI
    heavy = sorted(m for m in mods if m.split(".")[0] in HEAVY or m.startswith(HEAVY))
    if args == ("list",):  # an (empty) table is drawn: rich is expected, nothing else
        heavy = [m for m in heavy if not m.startswith("rich")]
    assert heavy == []


def test_main_imports_only_the_command_group_it_runs(tmp_path: Path) -> None:
    groups = {f"ckpt.cli.{name}" for name in cli.GROUPS}
    assert groups & imported(tmp_path, "state", "ghost") == {"ckpt.cli.sandbox"}
    assert groups & imported(tmp_path, "image", "--help") == {"ckpt.cli.image"}
    assert groups & imported(tmp_path, "--version") == set()
    assert groups & imported(tmp_path, "--help") == groups


def test_rendering_a_table_loads_rich(tmp_path: Path) -> None:
    assert "rich.table" in imported(tmp_path, "list")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["state", "web"], ["state", "web"]),
        (["--root", "/r", "state", "web"], ["state", "web"]),
        (["--root=/r", "--debug", "list"], ["list"]),
        (["bench", "state", "--count", "3"], ["bench", "state"]),
        (["--no-template", "restore", "x", "--image-path", "/i"], ["restore", "x"]),
        (["--help"], []),
        ([], []),
        (["--", "state"], []),
    ],
)
def test_command_path_skips_global_options(argv: list[str], words: list[str]) -> None:
    assert cli_base.command_path(argv) == words


def test_pruned_app_builds_only_the_command_and_restores_everything() -> None:
    before = ([c.name for c in cli.app.registered_commands], len(cli.app.registered_groups))
    bench_before = [c.name for c in bench_app.registered_commands]
    with cli_base._pruned(cli.app, ["bench", "state"]):
        assert cli.app.registered_commands == []
        assert [g.name for g in cli.app.registered_groups] == ["bench"]
        assert [c.name for c in bench_app.registered_commands] == ["state"]
    assert ([c.name for c in cli.app.registered_commands], len(cli.app.registered_groups)) == before
    assert [c.name for c in bench_app.registered_commands] == bench_before


def test_unknown_command_keeps_the_full_app() -> None:
    with cli_base._pruned(cli.app, ["nonsense"]):
        assert len(cli.app.registered_commands) > 10


def test_help_lists_every_command_and_no_bool_metavar() -> None:
    res = CliRunner().invoke(cli.app, ["--help"])
    assert res.exit_code == 0
    for name in ("run", "restore", "checkpoint", "state", "template", "bench", "inspect"):
        assert name in res.output
    res = CliRunner().invoke(cli.app, ["checkpoint", "--help"])
    assert res.exit_code == 0
    assert "--leave-running" in res.output
    assert "<bool>" not in res.output and "BOOLEAN" not in res.output


def test_entry_point_runs_a_pruned_command_end_to_end(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt", "--root", str(tmp_path), "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_unknown_command_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt", "--root", str(tmp_path), "bogus"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "No such command" in proc.stderr


def test_cli_bytecode_goes_to_the_cache_when_the_host_turns_bytecode_off(
    tmp_path: Path,
) -> None:
    import os

    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "CKPT_CACHE_DIR": str(cache)}
    env.pop("PYTHONPYCACHEPREFIX", None)
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt", "--root", str(tmp_path / "root"), "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    written = {
        f"{p.parent.name}/{p.name.split('.')[0]}" for p in (cache / "pycache").rglob("*.pyc")
    }
    assert {"cli/base", "cli/sandbox", "client/lifecycle", "wire/paths"} <= written


def test_importing_ckpt_as_a_library_leaves_bytecode_settings_alone() -> None:
    code = "import sys; import ckpt, ckpt.cli; print(sys.pycache_prefix, sys.dont_write_bytecode)"
    import os

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPYCACHEPREFIX", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.stdout.split() == ["None", "True"]


def test_version_says_whether_the_native_engine_is_there() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt", "--version"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first.startswith("ckpt ")
    from ckpt.state import native_status

    ok, why = native_status()
    assert second == f"native engine: {'available' if ok else 'unavailable'} ({why})"
