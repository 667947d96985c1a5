"""The CLI's contract with a user and a script: every command takes ``--json`` worded one
way, shared options read the same everywhere, errors exit with documented codes, help
and tables fit 80 columns without cutting anything, logging is there when asked for and
costs nothing when not, completion works, and ``docs/cli.md`` is what the commands say."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main
from rich.console import Console
from typer.testing import CliRunner

from ckpt import cli, errors
from ckpt.cli import base, docgen, logconfig, output
from ckpt.cli.options import JSON_HELP, KEY_FILE_HELP, PORT_HELP
from tests.sandbox.conftest import Cli
from tests.sandbox.test_cli_startup import imported

WIDTH = 80
NO_JSON = {"demo"}  # a guided tour for a person


def _tree() -> list[tuple[list[str], object]]:
    found: list[tuple[list[str], object]] = []

    def walk(cmd: object, path: list[str]) -> None:
        found.append((path, cmd))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(cli.app), [])
    return found


TREE = _tree()
LEAVES = [(path, cmd) for path, cmd in TREE if not hasattr(cmd, "commands")]
GROUPS = [path for path, cmd in TREE if hasattr(cmd, "commands")]


def _options(name: str) -> list[tuple[str, object]]:
    return [
        (" ".join(path), p)
        for path, cmd in TREE
        for p in cmd.params  # type: ignore[attr-defined]
        if name in getattr(p, "opts", ())
    ]


def ckpt(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckpt", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


# -- one output contract ---------------------------------------------------------------


@pytest.mark.parametrize("path", [p for p, _ in LEAVES], ids=" ".join)
def test_every_command_takes_json_worded_one_way(path: list[str]) -> None:
    found = [o for where, o in _options("--json") if where == " ".join(path)]
    if path[-1] in NO_JSON:
        assert found == []
        return
    assert len(found) == 1, f"ckpt {' '.join(path)} has no --json"
    assert found[0].help == JSON_HELP  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "metavar", "help_text"),
    [("--port", "PORT", PORT_HELP), ("--root", "PATH", base.ROOT_HELP)],
)
def test_shared_options_read_the_same_everywhere(name: str, metavar: str, help_text: str) -> None:
    found = _options(name)
    assert len(found) >= 2, found
    for where, option in found:
        assert option.metavar == metavar, where  # type: ignore[attr-defined]
        assert option.help == help_text, where  # type: ignore[attr-defined]


def test_the_key_file_reads_the_same_everywhere_and_says_where_it_is_required() -> None:
    found = dict(_options("--key-file"))
    assert {"checkpoint", "restore", "inspect statefile", "serve", "migrate"} <= set(found)
    for where, option in found.items():
        assert option.metavar == "PATH", where  # type: ignore[attr-defined]
        required = where in ("serve", "migrate", "image rekey")
        suffix = "  [required]" if required else ""
        assert option.help == KEY_FILE_HELP + suffix, where  # type: ignore[attr-defined]
    text = CliRunner().invoke(cli.app, ["serve", "--help"], env={"COLUMNS": "80"}).output
    assert "[required]" in text.split("--key-file", 1)[1].split("--", 1)[0]


# -- exit codes ------------------------------------------------------------------------


def test_each_kind_of_error_states_its_code() -> None:
    from ckpt.migration.errors import DeadlineExceeded, PeerClosed
    from ckpt.storage import errors as storage

    expected = {
        errors.CkptError: 1,
        errors.SandboxError: 1,
        PeerClosed: 1,
        storage.StoreUnreachable: 1,
        errors.UsageError: 2,
        errors.SandboxNotFound: 3,
        errors.ImageNotFound: 3,
        storage.ObjectMissing: 3,
        storage.NoSuchBucket: 3,
        errors.ImageExistsError: 4,
        storage.ImageExists: 4,
        storage.ImageInUse: 4,
        errors.SandboxRefused: 4,
        errors.WaitTimeout: 124,
        errors.SandboxTimeout: 124,
        DeadlineExceeded: 124,
    }
    assert {cls: cls.exit_code for cls in expected} == expected
    assert set(errors.EXIT_CODES) == {0, 1, 2, 3, 4, 124}


def test_exit_codes_end_to_end(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    assert ckpt("--root", root, "state", "ghost").returncode == 3
    missing = ckpt("--root", root, "restore", "x", "--image-path", str(tmp_path / "nope"))
    assert missing.returncode == 3 and missing.stderr.startswith("error: no image at")
    no_key = ckpt("--root", root, "serve", "--listen", "127.0.0.1:0")
    assert no_key.returncode == 2 and no_key.stderr.startswith("error: a key file is required")
    assert ckpt("--root", root, "--log-file", str(tmp_path), "list").returncode == 2
    assert ckpt("--root", root, "--log-level", "loud", "list").returncode == 2  # click's


def test_help_lists_the_exit_codes() -> None:
    text = ckpt("--help", env={"COLUMNS": "80"}).stdout
    tail = " ".join(text.split("Exit status:", 1)[1].split())
    for code in ("0 ok", "1 failed", "2 usage", "3 not found", "4 refused", "124 a deadline"):
        assert code in tail, tail


# -- 80 columns ------------------------------------------------------------------------


def _help(path: list[str]) -> str:
    result = CliRunner().invoke(cli.app, [*path, "--help"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", [p for p, _ in TREE], ids=lambda p: " ".join(p) or "ckpt")
def test_help_at_80_columns_cuts_no_command_summary(path: list[str]) -> None:
    text = _help(path)
    assert all(len(line) <= WIDTH for line in text.splitlines())
    listing = text.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0] if path in GROUPS else ""
    cut = [line for line in listing.splitlines() if line.rstrip().endswith(("...", "…"))]
    assert not cut, cut


def _render(renderable: object) -> list[str]:
    buf = io.StringIO()
    Console(file=buf, width=WIDTH, color_system=None).print(renderable)
    return buf.getvalue().splitlines()


def _state(sandbox_id: str, address: str, status: str = "running"):  # type: ignore[no-untyped-def]
    from ckpt.sandbox.wire.paths import SandboxState

    return SandboxState(
        id=sandbox_id,
        pid=4194303,
        status=status,
        workload="memory:1024",
        cgroup=None,
        created="2026-12-04T13:04:19Z",
        address=address,
        cpu=0.25,
    )


@pytest.mark.parametrize("sandbox_id", ["abcdefghijkl", "web-frontend-0001-very-long-id"])
@pytest.mark.parametrize("address", ["127.0.0.1:65535", "255.255.255.255:65535", "[::1]:80"])
def test_list_keeps_every_address_whole_at_80_columns(sandbox_id: str, address: str) -> None:
    from ckpt.sandbox.client.render import sandboxes_table

    lines = _render(sandboxes_table([_state(sandbox_id, address), _state("b", "[::1]:8")]))
    assert all(len(line) <= WIDTH for line in lines), lines
    assert any(address in line for line in lines), lines
    assert any("2026-12-04 13:04:19" in line for line in lines), lines
    assert "…" not in "\n".join(lines)


def test_an_address_is_shown_as_text_not_as_an_emoji_code() -> None:
    from ckpt.sandbox.client.render import sandboxes_table

    lines = _render(sandboxes_table([_state("v6", "[2001:db8::1234:5678]:65535")]))
    shown = "".join(line.split()[4] if len(line.split()) > 4 else "" for line in lines[2:])
    assert ":1234:" in "".join(lines) and "🔢" not in "".join(lines), lines
    assert shown.startswith("[2001:db8::1234:5678]"), lines


def test_the_types_table_keeps_its_border_and_every_field_name() -> None:
    from ckpt.statefile import render as statefile_render

    fields = ["pid", "tgid", "comm", "state", "fd_table", "signal_handlers", "exit_code"]
    names = ["ckpt.kernel.mm.MemoryManager", "ckpt.kernel.net.UnixStreamSocketPairEndpoint"]
    report = {
        "types": [
            {"name": n, "count": 1000 * i, "bytes": 90_000_000 - i, "fields": fields}
            for i, n in enumerate(names)
        ],
        "stream": {},
    }
    lines = _render(statefile_render._types(report))
    assert all(len(line) <= WIDTH for line in lines), lines
    table = lines[1:]  # below the title
    assert table[0].endswith("┓") and table[-1].endswith("┘"), lines
    assert all(line.endswith(("│", "┃", "┩", "┓", "┘")) for line in table), lines
    cells = [line.split("│")[4].strip() for line in table if line.count("│") == 5]
    shown = " ".join(cells).replace(",", " ").split()
    assert shown.count("signal_handlers") == len(names), lines
    for field in fields:
        assert field in shown, (field, lines)


# -- docs/cli.md -----------------------------------------------------------------------


def test_docs_cli_md_is_what_the_commands_say() -> None:
    assert docgen.DOC.read_text(encoding="utf-8") == docgen.render(), (
        "docs/cli.md is out of date: run python3 -m ckpt.cli.docgen"
    )


def test_every_deadline_variable_is_in_the_deadlines_table() -> None:
    package = Path(cli.__file__).resolve().parents[1]
    used = {
        name
        for source in package.rglob("*.py")
        for name in re.findall(r"CKPT_[A-Z_]+_S\b", source.read_text(encoding="utf-8"))
    }
    assert used, "the search found no deadline variable"
    listed = {name for name, _, _ in docgen.deadlines()}
    assert used == listed


def test_the_reference_lists_every_command_and_option() -> None:
    text = docgen.render()
    for path, cmd in TREE:
        assert f"### `ckpt{' ' if path else ''}{' '.join(path)}`" in text
        for p in cmd.params:  # type: ignore[attr-defined]
            for opt in getattr(p, "opts", ()):
                if opt.startswith("--") and opt != "--help":
                    assert f"`{opt}" in text or f"/ {opt}" in text, (path, opt)


# -- logging ---------------------------------------------------------------------------


@pytest.fixture
def fresh_log() -> Iterator[None]:
    """Logging configured by a test is undone after it."""
    yield
    import logging

    logging.getLogger(logconfig.LOGGER).handlers.clear()
    logconfig._State.active = logconfig._State.to_file = False


def test_no_log_option_imports_no_logging(tmp_path: Path) -> None:
    assert "logging" not in imported(tmp_path, "state", "ghost")
    assert "logging" in imported(tmp_path, "--log-level", "info", "state", "ghost")


def test_a_json_log_file_holds_the_error_escaped(tmp_path: Path) -> None:
    log = tmp_path / "ckpt.log"
    hostile = tmp_path / "img\x1b[2J\x9b"
    proc = ckpt(
        "--log-file", str(log), "--log-format", "json", "inspect", "statefile", str(hostile)
    )
    assert proc.returncode == 3
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")  # still there
    raw = log.read_bytes()
    assert b"\x1b" not in raw and "\x9b".encode() not in raw
    (record,) = [json.loads(line) for line in raw.decode().splitlines()]
    assert record["level"] == "error" and record["logger"] == "ckpt"
    assert "img\x1b[2J\x9b" in record["message"]  # the JSON escapes decode to the name


def test_debug_logs_the_command_line_as_text(tmp_path: Path) -> None:
    log = tmp_path / "ckpt.log"
    root = str(tmp_path / "root")
    proc = ckpt("--root", root, "--debug", "--log-file", str(log), "list", "-q")
    assert proc.returncode == 0, proc.stderr
    (line,) = log.read_text().splitlines()
    assert re.fullmatch(r"\S+Z DEBUG ckpt: ckpt --root \S+ --debug --log-file \S+ list -q", line)


def test_serve_lines_become_log_records(tmp_path: Path, fresh_log: None, capsys) -> None:
    log = tmp_path / "serve.log"
    logconfig.configure(None, log, logconfig.Format.JSON)
    output.log_line("accepted a peer \x1b[2J")
    output.note("a remark")
    assert capsys.readouterr().err == "note: a remark\n"  # the peer's line is not on stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["logger"], r["level"]) for r in records] == [
        ("ckpt.serve", "info"),
        ("ckpt", "warning"),
    ]
    assert records[0]["message"] == "accepted a peer \x1b[2J"


def test_the_log_options_are_skipped_when_finding_the_command() -> None:
    """``main`` loads only the group of the command being run: a log option's value
    taken for the command word would load every group (and prune none)."""
    argv = ["--log-file", "/l", "--log-level", "debug", "--log-format", "json", "state", "w"]
    assert base.command_path(argv) == ["state", "w"]


def test_a_fifo_as_log_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = ckpt("--root", str(tmp_path / "root"), "--log-file", str(fifo), "list", "-q")
    assert proc.returncode == 2 and "--log-file" in proc.stderr


def test_logs_json_prints_one_object_per_line_across_chunks(capsys) -> None:
    from ckpt.cli.observe import _JsonLines

    lines = _JsonLines("web")
    for chunk in ("GET / 200\nGET /x", " 404\n", "\x9b[2Jtail"):
        lines.feed(chunk)
    lines.close()
    printed = capsys.readouterr().out
    assert "\x9b" not in printed  # a C1 control is a JSON escape, and the line is JSON
    assert [json.loads(line) for line in printed.splitlines()] == [
        {"id": "web", "line": "GET / 200"},
        {"id": "web", "line": "GET /x 404"},
        {"id": "web", "line": "\x9b[2Jtail"},
    ]


# -- completion ------------------------------------------------------------------------


def test_completion_completes_commands_through_the_entry_point() -> None:
    probe = "import sys; sys.argv = ['ckpt']; from ckpt.entry import main; main()"
    env = {**os.environ, "_CKPT_COMPLETE": "complete_bash", "COMP_WORDS": "ckpt chec",
           "COMP_CWORD": "1"}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) == {"checkpoint", "check"}


def test_help_offers_completion() -> None:
    text = _help([])
    assert "--install-completion" in text and "--show-completion" in text


def test_serve_detach_json_says_where_it_listens(tmp_path: Path, watchdog: None) -> None:
    import psutil

    key = tmp_path / "key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    root = tmp_path / "root"
    argv = ["--root", str(root), "serve", "--listen", "127.0.0.1:0", "--key-file", str(key)]
    proc = ckpt(*argv, "--detach", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    server = psutil.Process(doc["pid"])
    try:
        assert server.cmdline()[-len(argv) :] == argv  # the same command, in the foreground
        host, _, port = doc["address"].rpartition(":")
        assert (host, port.isdigit(), doc["log"]) == ("127.0.0.1", True, str(root / "serve.log"))
    finally:
        server.terminate()
        server.wait(30)


# -- the new --json outputs, end to end ------------------------------------------------


@pytest.mark.slow
@pytest.mark.watchdog_s(300)
def test_lifecycle_commands_print_the_record(cli: Cli, watchdog: None) -> None:
    run = json.loads(cli("run", "jsn", "--workload", "http", "--json").stdout)
    assert run["id"] == "jsn" and run["status"] == "running" and "timings" in run
    paused = json.loads(cli("pause", "jsn", "--json").stdout)
    assert (paused["id"], paused["status"], paused["pid"]) == ("jsn", "paused", run["pid"])
    resumed = json.loads(cli("resume", "jsn", "--json").stdout)
    assert resumed["status"] == "running" and resumed["address"] == run["address"]
    assert json.loads(cli("state", "jsn", "--json").stdout) == cli.state("jsn")
    killed = json.loads(cli("kill", "jsn", "--json").stdout)
    assert (killed["id"], killed["status"], killed["signal"]) == ("jsn", "stopped", "KILL")
    deleted = json.loads(cli("delete", "jsn", "--json").stdout)
    assert deleted == {"id": "jsn", "status": "deleted"}
    assert json.loads(cli("delete", "--all", "--json").stdout) == {"sandboxes": []}
    started = json.loads(cli("template", "start", "--json").stdout)
    assert started["running"] is True and started["root"] == str(cli.root.absolute())
    assert isinstance(started["pid"], int)
    stopped = json.loads(cli("template", "stop", "--json").stdout)
    assert stopped == {"running": False, "root": str(cli.root.absolute()), "stopped": True}
