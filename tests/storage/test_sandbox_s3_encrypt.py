"""``checkpoint --encrypt`` into ``s3://`` against the real SeaweedFS, with real
sandboxes: no object of the bucket holds a value PUT into the sandbox, an unchanged
sandbox's second checkpoint uploads almost nothing, restores (eager and background)
bring the values back with the key and are refused in one line without it, with
another key, or with a byte of an object changed or cut, leaving no sandbox; a child
needs its parent's key; rm and prune work without the key."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ckpt.sandbox.host.http import get_json
from ckpt.storage.repository import Repository
from ckpt.storage.s3 import S3Store
from tests.sandbox.conftest import Cli, cli  # noqa: F401  (the sandbox fixtures)
from tests.sandbox.kv_client import check_values, put_values
from tests.sandbox.waiting import wait_for

# Several real sandboxes and restores a test: slower than the watchdog's default.
pytestmark = [pytest.mark.slow, pytest.mark.watchdog_s(300)]

SID = f"s3enc-{os.getpid()}"
SECRET = b"TOPSECRET-" + os.urandom(8).hex().encode()


def _key(tmp_path: Path, name: str = "key") -> Path:
    path = tmp_path / name
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return path


def _address(runner: Cli) -> tuple[str, int]:
    host, _, port = runner.state(SID)["address"].rpartition(":")
    return host, int(port)


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), lines
    return lines[0]


def _objects(s3_url: str, env: dict[str, str]) -> dict[str, bytes]:
    store = S3Store.from_url(s3_url, env)
    return {o.key: store.get(o.key) for o in store.list("")}


def _checkpoint(runner: Cli, url: str, key: Path, env: dict[str, str], *extra: str) -> dict:
    proc = runner("checkpoint", SID, "--image-path", url, "--encrypt", "--key-file", str(key),
                  "--json", *extra, env=env, timeout=120)  # fmt: skip
    return json.loads(proc.stdout)["timings"]["counters"]  # type: ignore[no-any-return]


def _restore_refused(runner: Cli, url: str, env: dict[str, str], *extra: str) -> str:
    """A restore that must fail: its one line, and no sandbox or fetched copy left."""
    proc = runner("restore", SID, "--image-path", url, *extra, env=env, check=False, timeout=120)
    line = _one_error_line(proc)
    assert runner("list", "--json").stdout.count(SID) == 0
    assert not (runner.root / SID).exists()
    return line


def test_an_encrypted_s3_image_holds_no_secret_dedups_and_restores(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    key, other = _key(tmp_path), _key(tmp_path, "other")
    cli("run", SID, "--workload", "kv:16", "--port", "0", timeout=120)
    acked = put_values(_address(cli), [("secret", SECRET)])
    assert acked == {"secret": SECRET}
    url = f"{s3_url}/img1"
    first = _checkpoint(cli, url, key, s3_env, "--leave-running", "--compression", "none")
    objects = _objects(s3_url, s3_env)
    assert any(k.startswith(".chunks/") for k in objects) and "img1/manifest" in objects
    for name, data in objects.items():
        assert SECRET not in data, name
    # The same unchanged sandbox again: its chunks are in the store already.
    second = _checkpoint(cli, f"{s3_url}/img2", key, s3_env, "--compression", "none")
    sent, total = second["upload_bytes_sent"], second["upload_bytes_total"]
    assert total > 0 and sent < total / 2, second
    assert first["upload_bytes_sent"] > 2 * sent
    print("s3 encrypted upload bytes", first["upload_bytes_sent"], sent, total)
    cli("delete", SID)
    assert "encrypted (key id" in _restore_refused(cli, url, s3_env)
    wrong = _restore_refused(cli, url, s3_env, "--key-file", str(other))
    assert "does not match this image" in wrong
    cli("restore", SID, "--image-path", url, "--key-file", str(key), env=s3_env, timeout=120)
    check_values(_address(cli), acked)
    assert not (cli.root / SID / "image-stage").exists()
    cli("delete", SID, "--force")
    cache = tmp_path / "cache"
    cli("restore", SID, "--image-path", f"{s3_url}/img2", "--key-file", str(key),
        "--background", env={**s3_env, "CKPT_CHUNK_CACHE_DIR": str(cache)}, timeout=120)  # fmt: skip
    check_values(_address(cli), acked)
    cached = [p for p in cache.rglob("*") if p.is_file()]
    assert cached  # the chunks as stored: sealed
    for path in cached:
        assert SECRET not in path.read_bytes(), path
    # rm and prune need no key: the clear index names every chunk.
    cli("image", "rm", url, env=s3_env, timeout=60)
    cli("image", "rm", f"{s3_url}/img2", env=s3_env, timeout=60)
    cli("image", "prune", s3_url, "--grace", "0", env=s3_env, timeout=60)
    assert not [k for k in _objects(s3_url, s3_env) if k.startswith(".chunks/")]


def test_a_changed_or_cut_object_is_refused_and_nothing_restored(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    key = _key(tmp_path)
    cli("run", SID, "--workload", "memory:4", "--port", "0", timeout=120)
    status, body = get_json(*_address(cli), "/memory", timeout=30)
    digest = body["memory_sha256"]
    url = f"{s3_url}/img"
    _checkpoint(cli, url, key, s3_env)
    cli("delete", SID)
    repo = Repository.open(s3_url, key.read_bytes())
    store = repo.store
    ref = repo.read_manifest("img").files["pages.img"].chunks[-2]  # a chunk of page runs
    victim = repo.chunk_key(ref.digest)
    good = store.get(victim)
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 1
    store.put(victim, bytes(flipped))
    assert "fails its aes-256-gcm tag" in _restore_refused(cli, url, s3_env, "--key-file", str(key))
    store.put(victim, good[:-1])
    assert "truncated" in _restore_refused(cli, url, s3_env, "--key-file", str(key))
    manifest = store.get("img/manifest")
    store.put("img/manifest", manifest[:-1] + bytes([manifest[-1] ^ 1]))
    line = _restore_refused(cli, url, s3_env, "--key-file", str(key))
    assert "manifest fails its aes-256-gcm tag" in line
    store.put("img/manifest", manifest)
    # In the background the sandbox answers first; the bad chunk stops it, in one line,
    # and never serves the wrong memory; the chunk is not cached.
    store.put(victim, bytes(flipped))
    cache = tmp_path / "cache"
    env = {**s3_env, "CKPT_CHUNK_CACHE_DIR": str(cache), "CKPT_FAULT": "pages-fill-delay:1"}
    cli("restore", SID, "--image-path", url, "--key-file", str(key), "--background", env=env,
        timeout=120)  # fmt: skip
    try:
        status, body = get_json(*_address(cli), "/memory", timeout=30)
        assert status == 200 and body["memory_sha256"] == digest
    except (OSError, ValueError, IndexError):
        pass  # stopped before answering: never a wrong answer
    wait_for(lambda: cli.state(SID)["status"] == "stopped", "the sandbox to stop", 40)
    log = (cli.root / SID / "sandbox.log").read_text().splitlines()
    lines = [x for x in log if "during background load" in x]
    assert len(lines) == 1 and "fails its aes-256-gcm tag" in lines[0], lines
    assert not (cache / ref.hex[:2] / ref.hex).exists()
    cli("delete", SID, "--force")
    store.put(victim, good)
    cli("restore", SID, "--image-path", url, "--key-file", str(key), env=s3_env, timeout=120)
    status, body = get_json(*_address(cli), "/memory", timeout=30)
    assert body["memory_sha256"] == digest


def test_a_child_must_be_sealed_with_its_parents_key(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    key, other = _key(tmp_path), _key(tmp_path, "other")
    cli("run", SID, "--workload", "kv:2", "--port", "0", timeout=120)
    p0 = f"{s3_url}/p0"
    cli("checkpoint", SID, "--image-path", p0, "--pre-dump", "--encrypt", "--key-file", str(key),
        env=s3_env, timeout=120)  # fmt: skip
    base = ("checkpoint", SID, "--parent-path", p0, "--leave-running", "--image-path")
    cases = [
        (("--encrypt", "--key-file", str(other)), "a chain uses one key"),
        (("--key-file", str(key)), "encrypted throughout or not at all"),
        ((), "encrypted throughout or not at all"),
    ]
    for i, (extra, expected) in enumerate(cases):
        proc = cli(*base, f"{s3_url}/c{i}", *extra, env=s3_env, check=False, timeout=120)
        assert expected in _one_error_line(proc)
        assert cli.state(SID)["status"] == "running"
    assert [i.name for i in Repository.open(s3_url).images()] == ["p0"]
    acked = put_values(_address(cli), [("k", b"v" * 64)])
    cli(*base, f"{s3_url}/c", "--encrypt", "--key-file", str(key), env=s3_env, timeout=120)
    cli("delete", SID, "--force")
    cli("restore", SID, "--image-path", f"{s3_url}/c", "--key-file", str(key), env=s3_env,
        timeout=120)  # fmt: skip
    check_values(_address(cli), acked)
