"""``ckpt bench migrate``: one small real cell on loopback (every acknowledged write
arrives, the client found the destination), one under keep-alive clients with the
local baseline, the table within 80 columns, the plot, and bad options refused before
anything starts."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from ckpt.bench import migrate
from ckpt.bench.harness import BenchError


@pytest.mark.slow
def test_a_small_run_loses_nothing() -> None:
    report = migrate.run([4], ["kv"], rate=1 << 20, with_baseline=False)
    (cell,) = report["cells"]
    assert cell["load"] == "write" and cell["baseline_ms"] == 0 and cell["ratio"] == 0
    assert cell["acked"] > 0 and cell["lost"] == 0, cell
    assert cell["rounds"] >= 2 and cell["bytes_sent"] > 0 and cell["memory_bytes"] > 0
    assert cell["gap_ms"] > 0 and "downtime_ms" in cell["counters"]
    assert migrate.go_lines(report)[0].startswith("BenchmarkMigrate/loopback/kv_4\t1\t")


def test_table_fits_80_columns() -> None:
    cell = migrate.Cell("memory:1024", 12345.6, 99999.9, 99999.9, 999999, 2**33, 2**30, 1.234)
    report = {"link": "netns-1gbit+10ms", "cells": [vars(cell)]}
    buf = io.StringIO()
    Console(file=buf, width=80, record=True).print(migrate.render(report))
    assert max(len(line) for line in buf.getvalue().splitlines()) <= 80
    assert "…" not in buf.getvalue()


@pytest.mark.slow
def test_table_with_post_copy_and_auto_cells_fits_80_columns() -> None:
    cells = [
        migrate.Cell("memory:1024@200M", 123.4, 9999.9, 99999.9, 999999, 2**33, 2**30, 1.2),
        migrate.Cell("kv:2048", 123.4, 9999.9, 99999.9, 999999, 2**33, 2**30, 1.2),
        migrate.Cell("memory:64", 1.0, 2.0, 3.0, 4, 5, 6, 0.5),
    ]
    cells[0].mode = cells[0].chosen = "post-copy"
    cells[0].last_page_ms = 99999.9
    cells[1].mode, cells[1].chosen, cells[1].load = "auto", "post-copy", "keepalive"
    cells[2].same_memory = False
    report = {"link": "loopback", "cells": [vars(c) for c in cells]}
    buf = io.StringIO()
    Console(file=buf, width=80, record=True).print(migrate.render(report))
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text and "BAD" in text and "a:post" in text and "99999" in text
    lines = migrate.go_lines(report)
    assert lines[0].split("\t")[0].endswith("memory_1024@200M_postcopy")
    assert "last-page-ns" in lines[0] and "1 wrong-memory" in lines[2]


@pytest.mark.slow
def test_post_copy_and_auto_cells_lose_nothing() -> None:
    report = migrate.run(
        [4], ["kv", "memory"], rate=1 << 20, with_baseline=False, modes=["post-copy", "auto"]
    )
    kv_post, kv_auto, mem_post, mem_auto = report["cells"]
    assert kv_post["mode"] == kv_post["chosen"] == "post-copy" and kv_auto["mode"] == "auto"
    for cell in (kv_post, kv_auto):
        assert cell["acked"] > 0 and cell["lost"] == 0, cell
    assert mem_post["same_memory"] is True and mem_auto["same_memory"] is True


@pytest.mark.slow
def test_keep_alive_clients_and_the_baseline_are_measured() -> None:
    """The keep-alive clients follow the sandbox too (each answered again afterwards,
    so the gap is finite), and the local checkpoint + restore is timed."""
    report = migrate.run([4], ["kv"], rate=1 << 20, loads=["keepalive"])
    (cell,) = report["cells"]
    assert cell["load"] == "keepalive" and cell["acked"] > 0 and cell["lost"] == 0, cell
    assert cell["clients"] == 1 + migrate.KEEPALIVE_CLIENTS == len(cell["client_gaps_ms"])
    assert cell["gap_ms"] == max(cell["client_gaps_ms"])
    assert cell["gap_ms"] > 0 and cell["baseline_ms"] > 0, cell
    assert cell["ratio"] == round(cell["total_ms"] / cell["baseline_ms"], 3)
    (line,) = migrate.go_lines(report)
    assert line.startswith("BenchmarkMigrate/loopback/kv_4_keepalive\t1\t")
    assert "baseline-ns" in line


def test_keep_alive_clients_each_hold_one_connection(monkeypatch) -> None:
    """A keep-alive client opens one connection for all its requests while they are
    answered: the load is of kept-alive connections, not new ones."""
    import http.client

    from ckpt.sandbox.host import http as served

    def respond(method: str, path: str, body: bytes) -> tuple[int, dict]:
        return 200, {}

    srv = served.HttpServer(served.bind("127.0.0.1", 0), respond)
    srv.start()
    opened = []
    real = http.client.HTTPConnection.connect

    def connect(self):  # type: ignore[no-untyped-def]
        opened.append(self)
        real(self)

    monkeypatch.setattr(http.client.HTTPConnection, "connect", connect)
    try:
        (client,) = migrate._clients([srv.address], False, 1 << 20, "write")
        keep = migrate._Client([srv.address], False, 1 << 20, interval=0.001)
        keep.start()
        while keep.is_alive() and keep.gap_ns == 0:
            keep.join(0.05)
        keep._halt.wait(0.2)
        migrate._stop([client, keep])
    finally:
        srv.close()
    assert keep.failures == 0 and client.failures == 0
    assert len(opened) == 2, opened


def test_the_plot_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib")
    cells = [
        {**vars(migrate.Cell("kv:64", 20, 120, 140, 7000)), "baseline_ms": 6000.0},
        {**vars(migrate.Cell("kv:64", 40, 250, 300, 11000, load="keepalive"))},
    ]
    report = {"link": "loopback", "machine": {"cpu": "test"}, "cells": cells}
    out = migrate.plot(report, tmp_path / "m.png")
    assert out.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sizes": [0]},
        {"sizes": []},
        {"kinds": ["http"]},
        {"link": "wifi"},
        {"loads": ["burst"]},
        {"loads": []},
        {"link": "netns", "loads": ["keepalive"]},
        {"link": "netns", "encrypt": True},
        {"modes": ["lazy"]},
        {"modes": []},
    ],
)
def test_bad_options_are_refused_before_starting(kwargs: dict) -> None:
    with pytest.raises(BenchError):
        migrate.run(**{"sizes": [4], "kinds": ["kv"], **kwargs})
