"""Checkpoints into ``s3://`` that must fail with the sandbox still running and
serving: a store that never answers or a repository a prune holds (both found before
the sandbox is drained, within the stated deadline), a forced checkpoint that another
one beat to the same name, and a child whose parent was removed while it ran."""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt.sandbox.host import remote_image
from ckpt.sandbox.host.http import get_json
from ckpt.storage import lease as leases
from ckpt.storage.repository import Repository
from tests.sandbox.conftest import Cli, cli  # noqa: F401  (the sandbox fixtures)
from tests.sandbox.waiting import wait_for

SID = f"s3trust-{os.getpid()}"
# The deadline the code states for a store that does not answer (the CLI's look at
# the image, then the sandbox's checks before its drain), plus slack for a loaded host:
# the checkpoint command is given this long to fail (its watchdog), below the minute a
# single request to such a store takes to time out.
STATED_S = remote_image.BEFORE_DEADLINE_S + remote_image.PREPARE_DEADLINE_S
COMMAND_WATCHDOG_S = STATED_S + 25


def _run(runner: Cli, sandbox_id: str = SID, env: dict[str, str] | None = None) -> str:
    runner.env = {k: v for k, v in runner.env.items() if not k.startswith("AWS_")}
    runner("run", sandbox_id, "--workload", "memory:4", "--port", "0", env=env, timeout=50)
    return _serving(runner, sandbox_id)


def _serving(runner: Cli, sandbox_id: str = SID) -> str:
    """The sandbox's memory digest: it answers a request, and its record says running."""
    assert runner.state(sandbox_id)["status"] == "running"
    host, _, port = runner.state(sandbox_id)["address"].rpartition(":")
    status, body = get_json(host, int(port), "/memory", timeout=30)
    assert status == 200
    return str(body["memory_sha256"])


def _fails_while_serving(runner: Cli, env: dict[str, str], *args: str) -> str:
    """Run ``checkpoint SID *args``, which must fail; the sandbox answers a request
    all the while (a drained or frozen one would not): the error line."""
    proc = runner.popen("checkpoint", SID, *args, env=env)
    watchdog = time.monotonic() + COMMAND_WATCHDOG_S
    served = 0
    while proc.poll() is None:
        if time.monotonic() > watchdog:
            proc.kill()
            pytest.fail(f"the checkpoint had not failed {COMMAND_WATCHDOG_S:g} s after it began")
        assert _serving(runner), "the sandbox stopped answering during the checkpoint"
        served += 1
        time.sleep(0.2)
    _out, err = proc.communicate(timeout=30)
    assert served > 0
    return _one_error_line(err, proc.returncode)


def _one_error_line(err: str, returncode: int) -> str:
    lines = err.splitlines()
    assert returncode != 0 and len(lines) == 1, err
    assert lines[0].startswith("error: "), lines
    return lines[0]


