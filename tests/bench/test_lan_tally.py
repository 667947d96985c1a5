"""The LAN migration bench's accounting, on streams of client events made up by hand
(``lantally``), the clients' own reading of what happened to a request (``lanload``,
against small servers on 127.0.0.1 that answer, reset, close or are not there), and
the cell's table and benchmark lines."""

from __future__ import annotations

import contextlib
import io
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from rich.console import Console

from ckpt.bench import lanload, lanmigrate, lantally
from ckpt.bench.harness import BenchError

MS = 1_000_000


def _answers(client: int, times_ms: list[int], key: str = "") -> list[lantally.Event]:
    """Answers of ``client`` whole at ``times_ms``, each sent 1 ms before."""
    return [("answer", client, (t - 1) * MS, t * MS, key) for t in times_ms]


def test_a_clients_gap_is_between_its_answers_as_they_arrived() -> None:
    """Client 0 answers at 10, 20, 30; its next request, sent at 31, is answered at 600
    (it waited through the move); it ends at 605.  Client 1 answers every 10 ms
    throughout, so pooled over both no wait is above 10 ms."""
    events = [("open", 0, 0, 1 * MS, ""), ("open", 1, 0, 1 * MS, "")]
    events += _answers(0, [10, 20, 30])
    events.append(("answer", 0, 31 * MS, 600 * MS, ""))
    events.append(("end", 0, 0, 605 * MS, ""))
    events += _answers(1, list(range(10, 610, 10)))
    events.append(("end", 1, 0, 610 * MS, ""))
    t = lantally.tally(events)
    assert t.gaps_ms == [570.0, 10.0]  # by answer time: not the send, nor the latency
    assert t.longest_at_ns == [(30 * MS, 600 * MS), (10 * MS, 20 * MS)]
    assert t.gap_max_ms == 570.0 and t.gap_median_ms == 290.0
    assert (t.resets, t.refusals, t.reconnects, t.answers) == (0, 0, 0, 64)


def test_a_client_never_answered_after_the_move_shows_all_of_it() -> None:
    events = [("open", 0, 0, 0, ""), *_answers(0, [10, 20]), ("end", 0, 0, 900 * MS, "")]
    assert lantally.tally(events).gaps_ms == [880.0]


def test_events_are_ordered_by_when_they_happened() -> None:
    """Clients log from several threads: the stream is merged out of order."""
    events = [*_answers(0, [30, 10, 20]), ("end", 0, 0, 35 * MS, "")]
    assert lantally.tally(list(reversed(events))).gaps_ms == [10.0]


def test_resets_refusals_timeouts_and_reconnects_are_counted() -> None:
    events = [
        ("open", 0, 0, 1 * MS, ""),
        *_answers(0, [10]),
        ("reset", 0, 11 * MS, 12 * MS, ""),
        ("refused", 0, 13 * MS, 13 * MS, ""),
        ("refused", 0, 20 * MS, 20 * MS, ""),
        ("open", 0, 30 * MS, 31 * MS, ""),
        ("timeout", 0, 32 * MS, 42 * MS, ""),
        ("open", 0, 43 * MS, 44 * MS, ""),
        ("error", 0, 45 * MS, 46 * MS, ""),
        ("open", 1, 0, 1 * MS, ""),
        ("reset", 1, 2 * MS, 3 * MS, ""),
        ("open", 1, 4 * MS, 5 * MS, ""),
    ]
    t = lantally.tally(events)
    assert (t.resets, t.refusals, t.timeouts, t.errors) == (2, 2, 1, 1)
    assert t.reconnects == 3  # each client's first connection is not one


def test_an_unknown_event_is_refused() -> None:
    with pytest.raises(ValueError):
        lantally.tally([("answr", 0, 0, 0, "")])


def test_only_answered_writes_are_acknowledged() -> None:
    """A PUT whose connection reset before its answer is not acknowledged."""
    events = [
        *_answers(4, [10], key="w0#0"),
        ("reset", 4, 11 * MS, 12 * MS, ""),  # write 1 sent, never answered
        *_answers(4, [20], key="w1#1"),  # sent again on a new connection, answered
        *_answers(0, [15]),  # a GET acknowledges nothing
    ]
    t = lantally.tally(events, {"w0#0": "d0", "w1#1": "d1"})
    assert t.acked == {"w0": "d0", "w1": "d1"} and t.acked_writes == 2


