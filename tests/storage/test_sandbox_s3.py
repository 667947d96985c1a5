"""Checkpoint and restore through ``s3://`` against the real SeaweedFS, end to end with
real sandboxes (the CLI in subprocesses): the memory survives, an existing image is
refused without --force, and a store that refuses, lacks the bucket or dies mid-upload
costs one line and leaves the sandbox as it was, with no image."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ckpt.sandbox.host.http import get_json
from ckpt.storage.repository import Repository
from tests.sandbox.conftest import Cli, cli, tcli  # noqa: F401  (the sandbox fixtures)
from tests.sandbox.waiting import wait_for

pytestmark = pytest.mark.slow

MEM = f"s3mem-{os.getpid()}"
FAULT_BUCKET = "ckpt-fault"


def _memory(runner: Cli, sandbox_id: str = MEM) -> str:
    host, _, port = runner.state(sandbox_id)["address"].rpartition(":")
    status, body = get_json(host, int(port), "/memory", timeout=30)
    assert status == 200
    return body["memory_sha256"]


def _run(runner: Cli, env: dict[str, str] | None = None) -> str:
    """A memory:4 sandbox, started with no AWS variable in its (or its template's)
    environment: the store settings can only come with the checkpoint request."""
    runner.env = {k: v for k, v in runner.env.items() if not k.startswith("AWS_")}
    runner("run", MEM, "--workload", "memory:4", "--port", "0", env=env, timeout=50)
    return _memory(runner)


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), lines
    return lines[0]


def test_round_trip_through_s3_keeps_memory(
    tcli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    run = tcli
    digest = _run(run)
    url = f"{s3_url}/img1"
    key = tmp_path / "key"
    key.write_bytes(secrets.token_bytes(32))
    key.chmod(0o600)
    ck = ("checkpoint", MEM, "--image-path", url, "--key-file", str(key))
    res = run(*ck, env=s3_env, timeout=50)
    assert url in res.stdout
    assert run.state(MEM)["status"] == "stopped"
    images = Repository.open(s3_url).images()
    assert [i.name for i in images] == ["img1"] and images[0].sandbox_id == MEM
    rs = ("restore", MEM, "--image-path", url, "--key-file", str(key))
    run(*rs, env=s3_env, timeout=50)
    assert _memory(run) == digest
    assert not (run.root / MEM / "image-stage").exists()  # the fetched copy is gone
    # An existing image is refused in one line, the running sandbox untouched.
    refused = run(*ck, "--leave-running", env=s3_env, check=False, timeout=50)
    assert "exists; use --force" in _one_error_line(refused)
    assert run.state(MEM)["status"] == "running" and _memory(run) == digest
    before = Repository.open(s3_url).images()[0].image_id
    run(*ck, "--force", env=s3_env, timeout=50)
    assert Repository.open(s3_url).images()[0].image_id != before
    run(*rs, env=s3_env, timeout=50)
    assert _memory(run) == digest
    # inspect reads the image from the store: sealed, every chunk checked.
    shown = run("inspect", "statefile", url, "--key-file", str(key), "--json", env=s3_env)
    report = json.loads(shown.stdout)
    assert report["header"]["path"] == url and report["header"]["keyed"]
    assert report["metadata"]["sandbox_id"] == MEM and report["manifest"]["sealed"]
    assert url in run("inspect", "statefile", url, "--key-file", str(key), env=s3_env).stdout
    unkeyed = run("inspect", "statefile", url, env=s3_env, check=False)
    assert "pass its key file" in _one_error_line(unkeyed)
    # A chunk changed behind ckpt's back is refused in one line, by inspect and restore.
    repo = Repository.open(s3_url, key.read_bytes())
    ref = repo.read_manifest("img1").files["checkpoint.img"].chunks[0]
    data = bytearray(repo.store.get(repo.chunk_key(ref.digest)))
    data[100] ^= 1
    repo.store.put(repo.chunk_key(ref.digest), bytes(data))
    tampered = run("inspect", "statefile", url, "--key-file", str(key), env=s3_env, check=False)
    assert "does not match its digest" in _one_error_line(tampered)


def test_wrong_credentials_and_no_bucket_leave_the_sandbox_running(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
) -> None:
    digest = _run(cli)
    cases = [
        (f"{s3_url}/img", {"AWS_SECRET_ACCESS_KEY": "wrong"}, "refused the credentials"),
        ("s3://no-such-bucket-ckpt/x/img", {}, "no such bucket"),
    ]
    for url, env, expected in cases:
        res = cli("checkpoint", MEM, "--image-path", url, check=False, env={**s3_env, **env})
        assert expected in _one_error_line(res), res.stderr
        assert cli.state(MEM)["status"] == "running"
        assert _memory(cli) == digest
    assert Repository.open(s3_url).images() == []


def test_store_killed_mid_checkpoint_leaves_no_image_and_the_sandbox(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The sandbox stalls after writing its state and pages (CKPT_FAULT) and before the
    commit; the store is killed meanwhile: one line, the sandbox runs on, and the store,
    restarted on its data, holds no image."""
    from ckpt.bench import seaweed
    from ckpt.storage.s3 import S3Store

    data = tmp_path / "seaweed"
    server = seaweed.start(data, buckets=(FAULT_BUCKET,))
    try:
        url = f"s3://{FAULT_BUCKET}/t/img"
        digest = _run(cli, env={"CKPT_TEMPLATE": "0", "CKPT_FAULT": "checkpoint-stall:4"})
        store = S3Store.from_url(f"s3://{FAULT_BUCKET}/t", server.env())
        store.put("marker", b"written before the checkpoint")
        proc = cli.popen("checkpoint", MEM, "--image-path", url, env=server.env())
        # Kill the store once the pages are in it, which is inside the 4 s stall before
        # the commit; under load that can take a while, so wait for it, not for a time.
        wait_for(
            lambda: any(o.key.startswith(".chunks/") for o in store.list("")) or None,
            "the checkpoint's first chunk in the store",
            timeout=30,
        )
        server.process.kill()
        out, err = proc.communicate(timeout=40)
        assert proc.returncode == 1, (out, err)
        lines = err.splitlines()
        assert len(lines) == 1 and "did not answer" in lines[0], err
        assert cli.state(MEM)["status"] == "running"
        assert _memory(cli) == digest
    finally:
        server.stop()
    again = seaweed.start(data)
    try:
        store = S3Store.from_url(f"s3://{FAULT_BUCKET}/t", again.env())
        # The restarted store is the same store (it holds what was written before), and
        # it holds no manifest: the image never became visible.
        assert store.head("marker") is not None
        assert store.head("img/manifest") is None
        assert Repository(store).images() == []
    finally:
        again.stop()


def test_store_killed_mid_restore_leaves_nothing(
    cli: Cli,  # noqa: F811
) -> None:
    """The restoring sandbox stalls before it fetches the image (CKPT_FAULT); the store
    is killed meanwhile: one line, and no sandbox, record or fetched copy remains."""
    from ckpt.bench import seaweed

    server = seaweed.start(buckets=(FAULT_BUCKET,))
    try:
        url = f"s3://{FAULT_BUCKET}/t/img"
        _run(cli, env={"CKPT_TEMPLATE": "0"})
        cli("checkpoint", MEM, "--image-path", url, env=server.env(), timeout=50)
        cli("delete", MEM)
        fault = {**server.env(), "CKPT_TEMPLATE": "0", "CKPT_FAULT": "restore-stall:4"}
        proc = cli.popen("restore", MEM, "--image-path", url, env=fault)
        time.sleep(2.0)  # not a timing assertion: the kill lands in the stall or before it
        server.process.kill()
        out, err = proc.communicate(timeout=55)
        assert proc.returncode == 1, (out, err)
        lines = err.splitlines()
        assert len(lines) == 1 and "did not answer" in lines[0], err
        assert cli("list", "--json").stdout.count(MEM) == 0
        assert not (cli.root / MEM).exists()
    finally:
        server.stop()


def test_restore_refusals_start_no_sandbox(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
) -> None:
    """What the CLI can tell before starting a sandbox, it refuses in one line with
    nothing started: missing credentials (with --background too), a bad URL."""
    url = f"{s3_url}/img"
    no_keys = {k: "" for k in s3_env if k.startswith("AWS_")}
    cases = [
        (("--background",), no_keys, "set AWS_ACCESS_KEY_ID"),
        ((), no_keys, "set AWS_ACCESS_KEY_ID"),
    ]
    for extra, env, expected in cases:
        res = cli("restore", MEM, "--image-path", url, *extra, env=env, check=False)
        assert expected in _one_error_line(res), res.stderr
    res = cli("restore", MEM, "--image-path", f"s3://{s3_url[5:].split('/')[0]}", check=False)
    assert "name the image" in _one_error_line(res)
    assert not cli.root.exists()  # no sandbox was started: its root was never made


def test_sandbox_killed_mid_checkpoint_leaves_the_previous_image(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """A --force checkpoint whose sandbox is SIGKILLed before its commit: one line that
    says no image was committed, and the previous image is still the one listed."""
    release = tmp_path / "release"
    release.touch()  # the first checkpoint does not stall
    _run(cli, env={"CKPT_TEMPLATE": "0", "CKPT_FAULT": f"checkpoint-stall:20:{release}"})
    url = f"{s3_url}/img"
    cli("checkpoint", MEM, "--image-path", url, "--leave-running", env=s3_env, timeout=50)
    before = Repository.open(s3_url).images()
    assert [i.name for i in before] == ["img"]
    release.unlink()
    pid = cli.state(MEM)["pid"]
    log = cli.root / MEM / "sandbox.log"
    stalls = log.read_text().count("stalling")  # the first checkpoint's pass-through
    proc = cli.popen("checkpoint", MEM, "--image-path", url, "--force", env=s3_env)
    wait_for(lambda: log.read_text().count("stalling") > stalls, "the checkpoint to stall", 50)
    os.kill(pid, signal.SIGKILL)  # in the stall: after the state, before the commit
    _out, err = proc.communicate(timeout=50)
    lines = err.splitlines()
    assert proc.returncode != 0 and len(lines) == 1, err
    assert "no image was committed at " + url in lines[0], lines
    assert "previous image there is unchanged" in lines[0]
    assert Repository.open(s3_url).images() == before
