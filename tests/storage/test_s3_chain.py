"""Pre-dump chains in ``s3://`` against the real SeaweedFS, with real sandboxes (the CLI
in subprocesses): a pre-dump then a final dump naming it restores the same memory and
values while the final upload sends only the dirtied pages' chunks; a parent that is
not the sandbox's last image, in another place, too deep, or whose manifest was edited
is refused in one line; an image that is another's parent is not removed without
--force."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest

from ckpt.sandbox.host.http import get_json
from ckpt.storage.repository import Repository
from tests.sandbox.conftest import Cli, cli, tcli  # noqa: F401  (the sandbox fixtures)
from tests.sandbox.kv_client import check_values, put_values

SID = f"s3chain-{os.getpid()}"


def _address(runner: Cli) -> tuple[str, int]:
    host, _, port = runner.state(SID)["address"].rpartition(":")
    return host, int(port)


def _digest(runner: Cli) -> str:
    status, body = get_json(*_address(runner), "/memory", timeout=30)
    assert status == 200
    return str(body["memory_sha256"])


def _run(runner: Cli, workload: str) -> None:
    """A sandbox started with no AWS variable: the store settings come with requests."""
    runner.env = {k: v for k, v in runner.env.items() if not k.startswith("AWS_")}
    runner("run", SID, "--workload", workload, "--port", "0", timeout=50)


def _ckpt(runner: Cli, env: dict[str, str], url: str, *args: str) -> dict:
    out = runner("checkpoint", SID, "--image-path", url, *args, "--json", env=env, timeout=50)
    return json.loads(out.stdout)["timings"]["counters"]  # type: ignore[no-any-return]


def _one_error_line(proc: object) -> str:
    lines = proc.stderr.splitlines()  # type: ignore[attr-defined]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr  # type: ignore[attr-defined]
    assert lines[0].startswith("error: "), lines
    return lines[0]


def _key(tmp_path: Path) -> str:
    key = tmp_path / "key"
    key.write_bytes(secrets.token_bytes(32))
    key.chmod(0o600)
    return str(key)


@pytest.mark.slow
def test_pre_dump_then_final_restores_and_sends_only_dirty_chunks(
    tcli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    run, key = tcli, _key(tmp_path)
    _run(run, "kv:8")
    items = ((f"k{i}", b"%05d-" % i * 200) for i in range(40))
    acked = put_values(_address(run), items)
    pre = _ckpt(run, s3_env, f"{s3_url}/n0", "--pre-dump", "--key-file", key)
    assert run.state(SID)["status"] == "running"
    acked.update(put_values(_address(run), [("k1", b"changed" * 100), ("new", b"x" * 3000)]))
    digest = _digest(run)
    final = _ckpt(run, s3_env, f"{s3_url}/n1", "--parent-path", f"{s3_url}/n0", "--key-file", key)
    # The pre-dump sent every page; the final dump its kernel state and the few pages
    # dirtied since, each chunk of pages.img holding a run of them.
    assert pre["upload_bytes_sent"] > 1 << 20 and final["pages_skipped_parent"] > 1000
    assert final["upload_bytes_sent"] < pre["upload_bytes_sent"] // 20, (pre, final)
    print("s3chain upload bytes", pre["upload_bytes_sent"], final["upload_bytes_sent"])
    infos = {i.name: i for i in Repository.open(s3_url).images()}
    assert infos["n1"].parent == "n0" and infos["n0"].parent is None
    assert infos["n1"].parent_id == infos["n0"].image_id  # read before the freeze
    shown = run("image", "ls", s3_url, env=s3_env).stdout
    assert "n0" in shown.split("n1", 1)[1]  # n1's row names its parent
    # A parent is not removed while its child needs it; --force does.
    refused = run("image", "rm", f"{s3_url}/n0", env=s3_env, check=False)
    assert "is the parent of n1" in _one_error_line(refused)
    # A prune keeps every chunk of the chain: each is referenced by one of its manifests.
    pruned = json.loads(run("image", "prune", s3_url, "--grace", "0s", "--json", env=s3_env).stdout)
    assert pruned["removed_chunks"] == 0 and pruned["kept_referenced"] > 0
    # Eager restore follows the chain: the same memory and every acknowledged value.
    rs = ("restore", SID, "--image-path", f"{s3_url}/n1", "--key-file", key)
    run(*rs, env=s3_env, timeout=50)
    assert _digest(run) == digest
    check_values(_address(run), acked)
    assert not (run.root / SID / "image-stage").exists()
    run("delete", SID, "--force")
    # --background too: the parent staged whole, the final image's pages read lazily.
    run(*rs, "--background", env=s3_env, timeout=50)
    assert _digest(run) == digest
    check_values(_address(run), acked)
    run("image", "rm", f"{s3_url}/n0", "--force", env=s3_env)
    repo = Repository.open(s3_url)
    assert [i.name for i in repo.images()] == ["n1"]
    # The final dump's upload, started before the freeze, was the one committed: no
    # lease is left behind to hold off a prune.
    assert list(repo.store.list(".leases/")) == []


@pytest.mark.slow
def test_a_dump_that_fails_keeps_its_dirty_pages_for_the_next(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
) -> None:
    """Dirty tracking is reset only by a committed manifest: a pre-dump or final dump
    refused after it took the dirty pages (the target exists) puts them back, so the
    next dump against the same parent writes them."""
    run = cli
    _run(run, "kv:4")
    acked = put_values(_address(run), [(f"k{i}", b"v%d" % i * 500) for i in range(20)])
    _ckpt(run, s3_env, f"{s3_url}/n0", "--pre-dump")
    _ckpt(run, s3_env, f"{s3_url}/taken", "--pre-dump")
    acked.update(put_values(_address(run), [("k3", b"after" * 900), ("k4", b"more" * 900)]))
    for extra in (("--pre-dump",), ("--leave-running",)):
        args = ("--image-path", f"{s3_url}/taken", "--parent-path", f"{s3_url}/n0", *extra)
        proc = run("checkpoint", SID, *args, env=s3_env, check=False)
        assert "is not the last image" in _one_error_line(proc)
        args = ("--image-path", f"{s3_url}/n0", "--parent-path", f"{s3_url}/taken", *extra)
        proc = run("checkpoint", SID, *args, env=s3_env, check=False)
        assert "exists; use --force" in _one_error_line(proc)
    digest = _digest(run)
    _ckpt(run, s3_env, f"{s3_url}/n1", "--parent-path", f"{s3_url}/taken")
    run("restore", SID, "--image-path", f"{s3_url}/n1", env=s3_env, timeout=50)
    assert _digest(run) == digest
    check_values(_address(run), acked)
    shown = json.loads(run("inspect", "statefile", f"{s3_url}/n1", "--json", env=s3_env).stdout)
    chain = [(e["path"], e["kind"], "error" in e) for e in shown["chain"]]
    assert chain == [(f"{s3_url}/n1", "full", False), (f"{s3_url}/taken", "pre-dump", False)]


@pytest.mark.slow
def test_wrong_parents_are_refused_and_leave_the_sandbox(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    run = cli
    _run(run, "memory:2")
    digest = _digest(run)
    _ckpt(run, s3_env, f"{s3_url}/a", "--pre-dump")
    _ckpt(run, s3_env, f"{s3_url}/b", "--pre-dump")  # now a is no longer the last image
    cases = [
        ((f"{s3_url}/c", "--parent-path", f"{s3_url}/a"), "is not the last image taken"),
        ((f"{s3_url}/c", "--parent-path", f"{s3_url}/none"), "no such image"),
        ((f"{s3_url}/c", "--parent-path", str(tmp_path / "local")), "a chain lives in one"),
        ((str(tmp_path / "c"), "--parent-path", f"{s3_url}/b"), "a chain lives in one"),
        ((f"{s3_url}x/c", "--parent-path", f"{s3_url}/b"), "another repository"),
    ]
    for args, expected in cases:
        for extra in ((), ("--pre-dump",)):
            proc = run("checkpoint", SID, "--image-path", *args, *extra, env=s3_env, check=False)
            assert expected in _one_error_line(proc), (args, proc.stderr)
            assert run.state(SID)["status"] == "running"
    repo = Repository.open(s3_url)
    assert sorted(i.name for i in repo.images()) == ["a", "b"]
    assert list(repo.store.list(".leases/")) == []  # nothing left by a refused dump
    # b is still the last image: a final dump against it restores the same memory.
    _ckpt(run, s3_env, f"{s3_url}/c", "--parent-path", f"{s3_url}/b")
    run("restore", SID, "--image-path", f"{s3_url}/c", env=s3_env, timeout=50)
    assert _digest(run) == digest


@pytest.mark.slow
def test_a_chain_too_deep_is_refused(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
) -> None:
    from ckpt.statefile.chain import MAX_CHAIN

    run = cli
    _run(run, "memory:1")
    _ckpt(run, s3_env, f"{s3_url}/p0", "--pre-dump")
    for i in range(1, MAX_CHAIN):
        _ckpt(run, s3_env, f"{s3_url}/p{i}", "--pre-dump", "--parent-path", f"{s3_url}/p{i - 1}")
    over = f"{s3_url}/p{MAX_CHAIN}"
    proc = run(
        "checkpoint", SID, "--image-path", over, "--parent-path", f"{s3_url}/p{MAX_CHAIN - 1}",
        env=s3_env, check=False,
    )  # fmt: skip
    assert f"the limit is {MAX_CHAIN}" in _one_error_line(proc)
    assert run.state(SID)["status"] == "running"
    assert len(Repository.open(s3_url).images()) == MAX_CHAIN


@pytest.mark.slow
def test_a_tampered_parent_manifest_is_refused_with_the_key(
    tcli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Edited under its HMAC: a parent manifest is refused by the dump that names it
    (the sandbox runs on) and by the restore of a chain holding it, even two links up."""
    run, key = tcli, _key(tmp_path)
    _run(run, "memory:2")
    _ckpt(run, s3_env, f"{s3_url}/n0", "--pre-dump", "--key-file", key)
    _ckpt(
        run,
        s3_env,
        f"{s3_url}/n1",
        "--pre-dump",
        "--parent-path",
        f"{s3_url}/n0",
        "--key-file",
        key,
    )
    repo = Repository.open(s3_url)

    def tamper(name: str) -> bytes:
        mkey = repo.manifest_key(name)
        data = repo.store.get(mkey)
        edited = bytearray(data)
        edited[40] ^= 1  # a byte of the body, under the HMAC
        repo.store.put(mkey, bytes(edited))
        return data

    final = ("checkpoint", SID, "--image-path", f"{s3_url}/n2", "--key-file", key)
    original = tamper("n1")
    proc = run(*final, "--parent-path", f"{s3_url}/n1", env=s3_env, check=False)
    assert "fails its HMAC" in _one_error_line(proc)
    assert run.state(SID)["status"] == "running"
    repo.store.put(repo.manifest_key("n1"), original)
    tamper("n0")
    run(*final, "--parent-path", f"{s3_url}/n1", env=s3_env, timeout=50)
    rs = ("restore", SID, "--image-path", f"{s3_url}/n2", "--key-file", key)
    line = _one_error_line(run(*rs, env=s3_env, check=False, timeout=50))
    assert f"its parent image {s3_url}/n0" in line and "fails its HMAC" in line, line
    assert not (run.root / SID / "image-stage").exists()


