"""What came from a file, a record, a manifest or a peer reaches the terminal shown,
never acted on: an ESC sequence (``\\x1b[2J`` clears the screen) or a C1 CSI
(``\\x9b``) in an error message, a table cell or a JSON document prints as an escape."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.table import Table
from rich.text import Text
from typer.testing import CliRunner

from ckpt.cli import app, main
from ckpt.cli.output import emit_json, printable, say, tables
from ckpt.statefile import ImageWriter

HOSTILE = "a\x1b[2Jb\x9bc\x7fd\x07e\nf"
RAW = ("\x1b", "\x9b", "\x7f", "\x07")


def _clean(text: str) -> None:
    for ch in RAW:
        assert ch not in text, repr(text)


def test_printable_escapes_c0_del_and_c1() -> None:
    assert printable(HOSTILE) == "a\\x1b[2Jb\\x9bc\\x7fd\\x07e\\nf"
    assert printable("plain: [x] é ü") == "plain: [x] é ü"


def test_an_error_message_prints_escaped(monkeypatch, capsys, tmp_path: Path) -> None:
    missing = tmp_path / "img\x1b[2J\x9b"
    monkeypatch.setattr(sys, "argv", ["ckpt", "inspect", "statefile", str(missing)])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 3  # not found
    err = capsys.readouterr().err
    _clean(err)
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "img\\x1b[2J\\x9b" in err


def test_a_table_cell_prints_escaped(capsys) -> None:
    table = Table(title="t\x9b")
    table.add_column("id")
    table.add_column("note")
    table.add_row(HOSTILE, Text("x\x1b[2J\x9by"))
    tables([table])
    printed = capsys.readouterr().out
    _clean(printed)
    assert "\\x1b[2J" in printed and "\\x9b" in printed


def test_lines_and_json_print_escaped(capsys) -> None:
    say("row\tkept\x1b[2J\x9b")
    emit_json({"sandbox_id": HOSTILE})
    printed = capsys.readouterr().out
    _clean(printed)
    line, document = printed.split("\n", 1)
    assert line == "row\tkept\\x1b[2J\\x9b"
    assert json.loads(document) == {"sandbox_id": HOSTILE}  # still the same value


def test_a_manifests_sandbox_id_prints_escaped(tmp_path: Path) -> None:
    with ImageWriter(tmp_path / "img", metadata={"sandbox_id": HOSTILE}) as img:
        img.write_pages([])
    for extra in ([], ["--json"]):
        res = CliRunner().invoke(app, ["inspect", "statefile", str(tmp_path / "img"), *extra])
        assert "sandbox_id" in res.output  # shown (the empty stream fails the report)
        _clean(res.output)


def test_serves_log_lines_print_escaped(monkeypatch, capsys, tmp_path: Path) -> None:
    from ckpt.cli.migrate import serve_cmd
    from ckpt.migration import serve as serve_module

    def fake_serve(*args, say, **kwargs) -> None:  # what a peer's Error text becomes
        say("migration failed: the peer says \x1b[2J\x9b")

    monkeypatch.setattr(serve_module, "serve", fake_serve)
    key = tmp_path / "key"
    key.write_bytes(bytes(range(32)))
    key.chmod(0o600)
    serve_cmd("127.0.0.1:0", key_file=key, root=tmp_path / "root")
    err = capsys.readouterr().err
    _clean(err)
    assert err == "migration failed: the peer says \\x1b[2J\\x9b\n"
