"""The new commands start as lean as the lifecycle ones: they import no engine, kernel
or renderer to fail on an unknown sandbox, and no other command imports them."""

from __future__ import annotations

from pathlib import Path

import pytest

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
