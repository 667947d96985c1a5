"""``ckpt migrate --post-copy`` and ``--auto`` between two roots on loopback, real
processes: the sandbox resumes on the destination before its newest pages arrive,
and ends with every page and every acknowledged write; a source lost in the window
stops the destination's copy, which says how many pages never arrived.  No timing is
asserted: the figures come from ``ckpt bench migrate --modes``."""

from __future__ import annotations

import dataclasses
import json
import os
import signal

import pytest

from tests.sandbox.kv_client import check_values, put_values
from tests.sandbox.waiting import wait_for

from .migrate_kit import Hosts, Serve, address, digest, leftovers, running, stopped
from .wiretap import Tap

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
    hosts.dst.env["CKPT_MIGRATE_RECONNECT_S"] = "1"  # it waits this long for a reconnect
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


def _through(tap: Tap, serve: Serve) -> Serve:
    """``serve`` as the source reaches it: through ``tap``."""
    return dataclasses.replace(serve, address=tap.address)


def _slow_window(hosts: Hosts) -> tuple[dict[str, bytes], str, Serve, Tap]:
    """A kv:32 sandbox whose post-copy push crawls (the window stays open), with
    values written; its writes, digest, the server, and a relay to it that can cut."""
    hosts.src.env["CKPT_TEMPLATE"] = "0"  # its own process: the fault reaches it
    _run(hosts, "kv:32", env={"CKPT_FAULT": "push-delay:0.05"})
    acked = _put(hosts, 0, 100)
    before = digest(hosts.src, SID)
    serve = hosts.serve()
    host, _, port = serve.address.rpartition(":")
    return acked, before, serve, Tap((host, int(port)))


def _paging_cli(hosts: Hosts, serve: Serve, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """A post-copy migration with no round, stopped once committed, pages going."""
    cli = hosts.migrate_popen(
        SID,
        serve,
        env={"CKPT_FAULT": "pause:migrate:paging", **(env or {})},
        argv=("--post-copy", "--rounds", "0", "--json"),
    )
    wait_for(
        lambda: stopped(cli) or cli.poll() is not None, "the CLI to stop after the commit", 120
    )
    assert cli.poll() is None, cli.communicate()
    return cli


def test_a_link_cut_in_the_window_is_survived_by_reconnecting(hosts: Hosts) -> None:
    """Committed, pages still going, the link breaks and stays down 2 s: the source
    connects again, the destination says which pages it lacks, and the migration
    ends with every page and every acknowledged write."""
    acked, before, serve, tap = _slow_window(hosts)
    cli = _paging_cli(hosts, _through(tap, serve))
    try:
        tap.cut(down_s=2.0)
        cli.send_signal(signal.SIGCONT)
        out, err = cli.communicate(timeout=180)
    finally:
        if cli.poll() is None:
            cli.kill()
        tap.close()
    assert cli.returncode == 0, err
    report = json.loads(out)
    assert report["postcopy_reconnects"] == 1
    assert 0 < report["postcopy_resent"] <= report["postcopy_pages"]
    # after the reconnect the pages it lacked went, each once, and no other: the
    # counters are the streams' that ended whole (the cut one did not)
    assert report["postcopy_pushed"] + report["postcopy_faulted"] == report["postcopy_resent"]
    assert tap.dropped >= 1  # it tried while the link was down
    assert digest(hosts.dst, SID) == before
    check_values(address(hosts.dst, SID), acked)
    assert running(hosts.dst) == [SID] and running(hosts.src) == []
    assert any("its source reconnected" in line for line in serve.lines())
    assert leftovers(hosts) == []


def test_a_cut_longer_than_the_deadline_stops_the_destination(hosts: Hosts) -> None:
    """The link stays down past both sides' deadline: the destination stops its copy
    for want of pages, the source says so and keeps its paused copy, which resumes
    as it froze."""
    hosts.dst.env["CKPT_MIGRATE_RECONNECT_S"] = "1"
    acked, before, serve, tap = _slow_window(hosts)
    cli = _paging_cli(hosts, _through(tap, serve), env={"CKPT_MIGRATE_RECONNECT_S": "3"})
    try:
        tap.cut(down_s=600)
        cli.send_signal(signal.SIGCONT)
        _out, err = cli.communicate(timeout=180)
    finally:
        if cli.poll() is None:
            cli.kill()
        tap.close()
    assert cli.returncode != 0
    assert "could not reconnect" in err and f"ckpt resume {SID}" in err
    log = hosts.dst.root / SID / "sandbox.log"
    wait_for(
        lambda: log.exists() and "did not come back within 1 s" in log.read_text(),
        "the destination to stop for want of pages",
        60,
    )
    wait_for(lambda: _none_running(hosts.dst), "the destination's copy to stop", 60)
    assert hosts.src.state(SID)["status"] == "paused"
    hosts.src("resume", SID)
    assert digest(hosts.src, SID) == before
    check_values(address(hosts.src, SID), acked)