@pytest.fixture
def black_hole() -> Iterator[str]:
    """http://127.0.0.1:PORT of a socket that accepts connections (the kernel does,
    into its backlog) and never answers a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


@pytest.mark.slow
@pytest.mark.watchdog_s(120)
def test_a_store_that_never_answers_fails_before_the_drain(
    cli: Cli,  # noqa: F811
    s3_env: dict[str, str],
    black_hole: str,
) -> None:
    digest = _run(cli)
    env = {**s3_env, "AWS_ENDPOINT_URL": black_hole}
    line = _fails_while_serving(cli, env, "--image-path", "s3://bucket/t/img")
    assert "did not answer" in line, line
    assert _serving(cli) == digest


@pytest.mark.slow
@pytest.mark.watchdog_s(120)
def test_a_held_prune_lease_fails_before_the_drain(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
) -> None:
    """A prune's lease, live by the store's clock (a prune running, or one killed a
    moment ago): the checkpoint fails in one line, the sandbox never paused."""
    digest = _run(cli)
    store = Repository.open(s3_url).store
    store.put(f"{leases.PREFIX}{leases.PRUNE}-{secrets.token_hex(8)}", b"{}")
    line = _fails_while_serving(cli, s3_env, "--image-path", f"{s3_url}/img")
    assert "a prune is in progress" in line, line
    assert _serving(cli) == digest
    assert Repository.open(s3_url).images() == []


def _stalled(runner: Cli, sandbox_id: str) -> bool | None:
    log = runner.root / sandbox_id / "sandbox.log"
    return (log.exists() and "stalling" in log.read_text()) or None


@pytest.mark.slow
@pytest.mark.watchdog_s(150)
def test_two_forced_checkpoints_to_one_name_one_fails_and_keeps_running(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Both started against the same image and both held before their commit; once
    released, exactly one replaces the image and stops, the other fails in one line
    and keeps running and serving."""
    release = tmp_path / "release"
    url = f"{s3_url}/img"
    fault = {"CKPT_TEMPLATE": "0", "CKPT_FAULT": f"checkpoint-stall:60:{release}"}
    ids = [f"{SID}-a", f"{SID}-b"]
    digests = {sid: _run(cli, sid, env=fault) for sid in ids}
    release.touch()
    cli("checkpoint", ids[0], "--image-path", url, "--leave-running", env=s3_env, timeout=50)
    release.unlink()
    procs = {
        sid: cli.popen("checkpoint", sid, "--image-path", url, "--force", env=s3_env) for sid in ids
    }
    for sid in ids:
        wait_for(lambda sid=sid: _stalled(cli, sid), f"{sid}'s checkpoint held", timeout=60)
    release.touch()
    results = {sid: proc.communicate(timeout=60) for sid, proc in procs.items()}
    codes = {sid: procs[sid].returncode for sid in ids}
    winners = [sid for sid in ids if codes[sid] == 0]
    assert len(winners) == 1, (codes, results)
    loser = next(sid for sid in ids if sid != winners[0])
    line = _one_error_line(results[loser][1], codes[loser])
    assert "written by another checkpoint" in line, line
    assert cli.state(winners[0])["status"] == "stopped"
    assert _serving(cli, loser) == digests[loser]
    assert Repository.open(s3_url).read_manifest("img").sandbox_id == winners[0]


@pytest.mark.slow
@pytest.mark.watchdog_s(150)
def test_a_parent_removed_under_a_checkpoint_fails_it_and_keeps_the_sandbox(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """While a child checkpoint is held before its commit, ``image rm`` of its parent
    is refused in one line; a parent removed all the same (by hand) fails the child's
    commit, and the sandbox runs on: no image with a broken chain is published."""
    release = tmp_path / "release"
    fault = {"CKPT_TEMPLATE": "0", "CKPT_FAULT": f"checkpoint-stall:60:{release}"}
    digest = _run(cli, env=fault)
    n0, n1 = f"{s3_url}/n0", f"{s3_url}/n1"
    cli("checkpoint", SID, "--image-path", n0, "--pre-dump", env=s3_env, timeout=50)
    proc = cli.popen("checkpoint", SID, "--image-path", n1, "--parent-path", n0, env=s3_env)
    wait_for(lambda: _stalled(cli, SID), "the child's checkpoint held", timeout=60)
    rm = cli("image", "rm", n0, "--force", env=s3_env, check=False)
    assert "upload is in progress" in _one_error_line(rm.stderr, rm.returncode)
    repo = Repository.open(s3_url)
    repo.store.delete(repo.manifest_key("n0"))
    release.touch()
    _out, err = proc.communicate(timeout=60)
    assert "was removed while this checkpoint ran" in _one_error_line(err, proc.returncode)
    assert _serving(cli) == digest
    assert repo.store.head(repo.manifest_key("n1")) is None


def test_work_given_up_on_is_undone_when_it_ends() -> None:
    """An upload that starts after its checkpoint gave up on it (a store that answered
    late) is aborted when it ends: its lease does not hold a repository for a ttl."""
    from ckpt.storage.errors import StoreUnreachable

    release, undone = threading.Event(), threading.Event()
    got: list[str] = []

    def late() -> str:
        release.wait(30)
        return "upload"

    def undo(result: str) -> None:
        got.append(result)
        undone.set()

    with pytest.raises(StoreUnreachable, match=r"did not answer within 0\.2 s"):
        remote_image.within(0.2, "s3://b/p/img", late, undo)
    release.set()
    assert undone.wait(30) and got == ["upload"]
    assert remote_image.within(5, "s3://b/p/img", lambda: "now", undo) == "now"
    assert got == ["upload"]  # work that ended in time is not undone
