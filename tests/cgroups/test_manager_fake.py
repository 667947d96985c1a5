"""The manager against fake cgroupfs trees for unified, hybrid and legacy hosts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt import cgroups
from ckpt.cgroups import Layout, Mode
from ckpt.cgroups.detect import parse_mountinfo
from ckpt.errors import CgroupError

from .fakefs import FakeKernelFS, make_tree, pid_alive

KINDS = ("unified", "hybrid", "legacy")


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A real sleeping process whose pid goes into the fake groups."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def tree(tmp_path: Path, kind: str, **options: object) -> tuple[Layout, FakeKernelFS]:
    return make_tree(tmp_path / kind, kind, **options)


def read(path: Path) -> str:
    return path.read_text().strip()


@pytest.mark.parametrize("kind", KINDS)
def test_create_applies_quarter_cpu(tmp_path: Path, kind: str) -> None:
    lay, fsys = tree(tmp_path, kind)
    mgr = cgroups.create("ckpt/a", cpus=0.25, layout=lay, fsys=fsys)
    assert not mgr.inert
    if kind == "unified":
        assert mgr.cpu_backend == "v2"
        assert read(mgr.paths["unified"] / "cpu.max") == "25000 100000"
    else:
        assert mgr.cpu_backend == "v1"
        assert read(mgr.paths["cpu"] / "cpu.cfs_quota_us") == "25000"
        assert read(mgr.paths["cpu"] / "cpu.cfs_period_us") == "100000"
    assert mgr.cpu_quota() == 0.25
    mgr.set_cpu_quota(None)
    assert mgr.cpu_quota() is None
    if kind == "unified":
        assert read(mgr.paths["unified"] / "cpu.max") == "max 100000"
    else:
        assert read(mgr.paths["cpu"] / "cpu.cfs_quota_us") == "-1"


@pytest.mark.parametrize("kind", KINDS)
def test_create_uncapped_over_a_capped_group_left_behind_lifts_the_quota(
    tmp_path: Path, kind: str
) -> None:
    lay, fsys = tree(tmp_path, kind)
    assert cgroups.create("ckpt/a", cpus=0.5, layout=lay, fsys=fsys).cpu_quota() == 0.5
    assert cgroups.create("ckpt/a", layout=lay, fsys=fsys).cpu_quota() is None


def test_unified_enables_controllers_in_every_ancestor(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "unified")
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    root = lay.unified
    assert root is not None
    for ancestor in (root, root / "ckpt"):
        enabled = set(read(ancestor / "cgroup.subtree_control").split())
        assert enabled == {"cpu", "memory", "pids", "hugetlb"}  # io was not wanted
    assert set(mgr.paths) == {"unified"}
    assert mgr.freezer_backend == "v2"


def test_hybrid_splits_cpu_to_v1_and_the_rest_to_cgroup2(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "hybrid")
    mgr = cgroups.create("ckpt/a", cpus=0.5, layout=lay, fsys=fsys)
    assert set(mgr.paths) == {"unified", "cpu", "cpuacct", "memory", "pids"}
    assert mgr.freezer_backend == "v2"  # cgroup.freeze exists, so no v1 freezer group
    assert not (tmp_path / "hybrid" / "freezer" / "ckpt" / "a").exists()
    assert read(tmp_path / "hybrid" / "unified" / "cgroup.subtree_control") == "hugetlb"


def test_hybrid_skips_memory_when_this_process_is_limited_there(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "hybrid")
    lay = Layout(lay.mode, lay.unified, lay.v1, own={"memory": "/someone/else"})
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    assert "memory" not in mgr.paths and "pids" in mgr.paths
    assert mgr.stat().memory_current is None


def test_legacy_uses_the_v1_freezer(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "legacy")
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    assert mgr.freezer_backend == "v1"
    mgr.freeze()
    assert read(mgr.paths["freezer"] / "freezer.state") == "FROZEN"
    mgr.thaw()
    assert read(mgr.paths["freezer"] / "freezer.state") == "THAWED"


@pytest.mark.parametrize("kind", KINDS)
def test_add_process_joins_every_hierarchy(
    tmp_path: Path, kind: str, child: subprocess.Popen[bytes]
) -> None:
    lay, fsys = tree(tmp_path, kind)
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    mgr.add_process(child.pid)
    for d in set(mgr.paths.values()):
        assert read(d / "cgroup.procs") == str(child.pid)
    assert mgr.procs() == [child.pid]


def test_freeze_waits_for_frozen_and_reverts_on_timeout(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "unified", freeze_sticks=True)
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    with pytest.raises(CgroupError, match=r"cgroup.events to say 'frozen 1'"):
        mgr.freeze(timeout=0.05)
    assert read(mgr.paths["unified"] / "cgroup.freeze") == "0"


def test_unified_freeze_and_thaw_write_cgroup_freeze(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "unified")
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    mgr.freeze()
    assert "frozen 1" in (mgr.paths["unified"] / "cgroup.events").read_text()
    mgr.thaw()
    assert read(mgr.paths["unified"] / "cgroup.freeze") == "0"


@pytest.mark.parametrize(
    ("kind", "has_kill"),
    [("unified", True), ("unified", False), ("hybrid", False), ("legacy", True)],
)
def test_kill_ends_the_processes(
    tmp_path: Path, kind: str, has_kill: bool, child: subprocess.Popen[bytes]
) -> None:
    lay, fsys = tree(tmp_path, kind, has_kill=has_kill)
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    mgr.add_process(child.pid)
    mgr.kill()
    assert child.wait(timeout=5) == -9
    used_kill_file = any(p.name == "cgroup.kill" for p, _ in fsys.writes)
    assert used_kill_file == (has_kill and kind != "legacy")


@pytest.mark.parametrize("kind", KINDS)
def test_delete_refuses_while_populated_then_removes_everything(
    tmp_path: Path, kind: str, child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ckpt.cgroups.manager.DELETE_RETRY_S", 0.05)
    lay, fsys = tree(tmp_path, kind)
    mgr = cgroups.create("ckpt/a", cpus=1, layout=lay, fsys=fsys)
    mgr.add_process(child.pid)
    with pytest.raises(CgroupError, match=rf"still has processes \({child.pid}\)"):
        mgr.delete()
    assert all(d.exists() for d in mgr.paths.values())
    mgr.kill()
    child.wait(timeout=5)
    mgr.delete()
    for d in mgr.paths.values():
        assert not d.exists()
        assert d.parent.exists()  # the ckpt parent stays
    mgr.delete()  # again: already gone is fine


def test_delete_after_the_process_died_by_itself(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "hybrid")
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    mgr.add_process(proc.pid)
    proc.wait()
    assert not pid_alive(proc.pid)
    mgr.delete()
    assert not any(d.exists() for d in mgr.paths.values())


def _leaves(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("a") if p.is_dir()]


@pytest.mark.parametrize("kind", ["hybrid", "legacy"])
def test_failed_quota_write_removes_what_create_made(tmp_path: Path, kind: str) -> None:
    lay, fsys = tree(tmp_path, kind, fail_writes={"cpu.cfs_quota_us"})
    with pytest.raises(CgroupError, match=r"cpu.cfs_quota_us: Invalid argument"):
        cgroups.create("ckpt/a", cpus=0.25, layout=lay, fsys=fsys)
    assert _leaves(tmp_path) == []
    assert [p for p in tmp_path.rglob("ckpt") if p.is_dir()] == []


def test_failed_mkdir_half_way_removes_the_unified_group(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "hybrid")
    fsys.fail_mkdir = {tmp_path / "hybrid" / "pids" / "ckpt" / "a"}
    with pytest.raises(CgroupError, match=r"cannot create cgroup .*pids/ckpt/a"):
        cgroups.create("ckpt/a", cpus=0.25, layout=lay, fsys=fsys)
    assert _leaves(tmp_path) == []


def test_failed_mkdir_without_quota_falls_back_to_inert(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "unified")
    fsys.fail_mkdir = {tmp_path / "unified" / "ckpt" / "a"}
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    assert mgr.inert and "Permission denied" in mgr.reason  # type: ignore[attr-defined]
    assert _leaves(tmp_path) == []


def test_unavailable_cgroups_quota_is_a_clear_error_and_no_quota_is_inert() -> None:
    lay = Layout(Mode.UNAVAILABLE)
    with pytest.raises(
        CgroupError, match=r"cannot apply a CPU quota: .*; run as root or pass --ignore-cgroups"
    ):
        cgroups.create("ckpt/a", cpus=0.5, layout=lay)
    mgr = cgroups.create("ckpt/a", layout=lay)
    assert mgr.inert and mgr.cpu_backend == "none" and mgr.paths == {}
    assert cgroups.available_for_quota(lay) == (False, "no cgroup filesystem is mounted")


def test_read_only_cgroupfs_is_not_available_for_quota(tmp_path: Path) -> None:
    lay, _ = tree(tmp_path, "legacy")
    ro = Layout(lay.mode, lay.unified, lay.v1, read_only=frozenset({lay.v1["cpu"]}))
    ok, why = cgroups.available_for_quota(ro)
    assert not ok and "not writable" in why and str(lay.v1["cpu"]) in why
    with pytest.raises(CgroupError, match="run as root or pass --ignore-cgroups"):
        cgroups.create("ckpt/a", cpus=0.5, layout=ro)


def test_unified_without_cpu_controller_cannot_quota(tmp_path: Path) -> None:
    lay, _ = tree(tmp_path, "unified")
    (tmp_path / "unified" / "cgroup.controllers").write_text("memory pids\n")
    ok, why = cgroups.available_for_quota(lay)
    assert not ok and "cpu controller is not available" in why


@pytest.mark.parametrize("bad", [0, -1, float("nan"), 10_000])
def test_bad_quota_makes_nothing(tmp_path: Path, bad: float) -> None:
    lay, fsys = tree(tmp_path, "unified")
    with pytest.raises(CgroupError, match="invalid CPU quota"):
        cgroups.create("ckpt/a", cpus=bad, layout=lay, fsys=fsys)
    assert not (tmp_path / "unified" / "ckpt").exists()


@pytest.mark.parametrize("name", ["", "/abs", "../x", "a/../b", "a/./b", "a//b"])
def test_bad_names_are_refused(tmp_path: Path, name: str) -> None:
    lay, fsys = tree(tmp_path, "unified")
    with pytest.raises(CgroupError, match="invalid cgroup name"):
        cgroups.create(name, layout=lay, fsys=fsys)


def test_open_group_finds_an_existing_group_and_refuses_a_missing_one(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "hybrid")
    made = cgroups.create("ckpt/a", cpus=0.5, layout=lay, fsys=fsys)
    found = cgroups.open_group("ckpt/a", layout=lay, fsys=fsys)
    assert found.paths == made.paths and found.cpu_quota() == 0.5
    with pytest.raises(CgroupError, match="no cgroup named 'ckpt/b'"):
        cgroups.open_group("ckpt/b", layout=lay, fsys=fsys)


def test_malformed_cfs_quota_names_the_file(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "legacy")
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    (mgr.paths["cpu"] / "cpu.cfs_quota_us").write_text("lots\n")
    with pytest.raises(CgroupError, match=r"malformed .*cpu.cfs_quota_us"):
        mgr.cpu_quota()


def test_malformed_cpu_max_names_the_file(tmp_path: Path) -> None:
    lay, fsys = tree(tmp_path, "unified")
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    (mgr.paths["unified"] / "cpu.max").write_text("fast\n")
    with pytest.raises(CgroupError, match=r"malformed .*unified/ckpt/a/cpu.max"):
        mgr.cpu_quota()


def test_context_manager_kills_and_deletes(tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    lay, fsys = tree(tmp_path, "unified")
    with cgroups.create("ckpt/a", layout=lay, fsys=fsys) as mgr:
        mgr.add_process(child.pid)
    assert child.wait(timeout=5) == -9
    assert not mgr.paths["unified"].exists()


def test_layout_from_a_fake_mountinfo(tmp_path: Path) -> None:
    lay0, fsys = tree(tmp_path, "hybrid")
    text = (
        "".join(
            f"{i} 1 0:{i} / {mount} rw - cgroup cgroup rw,{c}\n"
            for i, (c, mount) in enumerate(lay0.v1.items(), 2)
        )
        + f"9 1 0:9 / {lay0.unified} rw - cgroup2 cgroup2 rw\n"
    )
    lay = parse_mountinfo(text, root=tmp_path / "hybrid")
    assert lay.mode is Mode.HYBRID
    mgr = cgroups.create("ckpt/a", cpus=0.25, layout=lay, fsys=fsys)
    assert (
        mgr.cpu_backend == "v1"
        and mgr.paths["unified"] == tmp_path / "hybrid" / "unified" / "ckpt" / "a"
    )