def test_a_key_written_again_keeps_its_last_acknowledged_value() -> None:
    """The writer goes round its keys: write 2 is to w0 again, after write 0."""
    events = [*_answers(4, [30], key="w0#2"), *_answers(4, [10], key="w0#0")]
    events += _answers(4, [20], key="w1#1")
    digests = {"w0#0": "d0", "w1#1": "d1", "w0#2": "d2"}
    t = lantally.tally(events, digests)
    assert t.acked == {"w0": "d2", "w1": "d1"} and t.acked_writes == 3
    assert lantally.lost_writes(t.acked, {"w0": (200, "d0"), "w1": (200, "d1")}) == 1


def test_an_answer_other_than_200_ends_a_gap_but_acknowledges_nothing() -> None:
    """A full store answers 507: the connection is alive, the write not acknowledged."""
    events = [*_answers(4, [10], key="w0#0")]
    events += [("error", 4, (t - 1) * MS, t * MS, "") for t in (20, 30, 40)]
    events.append(("end", 4, 0, 45 * MS, ""))
    t = lantally.tally(events, {"w0#0": "d0"})
    assert t.gaps_ms == [10.0] and t.errors == 3 and t.answers == 1
    assert t.acked == {"w0": "d0"} and t.acked_writes == 1


@pytest.mark.parametrize(
    ("readback", "lost"),
    [
        ({"a": (200, "da"), "b": (200, "db"), "c": (200, "dc")}, 0),
        ({"a": (200, "da"), "c": (200, "dc")}, 1),  # b never read back
        ({"a": (200, "da"), "b": (404, "db"), "c": (200, "dc")}, 1),  # b not there
        ({"a": (200, "da"), "b": (200, "xx"), "c": (200, "dc")}, 1),  # b wrong
        ({}, 3),
    ],
)
def test_lost_writes_are_missing_absent_or_wrong(
    readback: dict[str, tuple[int, str]], lost: int
) -> None:
    acked = {"a": "da", "b": "db", "c": "dc"}
    assert lantally.lost_writes(acked, readback) == lost


def test_a_sample_counts_a_wrong_value_read_back() -> None:
    """The bench's own path from the clients' output to the figures: one write of two
    comes back changed."""
    seen = {
        "events": [
            ["open", 4, 0, 1 * MS, ""],
            ["answer", 4, 1 * MS, 2 * MS, "w0#0"],
            ["answer", 4, 3 * MS, 4 * MS, "w1#1"],
            ["end", 4, 0, 5 * MS, ""],
        ],
        "readback": {
            "w0": [200, lanload.digest(lanload.value_of(0))],
            "w1": [200, lanload.digest(lanload.value_of(0))],  # write 0's value: wrong
        },
    }
    moved = {"frozen_time_ms": 12.5, "downtime_ms": 80.0, "rounds": [{"final": True}]}
    s = lanmigrate.sample(moved, seen, 0, 10 * MS)
    assert (s["acked"], s["lost"], s["total_ms"], s["gap_max_ms"]) == (2, 1, 10.0, 2.0)


def test_a_cell_takes_medians_of_times_and_totals_of_counts() -> None:
    base = dict.fromkeys(lanmigrate.TIMES, 0.0) | dict.fromkeys(lanmigrate.COUNTS, 0)
    samples = [
        base | {"frozen_ms": 10.0, "gap_max_ms": 300.0, "resets": 0, "acked": 10},
        base | {"frozen_ms": 30.0, "gap_max_ms": 100.0, "resets": 1, "acked": 10},
        base | {"frozen_ms": 20.0, "gap_max_ms": 200.0, "resets": 0, "acked": 10, "lost": 1},
    ]
    c = lanmigrate.cell("kv:4", samples)
    assert (c["frozen_ms"], c["gap_max_ms"]) == (20.0, 200.0)
    assert (c["resets"], c["lost"], c["acked"], c["runs"]) == (1, 1, 30, 3)


def test_the_table_fits_80_columns_and_the_lines_are_one_per_run() -> None:
    base = dict.fromkeys(lanmigrate.TIMES, 99999.4) | dict.fromkeys(lanmigrate.COUNTS, 19)
    base |= {"total_ms": 999999.0, "acked": 99999}
    c = lanmigrate.cell("memory:1024", [base] * 5)
    report = {
        "link": "lan-1gbit+10ms",
        "runs": 5,
        "clients": 4,
        "cells": [c, c | {"workload": "kv:1024"}],
    }
    buf = io.StringIO()
    Console(file=buf, width=80, record=True).print(lanmigrate.render(report))
    assert max(len(line) for line in buf.getvalue().splitlines()) <= 80
    assert "…" not in buf.getvalue()
    lines = lanmigrate.go_lines(report)
    assert len(lines) == 10 and lines[0].startswith(
        "BenchmarkMigrate/lan-1gbit+10ms/memory_1024\t1\t"
    )


