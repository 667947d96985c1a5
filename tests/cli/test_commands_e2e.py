"""ps, events, wait, logs, kill with a signal, --all, and the reasons a sandbox stopped,
end to end: the real CLI in subprocesses against real sandboxes.  Starting a sandbox is
the cost here, so each test runs its sandboxes through several commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.sandbox.conftest import Cli
from tests.sandbox.waiting import gone, wait_for

pytestmark = pytest.mark.slow

STREAM_WAIT_S = 60.0


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def ended(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """What a stream printed once it ended by itself; killed (and failed) if it did not."""
    try:
        return proc.communicate(timeout=STREAM_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=STREAM_WAIT_S)
        raise AssertionError(f"{proc.args[-4:]} did not end with the sandbox") from None


@pytest.mark.watchdog_s(300)
def test_watching_a_running_sandbox_then_signalling_it(cli: Cli, watchdog: None) -> None:
    cli("run", "watched", "--workload", "nginx")
    ps = json.loads(cli("ps", "watched", "--json").stdout)
    assert ps["omitted"] == 0
    tasks = ps["tasks"]
    assert [t["tid"] for t in tasks][:1] == [1] and tasks[0]["ppid"] == 0
    assert {t["comm"] for t in tasks} == {"nginx"} and len(tasks) == 5
    assert {t["ppid"] for t in tasks[1:]} == {1}
    table = cli("ps", "watched").stdout
    assert "COMMAND" in table and "nginx" in table

    (one,) = lines(cli("events", "watched", "--stats").stdout)
    assert (one["type"], one["id"], one["data"]["status"]) == ("stats", "watched", "running")
    assert one["data"]["kernel"]["tasks"] == 5 and one["data"]["kernel"]["sockets"] >= 5
    assert one["data"]["cpu"]["usage_usec"] > 0
    two = lines(cli("events", "watched", "--count", "2", "--interval", "0.1").stdout)
    assert len(two) == 2
    assert two[1]["data"]["cpu"]["usage_usec"] >= two[0]["data"]["cpu"]["usage_usec"]

    timed_out = cli("wait", "watched", "--timeout", "0.3", check=False)
    assert timed_out.returncode == 124
    assert timed_out.stderr.startswith("error: sandbox watched is still running after 0.3 s")
    assert "booted workload nginx" in cli("logs", "watched").stdout
    assert cli("list", "-q").stdout == "watched\n"

    cli("pause", "watched")
    paused = cli("ps", "watched", check=False)
    assert paused.returncode == 1 and "is paused" in paused.stderr
    (frozen,) = lines(cli("events", "watched", "--stats").stdout)
    assert frozen["data"]["status"] == "paused"
    cli("resume", "watched")

    stream = cli.popen("events", "watched", "--interval", "3600")  # its exit ends it
    follow = cli.popen("logs", "watched", "-f")
    try:
        first = json.loads(stream.stdout.readline())  # watching: now it may stop
        assert follow.stdout.readline().strip()  # following: it printed the first line
        pid = cli.state("watched")["pid"]
        assert cli("kill", "watched", "TERM").stdout == "sandbox watched sent TERM\n"
        how = json.loads(cli("wait", "watched", "--json", "--timeout", "60").stdout)
        assert how == {
            "id": "watched",
            "status": "exited (code 0)",
            "reason": "exited",
            "exit_code": 0,
            "signal": None,
        }
        out, err = ended(stream)
        assert stream.returncode == 0, err
        assert all(event["id"] == "watched" for event in [first, *lines(out)])
        out, err = ended(follow)
        assert follow.returncode == 0, err
        assert out.rstrip().endswith(f"[{pid}] exit status 0")
    finally:
        for proc in (stream, follow):
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=STREAM_WAIT_S)
    state = cli.state_cli("watched")
    assert state["status"] == "stopped"
    assert state["extra"]["stopped"] == {"reason": "exited", "code": 0}
    refused = cli("kill", "watched", "TERM", check=False)
    assert refused.returncode == 1 and "it is exited (code 0)" in refused.stderr


def test_checkpointed_killed_and_signalled_sandboxes_say_so(cli: Cli, tmp_path) -> None:
    cli("run", "ckpted", "--workload", "http")
    cli("run", "killed", "--workload", "http")
    cli("run", "hupped", "--workload", "empty")
    cli("checkpoint", "ckpted", "--image-path", str(tmp_path / "c.img"))
    assert cli("wait", "ckpted").stdout == "sandbox ckpted checkpointed\n"
    assert cli("kill", "killed").stdout == "sandbox killed stopped\n"
    assert json.loads(cli("wait", "killed", "--json").stdout)["status"] == "killed"
    cli("kill", "ckpted")  # a checkpointed sandbox killed again stays checkpointed
    hup_pid = cli.state("hupped")["pid"]
    cli("kill", "hupped", "HUP")  # Python's default for SIGHUP: die, saying nothing
    wait_for(lambda: gone(hup_pid), "the sandbox to die of SIGHUP")
    doc = json.loads(cli("list", "--format", "json").stdout)
    assert {d["id"]: d["extra"]["stopped"] for d in doc} == {
        "ckpted": {"reason": "checkpointed"},
        "hupped": {"reason": "killed", "signal": "HUP"},
        "killed": {"reason": "killed", "signal": "KILL"},
    }
    table = cli("list").stdout
    assert "checkpointed" in table and "killed (HUP)" in table


def test_all_kills_and_deletes_every_sandbox_and_says_which_failed(cli: Cli) -> None:
    cli("run", "all-x", "--workload", "empty")
    cli("run", "all-y", "--workload", "empty", "--ignore-cgroups")
    (event,) = lines(cli("events", "all-y", "--stats").stdout)  # no cgroup: its own CPU
    assert event["data"]["cgroup"] is False and event["data"]["memory"] is None
    assert event["data"]["cpu"]["source"] == "process"
    assert event["data"]["cpu"]["usage_usec"] > 0
    assert [t["comm"] for t in json.loads(cli("ps", "all-y", "--json").stdout)["tasks"]] == [
        "pause"
    ]
    cli("kill", "all-x")
    refused = cli("delete", "--all", check=False)  # y runs: kept, and said so
    assert refused.returncode == 1
    assert "sandbox all-x deleted" in refused.stdout
    assert "error: all-y: sandbox all-y is running" in refused.stderr
    assert refused.stderr.splitlines()[-1] == "error: delete failed for 1 of 2 sandboxes: all-y"
    assert cli("list", "-q").stdout == "all-y\n"
    pid = cli.state("all-y")["pid"]
    assert cli("kill", "--all", "TERM").stdout == "sandbox all-y sent TERM\n"
    wait_for(lambda: gone(pid), "the sandbox to exit on SIGTERM")
    assert cli("kill", "--all").stdout == ""  # nothing left running
    assert cli("delete", "--all").stdout == "sandbox all-y deleted\n"
    assert cli("list", "-q").stdout == ""


def test_a_signal_goes_only_to_the_verified_process(cli: Cli) -> None:
    """A record whose pid (and start time) were changed to another process's is
    refused, and that process gets nothing."""
    import sys

    import psutil

    from ckpt.sandbox.wire.paths import Root

    cli("run", "verified", "--workload", "empty")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        root = Root(cli.root)
        st = root.read("verified")
        real, real_start = st.pid, st.pid_start
        st.pid, st.pid_start = bystander.pid, psutil.Process(bystander.pid).create_time()
        root.write(st)  # the start time matches too: only its cgroup gives it away
        refused = cli("kill", "verified", "TERM", check=False)
        assert refused.returncode == 1, refused.stdout
        assert bystander.poll() is None  # still alive: not signalled
        st.pid, st.pid_start = real, real_start
        root.write(st)
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait(timeout=30)
    assert os.path.exists(cli.root / "verified")


@pytest.mark.watchdog_s(300)
def test_ps_and_events_answer_while_a_checkpoint_holds_the_sandbox(
    cli: Cli, tmp_path, watchdog: None
) -> None:
    """The read-only verbs bypass the lock a checkpoint holds: they answer during it,
    showing the kernel frozen, instead of being told the sandbox is busy."""
    release = tmp_path / "release"
    cli("run", "busy", "--workload", "http", env={"CKPT_FAULT": f"checkpoint-stall:60:{release}"})
    log = cli.root / "busy" / "sandbox.log"
    writer = cli.popen(
        "checkpoint", "busy", "--image-path", str(tmp_path / "img"), "--leave-running"
    )
    try:
        wait_for(lambda: "stalling" in log.read_text(), "the checkpoint to hold the sandbox")
        tasks = json.loads(cli("ps", "busy", "--json").stdout)["tasks"]
        assert [t["comm"] for t in tasks] == ["http-server"]
        (event,) = lines(cli("events", "busy", "--stats").stdout)
        assert event["data"]["kernel"]["frozen"] is True
    finally:
        release.touch()
        _, err = ended(writer)
    assert writer.returncode == 0, err
    (event,) = lines(cli("events", "busy", "--stats").stdout)
    assert event["data"]["kernel"]["frozen"] is False
