"""Every ``--help`` reads well at 80 columns: no line is longer, no option name is
broken across lines, metavars are words (``ID``, ``PATH``, ``CPUS``) rather than types,
fixed choices are listed, and every command that takes an ID says what it is.  The
tables a user reads (``ckpt list``, ``inspect statefile``'s types) fit 80 columns
without cutting what they show."""

from __future__ import annotations

import io
import re

import pytest
import typer.main
from rich.console import Console
from typer.testing import CliRunner

from ckpt import cli
from ckpt.cli.options import Compression, Engine

WIDTH = 80


def _commands() -> list[list[str]]:
    """Every command path of the app, groups included: ``[[], ["run"], ["bench", "state"], ...]``."""
    root = typer.main.get_command(cli.app)
    found: list[list[str]] = []

    def walk(cmd, path: list[str]) -> None:
        found.append(path)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(root, [])
    return found


COMMANDS = _commands()


def _help(path: list[str]) -> str:
    result = CliRunner().invoke(
        cli.app, [*path, "--help"], env={"COLUMNS": str(WIDTH), "TERM": "dumb"}
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_the_walk_finds_every_command() -> None:
    names = {" ".join(p) for p in COMMANDS}
    assert {"run", "checkpoint", "restore", "bench scale", "inspect statefile"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "ckpt")
def test_help_fits_80_columns_and_reads_as_words(path: list[str]) -> None:
    text = _help(path)
    long = [line for line in text.splitlines() if len(line) > WIDTH]
    assert not long, long
    split = [line for line in text.splitlines() if re.search(r"(^|\s)--?[a-z][a-z-]*-$", line)]
    assert not split, f"an option name broken across lines: {split}"
    assert not re.search(r"\{\w+\}|<(str|int|float|path|int range|float range)>", text), text
    assert "x>=0.0" not in text.split("Options:")[0]  # no range as a metavar
    variable = re.findall(r"--[a-z-]+ ([A-Z]+_[A-Z_]+)\b", text)
    assert not variable, f"a Python variable name as a metavar: {variable}"


@pytest.mark.parametrize("path", [p for p in COMMANDS if p], ids=" ".join)
def test_a_command_that_takes_an_id_says_what_it_is(path: list[str]) -> None:
    text = _help(path)
    if not re.search(r"^Usage: .* ID\b", text, re.M):
        return
    assert re.search(r"^\s+ID\s+Sandbox ID", text, re.M), text


def test_fixed_choices_are_listed_and_match_the_library() -> None:
    from ckpt import statefile
    from ckpt.sandbox import lifecycle

    assert tuple(e.value for e in Engine) == lifecycle.ENGINES
    assert tuple(c.value for c in Compression) == statefile.COMPRESSIONS
    text = _help(["checkpoint"])
    assert "--engine [native|typed|reflect]" in text
    assert "--compression [none|zstd]" in text
    assert "--image-path PATH" in text and "--drain-timeout SECONDS" in text
    assert "--cpu CPUS" in _help(["restore"])
    assert "kv:N" in _help(["run"])


def test_a_choice_outside_the_list_is_refused_by_the_parser() -> None:
    result = CliRunner().invoke(
        cli.app, ["checkpoint", "x", "--image-path", "/i", "--compression", "lz4"]
    )
    assert result.exit_code == 2 and "lz4" in result.output


def _render(renderable) -> list[str]:
    buf = io.StringIO()
    Console(file=buf, width=WIDTH, color_system=None).print(renderable)
    return buf.getvalue().splitlines()


def test_list_keeps_the_creation_time_on_one_line_at_80_columns() -> None:
    from ckpt.sandbox.paths import SandboxState
    from ckpt.sandbox.render import sandboxes_table

    states = [
        SandboxState(
            id="web-frontend-0001",
            pid=4194303,
            status="unreadable",
            workload="memory:1024",
            cgroup=None,
            created="2026-12-04T13:04:19Z",
            address="127.0.0.1:65535",
            cpu=0.25,
        )
    ]
    lines = _render(sandboxes_table(states))
    assert all(len(line) <= WIDTH for line in lines), lines
    assert any("2026-12-04 13:04:19" in line for line in lines), lines
    assert any("unreadable" in line for line in lines), lines
    assert "…" not in "\n".join(lines)


def test_inspect_types_fold_long_names_rather_than_cut_them() -> None:
    from ckpt.statefile import render as statefile_render

    names = [
        "ckpt.kernel.mm.MemoryManager",
        "ckpt.kernel.net.UnixStreamSocketPairEndpoint",
        "ckpt.kernel.fs.InodeTable",
    ]
    report = {
        "types": [
            {"name": n, "count": 1_000 * i, "bytes": 90_000 - i, "fields": ["a_field"] * 12}
            for i, n in enumerate(names)
        ],
        "stream": {},
    }
    lines = _render(statefile_render._types(report))
    assert all(len(line) <= WIDTH for line in lines), lines
    assert "…" not in "\n".join(lines)
    first_column = "".join(line.split("│")[1].strip() for line in lines if line.count("│") > 2)
    for name in names:
        assert name in first_column, first_column