@pytest.mark.parametrize("workloads", [[], ["nginx"], ["files:10"], ["kv:4", "empty"], ["kv:x"]])
def test_a_workload_that_serves_no_http_is_refused_before_anything_starts(
    workloads: list[str],
) -> None:
    with pytest.raises(BenchError):
        lanmigrate.run(workloads, runs=1)


# --- the clients' reading of a request's fate, against local servers ------------------


@contextlib.contextmanager
def _server(behaviour: str) -> Iterator[int]:
    """A server on 127.0.0.1 that answers each request with 200 (``ok``), a 503
    (``busy``), or after the first answer resets (``reset``) or closes (``close``)."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(5)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = srv.accept()
                with conn:
                    n = 0
                    while data := conn.recv(65536):
                        if b"\r\n\r\n" not in data:
                            continue
                        if n >= 1 and behaviour in ("reset", "close"):
                            if behaviour == "reset":
                                conn.setsockopt(
                                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                                )
                            break
                        status = b"503 Busy" if behaviour == "busy" else b"200 OK"
                        conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\n\r\nok")
                        n += 1

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()


def _drive(port: int, requests: int, writer: bool = False) -> list[tuple]:
    events: list[tuple] = []
    halt = threading.Event()
    client = lanload.Client(0, "127.0.0.1", port, 0.0, writer, events, halt)
    sock = client._connect()
    for _ in range(requests):
        if sock is None:
            break
        try:
            client._one(sock)
        except lanload.HttpFailure:
            sock.close()
            sock = None
    if sock is not None:
        sock.close()
    return events


@pytest.mark.parametrize(
    ("behaviour", "kinds"),
    [
        ("ok", ["open", "answer", "answer"]),
        ("busy", ["open", "error", "error"]),
        ("reset", ["open", "answer", "reset"]),
        ("close", ["open", "answer", "reset"]),
    ],
)
def test_a_client_logs_what_became_of_each_request(behaviour: str, kinds: list[str]) -> None:
    with _server(behaviour) as port:
        events = _drive(port, 2)
    assert [e[0] for e in events] == kinds
    for kind, _, sent, got, _ in events:
        assert kind == "open" or got >= sent > 0


def test_a_connection_nobody_listens_for_is_a_refusal() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        events = _drive(port, 1)
    assert [e[0] for e in events] == ["refused"]


def test_a_writers_write_is_acknowledged_with_its_key_only_when_answered() -> None:
    with _server("reset") as port:
        events = _drive(port, 2, writer=True)
    assert [(e[0], e[4]) for e in events] == [("open", ""), ("answer", "w0#0"), ("reset", "")]


def test_the_writer_goes_round_its_keys() -> None:
    with _server("ok") as port:
        events: list[tuple] = []
        client = lanload.Client(4, "127.0.0.1", port, 0.0, True, events, threading.Event(), 2)
        sock = client._connect()
        assert sock is not None
        with sock:
            for _ in range(5):
                client._one(sock)
    assert [e[4] for e in events if e[0] == "answer"] == ["w0#0", "w1#1", "w0#2", "w1#3", "w0#4"]


def test_the_writers_values_are_its_numbers() -> None:
    assert lanload.value_of(12) == b"00000012" * (lanload.VALUE_BYTES // 8)
    assert lanload.digest(lanload.value_of(1)) != lanload.digest(lanload.value_of(2))
    assert lanload.write_of("w3#1027") == ("w3", 1027)


@pytest.mark.parametrize(
    ("workload", "slots"), [("kv:4", 512), ("kv:256", 32768), ("http", 0), ("memory:8", 0)]
)
def test_the_writer_uses_half_the_stores_keys(workload: str, slots: int) -> None:
    assert lanmigrate.slots_of(workload) == slots


def test_the_tcp_counters_are_read_from_nstat() -> None:
    out = (
        "#kernel\n"
        "TcpRetransSegs                  20                 0.0\n"
        "TcpExtTCPTimeouts               3                  0.0\n"
        "TcpExtTCPFastRetrans            2                  0.0\n"
    )
    assert lanmigrate.parse_nstat(out) == {"TcpRetransSegs": 20, "TcpExtTCPTimeouts": 3}
