"""``restore --background`` from ``s3://`` end to end, against the real SeaweedFS with
real sandboxes: the memory is right while pages still load, a second restore reads its
chunks from the local cache, and a store killed mid-load or a tampered chunk stops the
sandbox with one log line and never a wrong answer."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from ckpt.bench import seaweed
from ckpt.sandbox.host.http import get_json
from ckpt.storage.repository import CHUNKS, Repository
from tests.sandbox.conftest import Cli, cli, tcli  # noqa: F401  (the sandbox fixtures)
from tests.sandbox.waiting import wait_for

pytestmark = pytest.mark.slow

MEM = "s3lazy"
FAULT_BUCKET = "ckpt-fault"
SLOW_FILL = "pages-fill-delay:1"  # one run (1 MiB of memory) a second, unless touched


def _get(runner: Cli, path: str) -> dict | None:
    """The sandbox's answer to GET ``path``, or None if it stopped before answering."""
    host, _, port = runner.state(MEM)["address"].rpartition(":")
    try:
        status, body = get_json(host, int(port), path, timeout=30)
    except (OSError, ValueError, IndexError):
        return None
    assert status == 200, body
    return body


def _checkpointed(runner: Cli, url: str, env: dict[str, str], workload: str, key: Path) -> str:
    runner("run", MEM, "--workload", workload, "--port", "0", timeout=50)
    body = _get(runner, "/memory")
    assert body is not None
    runner("checkpoint", MEM, "--image-path", url, "--key-file", str(key), env=env, timeout=50)
    runner("delete", MEM)
    return str(body["memory_sha256"])


def _load_lines(runner: Cli) -> list[str]:
    log = (runner.root / MEM / "sandbox.log").read_text()
    return [line for line in log.splitlines() if "during background load" in line]


def _source_line(runner: Cli) -> str:
    """The restore's line on where its chunks came from.  The fill thread writes it as it
    lets go of the chunk source, just after the kernel stops reporting pages_loading,
    so it is waited for."""

    def found() -> list[str]:
        log = (runner.root / MEM / "sandbox.log").read_text()
        return [x for x in log.splitlines() if "from the local cache" in x]

    wait_for(lambda: found(), "the restore's chunk-source line", 20)
    lines = found()
    assert len(lines) == 1, lines  # one restore's log: one line
    return lines[0]


def _stopped_with_one_line(runner: Cli, digest: str, expected: str) -> None:
    """Every answer was the right memory or none, and the sandbox stopped, saying why
    in one log line."""
    body = _get(runner, "/memory")  # touches every page
    assert body is None or body["memory_sha256"] == digest  # never wrong memory
    wait_for(lambda: runner.state(MEM)["status"] == "stopped", "the sandbox to stop", 40)
    lines = _load_lines(runner)
    assert len(lines) == 1, lines
    assert expected in lines[0] and "stopping the sandbox" in lines[0], lines


def test_background_restore_serves_the_right_memory_and_reuses_the_cache(
    tcli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    key = tmp_path / "key"
    key.write_bytes(secrets.token_bytes(32))
    key.chmod(0o600)
    url = f"{s3_url}/img"
    digest = _checkpointed(tcli, url, s3_env, "memory:8", key)
    env = {**s3_env, "CKPT_CHUNK_CACHE_DIR": str(tmp_path / "chunks"), "CKPT_FAULT": SLOW_FILL}
    rs = ("restore", MEM, "--image-path", url, "--key-file", str(key), "--background")
    tcli(*rs, env=env, timeout=50)
    first = _get(tcli, "/")
    assert first is not None and first["pages_loading"] is True  # before the pages are in
    body = _get(tcli, "/memory")
    assert body is not None and body["memory_sha256"] == digest
    assert not (tcli.root / MEM / "image-stage").exists()
    wait_for(lambda: _get(tcli, "/")["pages_loading"] is False, "the fill to end", 40)  # type: ignore[index]
    line = _source_line(tcli)
    assert "0 from the local cache" in line and " 0 chunks from the store" not in line
    tcli("delete", MEM, "--force")
    # Every chunk removed from the store behind ckpt's back: only the cache has them.
    repo = Repository.open(s3_url)
    for obj in list(repo.store.list(CHUNKS)):
        repo.store.delete(obj.key)
    tcli(*rs, env={**env, "CKPT_FAULT": ""}, timeout=50)
    body = _get(tcli, "/memory")
    assert body is not None and body["memory_sha256"] == digest
    wait_for(lambda: _get(tcli, "/")["pages_loading"] is False, "the fill to end", 40)  # type: ignore[index]
    assert " 0 chunks from the store (0 bytes)" in _source_line(tcli)
    assert _load_lines(tcli) == []


def test_store_killed_mid_load_stops_the_sandbox_with_one_line(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The fill crawls (CKPT_FAULT); the store is killed once the restore answered; the
    sandbox's next read of a chunk it lacks fails: it stops, one line says the store
    failed, and no answer carried wrong memory."""
    server = seaweed.start(buckets=(FAULT_BUCKET,))
    try:
        key = tmp_path / "key"
        key.write_bytes(secrets.token_bytes(32))
        key.chmod(0o600)
        url = f"s3://{FAULT_BUCKET}/t/img"
        env = {**server.env(), "CKPT_TEMPLATE": "0"}
        digest = _checkpointed(cli, url, env, "memory:32", key)
        lazy = {**env, "CKPT_FAULT": SLOW_FILL, "CKPT_CHUNK_CACHE_DIR": str(tmp_path / "c")}
        cli("restore", MEM, "--image-path", url, "--key-file", str(key), "--background", env=lazy)
        server.process.kill()
        _stopped_with_one_line(cli, digest, "the store failed during background load")
    finally:
        server.stop()


def test_tampered_chunk_is_refused_during_background_load(
    tcli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    key = tmp_path / "key"
    key.write_bytes(secrets.token_bytes(32))
    key.chmod(0o600)
    url = f"{s3_url}/img"
    digest = _checkpointed(tcli, url, s3_env, "memory:8", key)
    repo = Repository.open(s3_url, key.read_bytes())
    ref = repo.read_manifest("img").files["pages.img"].chunks[-2]  # a chunk of page runs
    data = bytearray(repo.store.get(repo.chunk_key(ref.digest)))
    data[len(data) // 2] ^= 1
    repo.store.put(repo.chunk_key(ref.digest), bytes(data))
    cache = tmp_path / "chunks"
    env = {**s3_env, "CKPT_CHUNK_CACHE_DIR": str(cache), "CKPT_FAULT": SLOW_FILL}
    rs = ("restore", MEM, "--image-path", url, "--key-file", str(key), "--background")
    tcli(*rs, env=env, timeout=50)
    _stopped_with_one_line(tcli, digest, "does not match its digest")
    assert "page file damaged during background load" in _load_lines(tcli)[0]
    assert not (cache / ref.hex[:2] / ref.hex).exists()  # never cached
