"""End to end through the real CLI in subprocesses: run, serve, checkpoint, restore,
cycles, inspect, failures.  The ``cli`` fixture asserts nothing is left behind."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from ckpt.sandbox.client import lifecycle
from ckpt.sandbox.client.group import open_cgroup
from ckpt.sandbox.host.http import get_json
from ckpt.sandbox.wire.paths import Root

from .conftest import Cli, cgroup_dirs, quota_allowed

pytestmark = pytest.mark.slow

# cgroups are host-wide: IDs unique to this test run, so parallel runs never collide
WEB = f"web-{os.getpid()}"
WEB2 = f"web2-{os.getpid()}"


def _run_http(cli: Cli, sandbox_id: str = WEB, *extra: str) -> dict:
    cli("run", sandbox_id, "--workload", "http", "--port", "0", *extra)
    return cli.state(sandbox_id)


def _error_line(proc, code: int = 1) -> str:
    """The CLI's error output: one ``error: ...`` line, no traceback, exit ``code``."""
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ")
    return " ".join(proc.stderr.split())


def _exited(pid: int) -> bool:
    """The process is gone, or a zombie not reaped yet.  Asked in one look: between a
    ``pid_exists`` and a second lookup its parent (init) may reap it, and the second
    lookup would raise NoSuchProcess."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _assert_gone(cli: Cli, sandbox_id: str) -> None:
    assert not (cli.root / sandbox_id).exists()
    assert cgroup_dirs(sandbox_id) == []
    assert "ckpt.sandbox.host.process" not in " ".join(
        " ".join(p.info["cmdline"] or [])
        for p in psutil.process_iter(["cmdline"])
        if "--id" in (p.info["cmdline"] or []) and sandbox_id in (p.info["cmdline"] or [])
    )
    titled = f"ckpt sandbox {sandbox_id} ({cli.root.absolute()})"
    assert not [
        p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[:1] == [titled]
    ]


def test_run_checkpoint_restore_under_quota_count_continues(cli: Cli, tmp_path: Path) -> None:
    cli("run", WEB, "--workload", "http", "--port", "0")
    st = cli.state_cli(WEB)  # `ckpt state` prints the same JSON the library keeps
    assert st == cli.state(WEB)
    assert st["status"] == "running" and st["workload"] == "http"
    assert {"id", "pid", "cgroup", "created", "address"} <= st.keys()
    assert st["address"].startswith("127.0.0.1:")
    first = [cli.get(WEB)["requests"] for _ in range(3)]
    assert first == [first[0], first[0] + 1, first[0] + 2]

    image = tmp_path / "img"
    out = cli("checkpoint", WEB, "--image-path", str(image), "--json")
    timings = json.loads(out.stdout)["timings"]
    assert timings["Checkpoint_ms"] > 0 and timings["SuspendTotal_ms"] >= timings["Checkpoint_ms"]
    assert cli.state(WEB)["status"] == "stopped"
    assert (image / "checkpoint.img").is_file()
    assert _exited(st["pid"])

    ok, _reason = quota_allowed()
    cpu_args = ["--cpu", "0.5"] if ok else []
    out = cli("restore", WEB, "--image-path", str(image), "--json", *cpu_args)
    restored = json.loads(out.stdout)
    assert restored["status"] == "running"
    assert restored["address"] == st["address"]  # same port unless told otherwise
    assert restored["pid"] != st["pid"]
    for phase in ("SandboxCreate_ms", "Restore_ms", "ResumeTotal_ms", "CPU_ms"):
        assert restored["timings"][phase] > 0
    body = cli.get(WEB)
    assert body["requests"] == first[-1] + 1
    assert body["restores"] == 1
    if ok:
        assert restored["cpu"] == 0.5
        cpu_dir = [
            d for d in cgroup_dirs(WEB) if d.parts[-4] in ("cpu", "cpu,cpuacct")
        ]  # ckpt/HASH/ID
        if cpu_dir:
            assert (cpu_dir[0] / "cpu.cfs_quota_us").read_text().strip() == "50000"
            procs = (cpu_dir[0] / "cgroup.procs").read_text().split()
            assert str(restored["pid"]) in procs


def test_three_cycles_in_a_row(cli: Cli, tmp_path: Path) -> None:
    """...and the sandbox keeps its creation time; each restore is recorded apart."""
    _run_http(cli)
    count = cli.get(WEB)["requests"]
    first = "2001-02-03T04:05:06Z"  # as if run long ago: a reset cannot go unseen
    variants = [[], ["--engine", "reflect"], ["--background"]]  # pages filled lazily last
    for i, extra in enumerate(variants):
        image = tmp_path / f"img{i}"
        cli(
            "checkpoint",
            WEB,
            "--image-path",
            str(image),
            *extra[: 2 if extra[:1] == ["--engine"] else 0],
        )
        if i == 0:
            st = lifecycle.state(Root(cli.root), WEB)
            assert st.restored_at is None
            st.created = first
            Root(cli.root).write(st)
        cli("restore", WEB, "--image-path", str(image), *extra)
        body = cli.get(WEB)
        assert body["requests"] == count + 1
        assert body["restores"] == i + 1
        count = body["requests"]
        st_json = cli.state_cli(WEB)
        assert st_json["created"] == first, st_json
        assert st_json["restored_at"] and st_json["restored_at"] > first, st_json


def test_checkpoint_with_stats_writes_stats_json_and_image_inspects(
    cli: Cli, tmp_path: Path
) -> None:
    _run_http(cli)
    image = tmp_path / "img"
    out = cli("checkpoint", WEB, "--image-path", str(image), "--stats", "--engine", "reflect")
    assert "checkpoint timings" in out.stdout
    stats = json.loads((image / "stats.json").read_text())
    assert stats["checkpoint"]["pages_scanned"] >= stats["checkpoint"]["pages_stored"]
    from ckpt import state, statefile

    img = statefile.open_image(image)
    assert img.metadata["workload"] == "http"
    assert img.metadata["engine"] == "reflect"
    view = state.inspect_stream(img.read_state())
    view.verify()
    assert sum(t.count for t in view.types) > 0
    inspect = cli("inspect", "statefile", str(image), "--json", check=False)
    if inspect.returncode == 0:  # the statefile helper's command, when it has landed
        assert json.loads(inspect.stdout)["metadata"]["workload"] == "http"


def test_leave_running_keeps_serving(cli: Cli, tmp_path: Path) -> None:
    st = _run_http(cli)
    before = cli.get(WEB)["requests"]
    cli("checkpoint", WEB, "--image-path", str(tmp_path / "img"), "--leave-running")
    after = cli.state(WEB)
    assert after["status"] == "running" and after["pid"] == st["pid"]
    assert cli.get(WEB)["requests"] == before + 1
    # and the image restores into a second sandbox on another port
    cli("restore", WEB2, "--image-path", str(tmp_path / "img"), "--port", "0")
    assert cli.get(WEB2)["requests"] == before + 1


def test_pause_holds_requests_until_resume(cli: Cli, tmp_path: Path) -> None:
    _run_http(cli)
    before = cli.get(WEB)["requests"]
    host, _, port = cli.state(WEB)["address"].rpartition(":")
    cli("pause", WEB)
    assert cli.state(WEB)["status"] == "paused"
    freeze_files = [d / "cgroup.freeze" for d in cgroup_dirs(WEB) if (d / "cgroup.freeze").exists()]
    assert all(f.read_text().strip() == "1" for f in freeze_files)  # the cgroup is frozen too
    got: list = []
    t = threading.Thread(target=lambda: got.append(get_json(host, int(port), timeout=120)))
    t.start()
    t.join(0.5)
    assert got == []  # the request waits while the sandbox is frozen
    # a checkpoint of a paused sandbox leaves it paused (the request still waits)
    cli("checkpoint", WEB, "--image-path", str(tmp_path / "img"), "--leave-running")
    assert cli.state(WEB)["status"] == "paused"
    assert got == []
    cli("resume", WEB)
    assert all(f.read_text().strip() == "0" for f in freeze_files)
    t.join(120)
    assert got and got[0][1]["requests"] == before + 1
    assert cli.state(WEB)["status"] == "running"


def test_failed_checkpoint_leaves_sandbox_running(cli: Cli, tmp_path: Path) -> None:
    st = _run_http(cli)
    image = tmp_path / "img"
    image.mkdir()
    (image / "precious").write_text("keep me")
    proc = cli("checkpoint", WEB, "--image-path", str(image), check=False)
    assert "--force" in _error_line(proc, 4)  # refused as unsafe
    assert (image / "precious").read_text() == "keep me"
    assert cli.state(WEB)["status"] == "running" and cli.state(WEB)["pid"] == st["pid"]
    assert cli.get(WEB)["requests"] >= 1


def test_restore_from_corrupted_image_leaves_nothing(cli: Cli, tmp_path: Path) -> None:
    _run_http(cli)
    image = tmp_path / "img"
    cli("checkpoint", WEB, "--image-path", str(image))
    cli("delete", WEB)
    data = bytearray((image / "checkpoint.img").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (image / "checkpoint.img").write_bytes(bytes(data))
    proc = cli("restore", WEB, "--image-path", str(image), check=False)
    _error_line(proc)
    _assert_gone(cli, WEB)


def test_restore_from_missing_image(cli: Cli, tmp_path: Path) -> None:
    proc = cli("restore", WEB, "--image-path", str(tmp_path / "nope"), check=False)
    assert "no image at" in _error_line(proc, 3)  # not found
    _assert_gone(cli, WEB)


def test_restore_with_wrong_key_is_refused(cli: Cli, tmp_path: Path) -> None:
    key, wrong = tmp_path / "key", tmp_path / "wrong"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    wrong.write_bytes(os.urandom(32))
    wrong.chmod(0o600)
    _run_http(cli)
    image = tmp_path / "img"
    cli("checkpoint", WEB, "--image-path", str(image), "--key-file", str(key))
    proc = cli("restore", WEB, "--image-path", str(image), "--key-file", str(wrong), check=False)
    _error_line(proc)
    _assert_gone(cli, WEB)
    cli("restore", WEB, "--image-path", str(image), "--key-file", str(key))
    assert cli.get(WEB)["restores"] == 1


def test_restore_into_running_sandbox_is_an_error(cli: Cli, tmp_path: Path) -> None:
    _run_http(cli)
    cli("checkpoint", WEB, "--image-path", str(tmp_path / "img"), "--leave-running")
    proc = cli("restore", WEB, "--image-path", str(tmp_path / "img"), check=False)
    assert "running" in _error_line(proc)
    assert cli.state(WEB)["status"] == "running"


def _wait_for_log(cli: Cli, sandbox_id: str, needle: str, timeout: float = 30) -> None:
    log = cli.root / sandbox_id / "sandbox.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and needle in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} never appeared in {log}")


def test_sandbox_killed_mid_checkpoint(cli: Cli, tmp_path: Path) -> None:
    stall = {"CKPT_FAULT": "checkpoint-stall:30"}
    cli("run", WEB, "--workload", "http", "--port", "0", env=stall)
    image = tmp_path / "img"
    pending = cli.popen("checkpoint", WEB, "--image-path", str(image))
    _wait_for_log(cli, WEB, "stalling")
    psutil.Process(cli.state(WEB)["pid"]).kill()
    _, stderr = pending.communicate(timeout=120)
    assert pending.returncode == 1 and stderr.startswith("error: ")
    assert "died" in " ".join(stderr.split())
    assert not image.exists()  # nothing that looks like a complete image
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]  # no temp dir left
    assert cli.state(WEB)["status"] == "stopped"
    assert cgroup_dirs(WEB) == []


def test_two_concurrent_checkpoints_second_is_busy(cli: Cli, tmp_path: Path) -> None:
    # The first checkpoint stalls until the test creates ``release`` (at most 120 s), so
    # it is still running when the second arrives however slowly that CLI starts (a
    # fixed stall of 2 s lost that race on a loaded machine: the second one succeeded).
    release = tmp_path / "release"
    stall = {"CKPT_FAULT": f"checkpoint-stall:120:{release}"}
    cli("run", WEB, "--workload", "http", "--port", "0", env=stall)
    first = cli.popen("checkpoint", WEB, "--image-path", str(tmp_path / "a"), "--leave-running")
    try:
        _wait_for_log(cli, WEB, "stalling")
        proc = cli("checkpoint", WEB, "--image-path", str(tmp_path / "b"), check=False)
        assert first.poll() is None  # the first is still stalled
    finally:
        release.touch()
    assert "busy" in _error_line(proc)
    first.communicate(timeout=60)
    assert first.returncode == 0
    assert (tmp_path / "a" / "checkpoint.img").exists() and not (tmp_path / "b").exists()
    assert cli.state(WEB)["status"] == "running"
    assert "stall released" in (cli.root / WEB / "sandbox.log").read_text()


def test_kill_then_delete(cli: Cli) -> None:
    st = _run_http(cli)
    proc = cli("delete", WEB, check=False)
    assert "kill" in _error_line(proc, 4)  # refused as unsafe
    cli("kill", WEB)
    assert cli.state(WEB)["status"] == "stopped"
    assert _exited(st["pid"])
    listing = json.loads(cli("list", "--json").stdout)
    assert [(s["id"], s["status"]) for s in listing] == [(WEB, "stopped")]
    cli("delete", WEB)
    _assert_gone(cli, WEB)


def test_cycle_json_reports_every_phase_and_keeps_serving(cli: Cli, tmp_path: Path) -> None:
    _run_http(cli)
    before = cli.get(WEB)["requests"]
    ok, _reason = quota_allowed()
    quota = "0.5" if ok else "uncapped"
    out = cli(
        "cycle",
        WEB,
        "--image-path",
        str(tmp_path / "cyc"),
        "--count",
        "1",
        "--cpu",
        quota,
        "--engines",
        "reflect,typed",
        "--json",
        timeout=180,
    )
    report = json.loads(out.stdout)
    assert report["baseline"] == "reflect" and report["quotas"] == [quota]
    assert [s["engine"] for s in report["samples"]] == ["reflect", "typed"]
    phases = {(r["phase"], r["engine"]) for r in report["rows"]}
    for phase in (
        "Checkpoint",
        "SuspendTotal",
        "SandboxCreate",
        "Restore",
        "ResumeTotal",
        "CPUPerCycle",
    ):
        assert {(phase, "reflect"), (phase, "typed")} <= phases
    typed = [r for r in report["rows"] if r["engine"] == "typed"]
    assert all(r["ratio"] is not None and r["ratio"] > 0 for r in typed)
    st = cli.state(WEB)  # back under the quota it had before the cycles: none
    assert st["status"] == "running" and st["cpu"] is None, st
    group = open_cgroup(st["cgroup"])
    assert group is None or group.cpu_quota() is None, group.cpu_quota()
    body = cli.get(WEB)
    assert body["requests"] == before + 1 and body["restores"] == 2
    assert not any((tmp_path / "cyc").iterdir())  # cycle images are removed as it goes


def test_failed_run_leaves_nothing(cli: Cli) -> None:
    proc = cli("run", WEB, "--workload", "bogus", check=False)
    assert "unknown workload 'bogus'" in _error_line(proc)
    _assert_gone(cli, WEB)
    st = _run_http(cli, WEB2)
    port = st["address"].rpartition(":")[2]
    proc = cli("run", WEB, "--workload", "http", "--port", port, check=False)
    assert "Address already in use" in _error_line(proc)
    _assert_gone(cli, WEB)
    assert cli.state(WEB2)["status"] == "running"