def test_the_fetch_bounds_a_chain_as_the_restore_does() -> None:
    from ckpt.sandbox.host import remote_image
    from ckpt.statefile import chain

    assert remote_image.MAX_CHAIN == chain.MAX_CHAIN


@pytest.mark.slow
def test_a_checkpoint_that_fails_before_writing_leaves_no_lease(
    cli: Cli,  # noqa: F811
    s3_url: str,
    s3_env: dict[str, str],
) -> None:
    """The upload starts before the freeze (its lease taken); a drain that times out
    ends the checkpoint there, and the upload with it: no lease is left to hold off a
    prune for its ten minutes."""
    import socket

    run = cli
    _run(run, "memory:2")
    _ckpt(run, s3_env, f"{s3_url}/n0", "--pre-dump")
    with socket.create_connection(_address(run), timeout=30) as half:
        half.sendall(b"GET /memory HTTP/1.1\r\nHost: x\r\n")  # the blank line is missing
        args = ("--image-path", f"{s3_url}/n1", "--parent-path", f"{s3_url}/n0")
        proc = run("checkpoint", SID, *args, "--drain-timeout", "0.5", env=s3_env, check=False)
        assert "still in progress" in _one_error_line(proc)
    repo = Repository.open(s3_url)
    assert list(repo.store.list(".leases/")) == []
    assert [i.name for i in repo.images()] == ["n0"] and run.state(SID)["status"] == "running"
