"""``ckpt bench migrate --link netns`` for real, small: a kv sandbox moves from host A
to host B of the LAN under the keep-alive clients and the writer, nothing is reset,
refused or lost, and everything the bench made is gone afterwards, also when the
migration fails.  Root-only: skipped with the reason otherwise.  Never a timing."""

from __future__ import annotations

import os

import pytest

from ckpt.bench import lanload, lanmigrate, migrate
from ckpt.bench.harness import BenchError
from ckpt.bench.netns import list_namespaces, unavailable_reason

pytestmark = [
    pytest.mark.slow,
    pytest.mark.watchdog_s(300),
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"skipped: {unavailable_reason()}"),
]


def _ours() -> set[str]:
    """Namespaces this process made: the LAN's hosts and the sandboxes'."""
    pid = os.getpid()
    return {n for n in list_namespaces() if n.startswith(f"ckpt-{pid}-") or f"lan-{pid}-" in n}


def test_a_small_run_on_the_lan_resets_and_loses_nothing() -> None:
    report = migrate.run([4], ["kv"], rate=1 << 20, link="netns", runs=1)
    assert report["link"] == "lan-1gbit" and report["runs"] == 1
    (cell,) = report["cells"]
    (s,) = cell["samples"]
    assert cell["workload"] == "kv:4" and cell["runs"] == 1
    assert (s["resets"], s["refusals"], s["reconnects"], s["timeouts"]) == (0, 0, 0, 0), s
    assert s["acked"] > 0 and s["lost"] == 0, s
    assert len(s["client_gaps_ms"]) == lanload.KEEPALIVE + 1  # every client was answered
    assert s["gap_max_ms"] == max(s["client_gaps_ms"]) > 0
    assert s["frozen_ms"] > 0 and s["downtime_ms"] >= s["frozen_ms"] and s["rounds"] >= 1
    (line,) = lanmigrate.go_lines(report)
    assert line.startswith("BenchmarkMigrate/lan-1gbit/kv_4\t1\t") and "\t0 lost" in line
    assert not _ours()


def test_a_failed_migration_ends_the_bench_and_removes_what_it_made(monkeypatch) -> None:
    real = lanmigrate._ckpt

    def failing(host, root, *args, **kw):  # type: ignore[no-untyped-def]
        if args[0] == "migrate":
            raise BenchError("planted: the migration failed")
        return real(host, root, *args, **kw)

    monkeypatch.setattr(lanmigrate, "_ckpt", failing)
    with pytest.raises(BenchError, match="planted"):
        lanmigrate.run(["http"], runs=1)
    assert not _ours()
