"""``ckpt migrate --post-copy`` and ``--auto`` between two roots on loopback, real
processes: the sandbox resumes on the destination before its newest pages arrive,
and ends with every page and every acknowledged write; a source lost in the window
stops the destination's copy, which says how many pages never arrived.  No timing is
asserted: the figures come from ``ckpt bench migrate --modes``."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.sandbox.kv_client import check_values, put_values
from tests.sandbox.waiting import wait_for

from .migrate_kit import Hosts, address, digest, leftovers, running, stopped

pytestmark = pytest.mark.slow
SID = f"pc-{os.getpid()}"


def _run(hosts: Hosts, workload: str = "kv:8", env: dict[str, str] | None = None) -> None:
    hosts.src("run", SID, "--workload", workload, "--port", "0", timeout=120, env=env)


def _put(hosts: Hosts, first: int, count: int) -> dict[str, bytes]:
    items = ((f"k{i % 50}", b"%06d-" % i * (1 + i % 200)) for i in range(first, first + count))
    return put_values(address(hosts.src, SID), items)


def _none_running(cli) -> bool:  # type: ignore[no-untyped-def]
    """No sandbox of ``cli``'s root runs; one that is exiting (its record not yet
    updated, its connection reset) counts as still running."""
    try:
        return running(cli) == []
    except OSError:
        return False


def _report(proc) -> dict:  # type: ignore[no-untyped-def]
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_post_copy_with_no_round_sends_every_page_after_the_freeze(hosts: Hosts) -> None:
    _run(hosts)
    acked = _put(hosts, 0, 300)
    before = digest(hosts.src, SID)
    serve = hosts.serve()
    report = _report(hosts.migrate(SID, serve, "--post-copy", "--rounds", "0", "--json"))
    assert running(hosts.dst) == [SID] and running(hosts.src) == []
    assert not hosts.src.root.joinpath(SID).exists()
    assert digest(hosts.dst, SID) == before
    check_values(address(hosts.dst, SID), acked)
    assert report["mode"] == "post-copy" and len(report["rounds"]) == 1
    assert report["rounds"][0]["pages"] == 0  # the final image: kernel state only
    pages = report["postcopy_pages"]
    assert pages * 4096 >= 8 << 20  # kv:8: every page of its memory came after
    assert report["postcopy_pushed"] + report["postcopy_faulted"] == pages
    assert leftovers(hosts) == []


def test_post_copy_after_a_round_sends_what_was_written_since(hosts: Hosts) -> None:
    """Values written while the round runs are dirty at the freeze: they come after."""
    _run(hosts)
    serve = hosts.serve()
    cli = hosts.migrate_popen(
        SID, serve, env={"CKPT_FAULT": "pause:migrate:round"}, argv=("--post-copy", "--json")
    )
    try:
        wait_for(lambda: stopped(cli), "the migrate CLI to stop in its round", 120)
        acked = _put(hosts, 0, 200)  # the sandbox runs on: these pages are dirty now
        before = digest(hosts.src, SID)
        cli.send_signal(signal.SIGCONT)
        out, err = cli.communicate(timeout=180)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, err
    report = json.loads(out)
    assert len(report["rounds"]) == 2  # one round (the default), then the freeze
    assert 0 < report["postcopy_pages"] < report["rounds"][0]["pages"]
    assert digest(hosts.dst, SID) == before
    check_values(address(hosts.dst, SID), acked)
    assert running(hosts.dst) == [SID] and running(hosts.src) == []


def test_auto_stays_pre_copy_when_the_rounds_converge(hosts: Hosts) -> None:
    _run(hosts)
    acked = _put(hosts, 0, 100)
    serve = hosts.serve()
    report = _report(hosts.migrate(SID, serve, "--auto", "--json"))
    assert report["mode"] == "pre-copy"  # an idle kv:8: nothing left dirty
    assert "postcopy_pages" not in report
    check_values(address(hosts.dst, SID), acked)
    assert running(hosts.dst) == [SID] and running(hosts.src) == []


def test_a_destination_that_loses_its_source_in_the_window_stops(hosts: Hosts) -> None:
    """Committed, pages still going, the source CLI dies: the destination's copy
    stops and says how many pages never came; the source's stays paused (never two
    running copies), and resuming it brings the sandbox back as it froze."""
    hosts.src.env["CKPT_TEMPLATE"] = "0"  # its own process: the fault reaches it
    _run(hosts, "kv:32", env={"CKPT_FAULT": "push-delay:0.05"})
    acked = _put(hosts, 0, 100)
    before = digest(hosts.src, SID)
    serve = hosts.serve()
    cli = hosts.migrate_popen(
        SID,
        serve,
        env={"CKPT_FAULT": "pause:migrate:paging"},
        argv=("--post-copy", "--rounds", "0"),
    )
    try:
        wait_for(
            lambda: stopped(cli) or cli.poll() is not None, "the CLI to stop after the commit", 120
        )
        assert cli.poll() is None, cli.communicate()
        cli.kill()
        cli.wait(30)
    finally:
        if cli.poll() is None:
            cli.kill()
    log = hosts.dst.root / SID / "sandbox.log"
    wait_for(
        lambda: log.exists() and "pages never arrived" in log.read_text(),
        "the destination to stop for want of pages",
        120,
    )
    line = next(x for x in log.read_text().splitlines() if "pages never arrived" in x)
    missing, total = (int(w) for w in line.split(": ")[-1].split()[:3:2])
    assert 0 < missing <= total
    wait_for(lambda: _none_running(hosts.dst), "the destination's copy to stop", 60)
    wait_for(lambda: hosts.src.state(SID)["status"] == "paused", "the guard to finish", 60)
    assert running(hosts.src) == []
    hosts.src("resume", SID)
    assert digest(hosts.src, SID) == before
    check_values(address(hosts.src, SID), acked)


def test_pages_the_destination_reads_go_ahead_of_the_push(hosts: Hosts) -> None:
    """The push is slowed to a crawl (a second a batch): the destination still reads
    all its memory (the digest) while pages are being pushed, by asking for them."""
    hosts.src.env["CKPT_TEMPLATE"] = "0"  # its own process: the fault reaches it
    _run(hosts, env={"CKPT_FAULT": "push-delay:1"})
    acked = _put(hosts, 0, 50)
    before = digest(hosts.src, SID)
    serve = hosts.serve()
    cli = hosts.migrate_popen(SID, serve, env={}, argv=("--post-copy", "--rounds", "0", "--json"))
    try:
        wait_for(lambda: _serving(hosts.dst), "the destination to run the sandbox", 120)
        assert digest(hosts.dst, SID) == before  # every page, most of them asked for
        assert cli.poll() is None  # the push is still going: these came first
        check_values(address(hosts.dst, SID), acked)
        out, err = cli.communicate(timeout=300)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, err
    report = json.loads(out)
    assert report["postcopy_faulted"] > 0
    assert report["postcopy_pushed"] + report["postcopy_faulted"] == report["postcopy_pages"]


def _serving(cli) -> bool:  # type: ignore[no-untyped-def]
    try:
        return running(cli) == [SID]
    except (OSError, KeyError):
        return False
