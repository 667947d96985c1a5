"""Pre-dumps, parent chains and pre-copy through the CLI, on real sandboxes.

Every mode must bring back the same memory digest and every acknowledged value; every
way to break a chain must be refused in one line naming the broken image, leaving no
sandbox, process or cgroup behind (the ``cli`` fixture's teardown checks the last two).
No timing is asserted: the figures come from ``ckpt bench frozen``."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from ckpt.sandbox.host.http import get_json

from .conftest import Cli
from .kv_client import check_values, put_values

pytestmark = pytest.mark.slow
SID = f"pc-{os.getpid()}"
OTHER = f"pc-other-{os.getpid()}"


def _address(cli: Cli, sid: str = SID) -> tuple[str, int]:
    host, _, port = cli.state(sid)["address"].rpartition(":")
    return host, int(port)


def _digest(cli: Cli, sid: str = SID) -> str:
    return get_json(*_address(cli, sid), "/memory", timeout=60)[1]["memory_sha256"]


def _put(cli: Cli, first: int, count: int, sid: str = SID) -> dict[str, bytes]:
    """PUT ``count`` values on one connection; returns the acknowledged ones."""
    items = ((f"k{i % 40}", b"%05d-" % i * (1 + i % 300)) for i in range(first, first + count))
    return put_values(_address(cli, sid), items)


def _check_values(cli: Cli, acked: dict[str, bytes], sid: str = SID) -> None:
    check_values(_address(cli, sid), acked)


def _run(cli: Cli, workload: str, sid: str = SID) -> None:
    cli("run", sid, "--workload", workload, "--port", "0", timeout=120)


def _ckpt(cli: Cli, image: Path, *args: str, sid: str = SID) -> dict:
    out = cli("checkpoint", sid, "--image-path", str(image), *args, "--json", timeout=120)
    return json.loads(out.stdout)


MODES = ["stop", "leave-running", "pre-copy", "pre-copy-leave-running", "pre-dump-chain"]


@pytest.mark.parametrize("workload", ["kv:4", "memory:4"])
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_round_trips_digest_and_values(
    cli: Cli, tmp_path: Path, workload: str, mode: str
) -> None:
    _run(cli, workload)
    kv = workload.startswith("kv")
    acked = _put(cli, 0, 120) if kv else {}
    image = tmp_path / "img"
    if mode == "pre-dump-chain":
        _ckpt(cli, tmp_path / "p0", "--pre-dump")
        acked.update(_put(cli, 120, 30) if kv else {})
        _ckpt(cli, tmp_path / "p1", "--pre-dump", "--parent-path", str(tmp_path / "p0"))
        acked.update(_put(cli, 150, 30) if kv else {})
        digest = _digest(cli)
        reply = _ckpt(cli, image, "--parent-path", str(tmp_path / "p1"))
        assert reply["timings"]["counters"]["pages_skipped_parent"] > 0
    else:
        digest = _digest(cli)
        extra = {
            "stop": [],
            "leave-running": ["--leave-running"],
            "pre-copy": ["--pre-copy"],
            "pre-copy-leave-running": ["--pre-copy", "--leave-running"],
        }[mode]
        reply = _ckpt(cli, image, *extra)
        counters = reply["timings"]["counters"]
        for name in ("freezing_time_ms", "frozen_time_ms", "pages_scanned", "pages_written"):
            assert name in counters, name
        if "leave-running" in mode:  # a copy-on-write child wrote it (snapshot.py)
            assert counters["snapshot"] == "fork"
        if "pre-copy" in mode:
            assert counters["rounds"] == len(reply["rounds"]) >= 1
            assert (image / "rounds" / "r0").is_dir()  # self-contained: the rounds inside
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []  # no leftovers
    if "leave-running" in mode:
        assert _digest(cli) == digest
        cli("delete", SID, "--force", timeout=60)
    moved = tmp_path / "moved"  # a pre-copy image is one directory: it travels alone
    if "pre-copy" in mode:
        shutil.move(image, moved)
        image = moved
    cli("restore", SID, "--image-path", str(image), timeout=120)
    assert _digest(cli) == digest
    _check_values(cli, acked)


def test_writer_during_pre_copy_loses_no_acknowledged_write(cli: Cli, tmp_path: Path) -> None:
    _run(cli, "kv:4")
    acked: dict[str, bytes] = {}
    stop = threading.Event()

    def writer() -> None:
        conn = http.client.HTTPConnection(*_address(cli), timeout=30)
        i = 0
        try:
            while not stop.is_set() and i < 20000:
                key, data = f"w{i % 500}", b"%07d" % i * (1 + i % 100)
                conn.request("PUT", f"/kv/{key}", body=data)
                reply = conn.getresponse()
                reply.read()
                if reply.status == 200:
                    acked[key] = data
                i += 1
        except (OSError, http.client.HTTPException):
            pass  # the sandbox stopped serving: later writes were never acknowledged
        finally:
            conn.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        while len(acked) < 50 and t.is_alive():
            threading.Event().wait(0.01)
        _ckpt(cli, tmp_path / "img", "--pre-copy")
        stop.set()
        # Restore before joining: a PUT that reached the parked connection after the
        # drain is answered by the restored sandbox (late, never refused), and the
        # writer must be waiting for that answer, or it would time out on a write
        # that then takes effect.
        cli("restore", SID, "--image-path", str(tmp_path / "img"), timeout=120)
    finally:
        stop.set()
        t.join(60)
    assert not t.is_alive() and acked
    _check_values(cli, acked)


@pytest.mark.parametrize("length", [1, 2, 3, 4, 5])
def test_chains_of_one_to_five_images_restore(cli: Cli, tmp_path: Path, length: int) -> None:
    _run(cli, "kv:4")
    acked = _put(cli, 0, 60)
    parent: Path | None = None
    for i in range(length - 1):
        args = ["--pre-dump"] + (["--parent-path", str(parent)] if parent else [])
        _ckpt(cli, tmp_path / f"p{i}", *args)
        parent = tmp_path / f"p{i}"
        acked.update(_put(cli, 100 * (i + 1), 25))
    digest = _digest(cli)
    _ckpt(cli, tmp_path / "final", *(["--parent-path", str(parent)] if parent else []))
    report = json.loads(
        cli("inspect", "statefile", str(tmp_path / "final"), "--verify", "--json").stdout
    )
    assert len(report.get("chain") or [None]) == length
    cli("restore", SID, "--image-path", str(tmp_path / "final"), "--background", timeout=120)
    assert _digest(cli) == digest
    _check_values(cli, acked)


def _chain(cli: Cli, tmp_path: Path, *key: str) -> Path:
    """A sandbox's chain p0 <- final (the sandbox stopped); returns final."""
    _run(cli, "kv:4")
    _put(cli, 0, 40)
    _ckpt(cli, tmp_path / "p0", "--pre-dump", *key)
    _put(cli, 40, 20)
    _ckpt(cli, tmp_path / "final", "--parent-path", str(tmp_path / "p0"), *key)
    return tmp_path / "final"


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


