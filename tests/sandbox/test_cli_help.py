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
from ckpt.cli.base import command_name as base_name
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
    from ckpt import state, statefile
    from ckpt.engines import ENGINE_NAMES

    assert tuple(e.value for e in Engine) == ENGINE_NAMES
    assert set(state.ENGINES) <= set(ENGINE_NAMES)
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
    from ckpt.sandbox.client.render import sandboxes_table
    from ckpt.sandbox.wire.paths import SandboxState

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


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "ckpt")
def test_defaults_are_worded_one_way(path: list[str]) -> None:
    """A default shows as ``[default: ...]`` (a description in parentheses inside it),
    never in the option's prose as "(default: ...)"."""
    text = _help(path)
    options = text.split("Options:", 1)[-1]
    assert not re.search(r"\(default\b", options), options


@pytest.mark.parametrize("path", [p for p in COMMANDS if p], ids=" ".join)
def test_every_argument_is_documented(path: list[str]) -> None:
    text = _help(path)
    usage = re.search(r"^Usage: .*?\[OPTIONS\](.*)$", text, re.M)
    assert usage is not None, text
    names = [
        a for a in re.findall(r"\b[A-Z][A-Z_]*\b", usage.group(1)) if a not in ("COMMAND", "ARGS")
    ]
    for name in names:
        described = rf"^  {name}\s+(?!\[required\])\S"  # more than typer's "[required]"
        assert re.search(described, text, re.M), f"{name} has no help line:\n{text}"


def test_every_group_module_is_in_groups_and_adds_the_words_it_claims() -> None:
    """``GROUPS`` is what ``main`` reads to import only the groups a command needs: a
    module left out of it, or a word it does not claim, would be a command never found.
    A module claims the top-level words it adds and the groups it adds commands to."""
    import importlib
    import pkgutil

    import ckpt.cli

    with_register = {
        info.name
        for info in pkgutil.iter_modules(ckpt.cli.__path__)
        if hasattr(importlib.import_module(f"ckpt.cli.{info.name}"), "register")
    }
    assert with_register == set(cli.GROUPS)

    fresh = typer.Typer()
    shared: dict[typer.Typer, list] = {}  # sub-apps are module globals: put them back

    def sizes() -> dict[str, int]:
        found = {base_name(c): 1 for c in fresh.registered_commands}
        for group in fresh.registered_groups:
            sub = group.typer_instance
            shared.setdefault(sub, list(sub.registered_commands))
            found[group.name] = 1 + len(sub.registered_commands)
        return found

    try:
        for name, words in cli.GROUPS.items():
            before = sizes()
            importlib.import_module(f"ckpt.cli.{name}").register(fresh)
            after = sizes()
            changed = {w for w, n in after.items() if before.get(w) != n}
            assert changed == set(words), name
    finally:
        for sub, commands in shared.items():
            sub.registered_commands = commands


LOAD_ORDER = """
import json
import ckpt.cli as cli
from ckpt.cli.base import command_name
for word in ("image", "state", None, "bench"):
    cli.load(word)
app = cli.base.app
print(json.dumps([[command_name(c) for c in app.registered_commands],
                  [g.name for g in app.registered_groups]]))
"""


def test_groups_load_once_each_and_list_in_one_order() -> None:
    """Loaded in any order, each group registers once and ``--help`` lists the
    commands, then the groups, in ``GROUPS`` order (in a fresh interpreter: this
    one has loaded them all already)."""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", LOAD_ORDER], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    commands, groups = json.loads(proc.stdout)
    words = list(dict.fromkeys(w for claimed in cli.GROUPS.values() for w in claimed))
    assert sorted(commands + groups) == sorted(words)  # each once, none missing
    assert commands == sorted(commands, key=words.index)
    assert groups == sorted(groups, key=words.index)


def test_a_result_is_its_headline_then_timings_on_one_line_or_as_a_table(capsys) -> None:
    from types import SimpleNamespace

    from ckpt.cli import output
    from ckpt.sandbox.wire.timings import Timings

    res = SimpleNamespace(
        timings=Timings(phases_ns={"freeze": 2_000_000}), stats=None, stats_text="none"
    )
    output.result("checkpoint done", res, title="checkpoint timings", table=False, stats=False)
    assert capsys.readouterr().out == "checkpoint done\n  freeze 2.0 ms\n"
    output.result("checkpoint done", res, title="checkpoint timings", table=True, stats=False)
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert lines[:2] == ["checkpoint done", "checkpoint timings"]
    assert any("freeze" in line and "2.00 ms" in line for line in lines), lines
    output.result("checkpoint done", res, title="checkpoint timings", table=False, stats=True)
    text = capsys.readouterr().out
    assert "checkpoint timings" in text and text.rstrip().endswith("none"), text


def test_json_is_one_indented_document_with_text_as_is(capsys) -> None:
    import json

    from ckpt.cli import output

    output.emit_json({"root": "/tmp/ü [x]", "n": 1})
    text = capsys.readouterr().out
    assert text == '{\n  "root": "/tmp/ü [x]",\n  "n": 1\n}\n'
    assert json.loads(text) == {"root": "/tmp/ü [x]", "n": 1}


LONG_NAMES = [
    "ckpt.kernel.net.UnixStreamSocketPairEndpoint",
    "ckpt.kernel.mm.MemoryManagerWithAVeryLongNameIndeed",
    "freeze_and_drain_every_connection_of_the_sandbox",
]


def _first_column(lines: list[str]) -> str:
    return "".join(line.split("│")[1].strip() for line in lines if line.count("│") > 2)


def test_result_tables_fold_long_names_rather_than_cut_them() -> None:
    from ckpt.sandbox.client.render import stats_renderable, timings_table
    from ckpt.sandbox.wire.timings import Timings

    stats = {
        "types": [
            {"type": n, "count": 1_234_567, "total_ns": 12_345_678_900, "per_object_ns": 1e6}
            for n in LONG_NAMES
        ],
        "total_ns": 99_999_999_999,
    }
    timings = Timings(
        phases_ns={n: 12_000_000 for n in LONG_NAMES},
        counters={"listener": "bound anew (" + "a long reason " * 6 + ")"},
    )
    for renderable in (stats_renderable(stats, None), timings_table("restore timings", timings)):
        lines = _render(renderable)
        assert all(len(line) <= WIDTH for line in lines), lines
        assert "…" not in "\n".join(lines), lines
        for name in LONG_NAMES:
            assert name in _first_column(lines), lines


def test_the_cli_folds_any_table_that_would_cut_a_name(capsys, monkeypatch) -> None:
    """Bench and inspect tables leave rich's default overflow, which cuts with "…" when
    the terminal is narrow; the CLI's one renderer folds them instead."""
    from rich.console import Group
    from rich.table import Table

    from ckpt.cli import output

    table = Table(title="bench")
    table.add_column("benchmark")
    table.add_column("variant")
    table.add_row("Graph/" + "x" * 60, "native-with-a-long-variant-name-" + "y" * 20)
    monkeypatch.setattr(output.out.real(), "width", WIDTH)  # a terminal 80 columns wide
    output.tables([Group(table)])
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= WIDTH for line in lines), lines
    assert "…" not in "\n".join(lines), lines
    assert "Graph/" + "x" * 60 in _first_column(lines), lines
