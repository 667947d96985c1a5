"""A volume server of the store dies (SeaweedFS with a master and two volume servers, the
chunks spread over them), end to end with real sandboxes: a checkpoint fails in one line
or succeeds, never half-visible, and the sandbox runs on; a restore fails in one line
naming the store and leaves nothing, and once the volume server is back on its data the
same restore succeeds (an acknowledged image is never lost)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ckpt.bench import seaweed
from ckpt.storage.errors import NoSuchBucket
from ckpt.storage.repository import Repository
from ckpt.storage.s3 import S3Store
from tests.sandbox.conftest import Cli, cli  # noqa: F401  (the sandbox fixtures)
from tests.sandbox.waiting import wait_for

from .test_sandbox_s3 import MEM, _memory, _one_error_line, _run

pytestmark = pytest.mark.slow

BUCKET = "ckpt-volumes"
PREFIX = "t"
URL = f"s3://{BUCKET}/{PREFIX}/img"


def _start(data: Path) -> seaweed.SeaweedServer:
    """A master, filer and S3 gateway with no volume server of their own, and two volume
    servers: every chunk lives on one of those two."""
    return seaweed.start(data, buckets=(BUCKET,), extra_volumes=2, builtin_volume=False)


def _victim(server: seaweed.SeaweedServer, keys: list[str]) -> seaweed.VolumeServer:
    """The volume server holding the first of ``keys`` (object keys under PREFIX)."""
    held = server.holders(BUCKET, f"{PREFIX}/{keys[0]}")
    return next(v for v in server.volumes if v.url in held)


def _chunks(store: S3Store) -> list[str] | None:
    """The chunks in ``store`` so far; None before the checkpoint has made its
    bucket (under load the first look can come before it)."""
    try:
        return [o.key for o in store.list(".chunks/")] or None
    except NoSuchBucket:
        return None


@pytest.mark.watchdog_s(150)  # with no volume server, SeaweedFS answers each PUT after 30 s
@pytest.mark.parametrize("killed", ["one", "all"])
def test_volume_servers_killed_mid_checkpoint(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
    killed: str,
) -> None:
    """The checkpoint is held before its commit (CKPT_FAULT, released by a file) while
    the volume server holding its first chunk (or every volume server) is killed: it
    then fails in one line with no image listed and the sandbox running with its memory,
    or it succeeds and the image is listed.  With every volume server dead the manifest
    cannot be written, so it must fail; started again, the store lists no image."""
    server = _start(tmp_path / "seaweed")
    try:
        release = tmp_path / "release"
        fault = f"checkpoint-stall:30:{release}"
        digest = _run(cli, env={"CKPT_TEMPLATE": "0", "CKPT_FAULT": fault})
        store = S3Store.from_url(f"s3://{BUCKET}/{PREFIX}", server.env())
        proc = cli.popen("checkpoint", MEM, "--image-path", URL, env=server.env())
        chunks = wait_for(
            lambda: _chunks(store),
            "the checkpoint's first chunk in the store",
            timeout=30,
        )
        victims = server.volumes if killed == "all" else [_victim(server, chunks)]
        for victim in victims:
            victim.kill()
        release.touch()
        out, err = proc.communicate(timeout=50)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        assert killed == "one" or proc.returncode != 0, (out, err)
        if proc.returncode != 0:
            assert f"s3://{BUCKET}/{PREFIX}/" in _one_error_line(done), err
            assert cli.state(MEM)["status"] == "running"
            assert _memory(cli) == digest
        for victim in victims:
            victim.start()
        images = Repository(store).images()
        if proc.returncode == 0:
            assert [i.name for i in images] == ["img"], (out, err)
            assert cli.state(MEM)["status"] == "stopped"
        else:
            assert images == []
    finally:
        server.stop()


@pytest.mark.watchdog_s(150)  # a store, a sandbox, a checkpoint and two restores
def test_volume_server_killed_after_checkpoint(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The image is committed; the volume server holding one of its chunks is killed:
    the restore fails in one line naming the store and leaves no sandbox, record or
    fetched copy.  With that server started again on its data and ports, the same
    restore brings the same memory back."""
    server = _start(tmp_path / "seaweed")
    try:
        digest = _run(cli, env={"CKPT_TEMPLATE": "0"})
        cli("checkpoint", MEM, "--image-path", URL, env=server.env(), timeout=50)
        cli("delete", MEM)
        repo = Repository(S3Store.from_url(f"s3://{BUCKET}/{PREFIX}", server.env()))
        chunks = [repo.chunk_key(d) for d in repo.read_manifest("img").chunk_refs()]
        victim = _victim(server, chunks)
        victim.kill()
        env = {**server.env(), "CKPT_TEMPLATE": "0"}
        failed = cli("restore", MEM, "--image-path", URL, env=env, check=False, timeout=55)
        line = _one_error_line(failed)
        assert f"s3://{BUCKET}/{PREFIX}/" in line
        assert "the store failed to serve it" in line and "retry" in line, line
        assert cli("list", "--json").stdout.count(MEM) == 0
        assert not (cli.root / MEM).exists()
        victim.start()
        cli("restore", MEM, "--image-path", URL, env=env, timeout=55)
        assert _memory(cli) == digest
    finally:
        server.stop()