BREAKS = ["removed", "other-sandbox", "replaced", "truncated", "bit-flipped", "key-missing"]


@pytest.mark.parametrize("how", BREAKS)
def test_a_broken_chain_is_refused_and_nothing_is_left(cli: Cli, tmp_path: Path, how: str) -> None:
    key_file = tmp_path / "key"
    key_file.write_bytes(b"k" * 32)
    key_file.chmod(0o600)
    key = ["--key-file", str(key_file)]
    final = _chain(cli, tmp_path, *key)
    p0 = tmp_path / "p0"
    if how == "removed":
        shutil.rmtree(p0)
    elif how in ("other-sandbox", "replaced"):
        sid = OTHER if how == "other-sandbox" else SID
        cli("delete", SID, "--force", timeout=60)
        _run(cli, "kv:4", sid)
        shutil.rmtree(p0)
        _ckpt(cli, p0, "--pre-dump", *key, sid=sid)
        cli("delete", sid, "--force", timeout=60)
    elif how == "truncated":
        pages = p0 / "pages.img"
        pages.write_bytes(pages.read_bytes()[:-100])
    elif how == "bit-flipped":
        _flip(p0 / "pages.img", 200)
    elif how == "key-missing":
        key = []
    cli("delete", SID, "--force", check=False, timeout=60)
    listing = sorted(os.listdir(tmp_path))
    proc = cli("restore", SID, "--image-path", str(final), *key, check=False, timeout=120)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    if how != "key-missing":
        assert "parent image" in lines[0] and str(p0) in lines[0], lines[0]
    assert sorted(os.listdir(tmp_path)) == listing  # nothing written beside the images
    assert json.loads(cli("list", "--json").stdout) in ([], {"sandboxes": []})
    if key:  # without the key, inspect says it verified nothing, as for any signed image
        report = cli("inspect", "statefile", str(final), "--verify", *key, check=False)
        assert report.returncode != 0 and str(p0) in report.stdout


def test_parent_must_be_the_last_image_of_this_sandbox(cli: Cli, tmp_path: Path) -> None:
    _run(cli, "kv:4")
    _run(cli, "kv:4", OTHER)
    _ckpt(cli, tmp_path / "p0", "--pre-dump")
    _ckpt(cli, tmp_path / "p1", "--pre-dump", "--parent-path", str(tmp_path / "p0"))
    _ckpt(cli, tmp_path / "q0", "--pre-dump", sid=OTHER)
    for parent, why in ((tmp_path / "p0", "not the last image"), (tmp_path / "q0", OTHER)):
        proc = cli(
            "checkpoint", SID, "--image-path", str(tmp_path / "x"), "--pre-dump",
            "--parent-path", str(parent), check=False,
        )  # fmt: skip
        assert proc.returncode != 0 and why in proc.stderr, proc.stderr
        assert not (tmp_path / "x").exists()
    assert cli.state(SID)["status"] == "running"
    cli("delete", OTHER, "--force", timeout=60)
    proc = cli("restore", OTHER, "--image-path", str(tmp_path / "p1"), check=False)
    assert proc.returncode != 0 and "pre-dump" in proc.stderr


def test_a_failed_snapshot_writer_is_one_line_and_the_sandbox_serves_on(
    cli: Cli, tmp_path: Path
) -> None:
    _run(cli, "kv:4")
    acked = _put(cli, 0, 40)
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "checkpoint.img").write_bytes(b"taken")
    proc = cli(
        "checkpoint", SID, "--image-path", str(tmp_path / "img"), "--leave-running",
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "already holds an image" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == [
        "img",
        "root",
    ]  # the child's temporary directory is gone
    _check_values(cli, acked)
    acked.update(_put(cli, 40, 10))  # thawed: it takes writes again
    _check_values(cli, acked)
