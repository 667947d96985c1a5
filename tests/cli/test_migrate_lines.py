"""What ``ckpt migrate`` says when it succeeds: where the sandbox serves now (not the
server it was sent to), and a note when its port had to change."""

from __future__ import annotations

from ckpt.cli.migrate import _port_moved
from ckpt.migration.outgoing import Report


def test_the_line_names_where_the_sandbox_serves_not_the_server() -> None:
    report = Report("web", "127.0.0.1:7000", address="127.0.0.1:36795", bytes_sent=7 << 20)
    report.rounds = [{"round": 0}, {"round": 1, "final": True}]
    line = report.line()
    assert line.startswith("migrated web to 127.0.0.1:7000, serving http://127.0.0.1:36795/: ")
    assert line.endswith("2 rounds, 7.0 MiB sent")


def test_a_port_that_changed_by_itself_is_noted() -> None:
    note = _port_moved("127.0.0.1:8090", "127.0.0.1:36795", None)
    assert note == "port 8090 was taken on the destination: it serves on port 36795 now"


def test_no_note_when_the_port_stayed_or_was_asked_for() -> None:
    assert _port_moved("127.0.0.1:8090", "10.0.0.2:8090", None) is None
    assert _port_moved("127.0.0.1:8090", "127.0.0.1:9000", 9000) is None
    assert _port_moved("127.0.0.1:8090", "127.0.0.1:9000", 0) is None  # --port 0: any
    assert _port_moved(None, "127.0.0.1:9000", None) is None
