"""ps, events, wait, logs, kill with a signal, --all, and the reasons a sandbox stopped,
end to end: the real CLI in subprocesses against real sandboxes.  Starting a sandbox is
the cost here, so each test runs its sandboxes through several commands."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.sandbox.conftest import Cli
from tests.sandbox.waiting import gone, wait_for

pytestmark = pytest.mark.slow

STREAM_WAIT_S = 60.0


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.watchdog_s(300)
def test_watching_a_running_sandbox_then_signalling_it(cli: Cli, watchdog: None) -> None:
    cli("run", "a", "--workload", "nginx")
    ps = json.loads(cli("ps", "a", "--json").stdout)
    assert ps["omitted"] == 0
    tasks = ps["tasks"]
    assert [t["tid"] for t in tasks][:1] == [1] and tasks[0]["ppid"] == 0
    assert {t["comm"] for t in tasks} == {"nginx"} and len(tasks) == 5
    assert {t["ppid"] for t in tasks[1:]} == {1}
    table = cli("ps", "a").stdout
    assert "COMMAND" in table and "nginx" in table

    (one,) = lines(cli("events", "a", "--stats").stdout)
    assert (one["type"], one["id"], one["data"]["status"]) == ("stats", "a", "running")
    assert one["data"]["kernel"]["tasks"] == 5 and one["data"]["kernel"]["sockets"] >= 5
    assert one["data"]["cpu"]["usage_usec"] > 0
    two = lines(cli("events", "a", "--count", "2", "--interval", "0.1").stdout)
    assert len(two) == 2
    assert two[1]["data"]["cpu"]["usage_usec"] >= two[0]["data"]["cpu"]["usage_usec"]

    timed_out = cli("wait", "a", "--timeout", "0.3", check=False)
    assert timed_out.returncode == 124
    assert timed_out.stderr.startswith("error: sandbox a is still running after 0.3 s")
    assert "booted workload nginx" in cli("logs", "a").stdout
    assert cli("list", "-q").stdout == "a\n"

    cli("pause", "a")
    paused = cli("ps", "a", check=False)
    assert paused.returncode == 1 and "is paused" in paused.stderr
    (frozen,) = lines(cli("events", "a", "--stats").stdout)
    assert frozen["data"]["status"] == "paused"
    cli("resume", "a")

    stream = cli.popen("events", "a", "--interval", "0.2")
    first = json.loads(stream.stdout.readline())  # watching: now it may stop
    follow = cli.popen("logs", "a", "-f")
    assert follow.stdout.readline().strip()  # following: it printed the log's first line
    pid = cli.state("a")["pid"]
    assert cli("kill", "a", "TERM").stdout == "sandbox a sent TERM\n"
    ended = json.loads(cli("wait", "a", "--json", "--timeout", "60").stdout)
    assert ended == {
        "id": "a",
        "status": "exited (code 0)",
        "reason": "exited",
        "exit_code": 0,
        "signal": None,
    }
    out, err = stream.communicate(timeout=STREAM_WAIT_S)  # ends with the sandbox
    assert stream.returncode == 0, err
    assert all(event["id"] == "a" for event in [first, *lines(out)])
    out, err = follow.communicate(timeout=STREAM_WAIT_S)
    assert follow.returncode == 0, err
    assert out.rstrip().endswith(f"[{pid}] exit status 0")
    state = cli.state_cli("a")
    assert (state["status"], state["status_text"]) == ("stopped", "exited (code 0)")
    refused = cli("kill", "a", "TERM", check=False)
    assert refused.returncode == 1 and "it is exited (code 0)" in refused.stderr


def test_checkpointed_killed_and_signalled_sandboxes_say_so(cli: Cli, tmp_path) -> None:
    cli("run", "c", "--workload", "http")
    cli("run", "k", "--workload", "http")
    cli("run", "h", "--workload", "empty")
    cli("checkpoint", "c", "--image-path", str(tmp_path / "c.img"))
    assert cli("wait", "c").stdout == "sandbox c checkpointed\n"
    assert cli("kill", "k").stdout == "sandbox k stopped\n"
    assert json.loads(cli("wait", "k", "--json").stdout)["status"] == "killed"
    cli("kill", "c")  # a checkpointed sandbox killed again stays checkpointed
    hup_pid = cli.state("h")["pid"]
    cli("kill", "h", "HUP")  # Python's default for SIGHUP: die, saying nothing
    wait_for(lambda: gone(hup_pid), "the sandbox to die of SIGHUP")
    doc = json.loads(cli("list", "--format", "json").stdout)
    assert {d["id"]: d["status_text"] for d in doc} == {
        "c": "checkpointed",
        "h": "killed (HUP)",
        "k": "killed",
    }
    table = cli("list").stdout
    assert "checkpointed" in table and "killed (HUP)" in table


def test_all_kills_and_deletes_every_sandbox_and_says_which_failed(cli: Cli) -> None:
    cli("run", "x", "--workload", "empty")
    cli("run", "y", "--workload", "empty")
    cli("kill", "x")
    refused = cli("delete", "--all", check=False)  # y runs: kept, and said so
    assert refused.returncode == 1
    assert "sandbox x deleted" in refused.stdout
    assert "error: y: sandbox y is running" in refused.stderr
    assert refused.stderr.splitlines()[-1] == "error: delete failed for 1 of 2 sandboxes: y"
    assert cli("list", "-q").stdout == "y\n"
    pid = cli.state("y")["pid"]
    assert cli("kill", "--all", "TERM").stdout == "sandbox y sent TERM\n"
    wait_for(lambda: gone(pid), "the sandbox to exit on SIGTERM")
    assert cli("kill", "--all").stdout == ""  # nothing left running
    assert cli("delete", "--all").stdout == "sandbox y deleted\n"
    assert cli("list", "-q").stdout == ""


def test_a_signal_goes_only_to_the_verified_process(cli: Cli) -> None:
    """A record whose pid was changed to another process's is refused, and that process
    gets nothing."""
    import subprocess
    import sys

    from ckpt.sandbox.paths import Root

    cli("run", "v", "--workload", "empty")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        root = Root(cli.root)
        st = root.read("v")
        real = st.pid
        st.pid = bystander.pid
        root.write(st)
        refused = cli("kill", "v", "TERM", check=False)
        assert refused.returncode == 1, refused.stdout
        assert bystander.poll() is None  # still alive: not signalled
        st.pid = real
        root.write(st)
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait(timeout=30)
    assert os.path.exists(cli.root / "v")
