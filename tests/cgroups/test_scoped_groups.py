"""Groups scoped per root (``ckpt/<root hash>/ID``) on unified, hybrid and legacy shapes:
two roots with one sandbox ID never share a group, removing one leaves the other with
its processes and quota, and a root's parent group goes once it is empty."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt import cgroups
from ckpt.sandbox.wire.paths import Root

from .fakefs import make_tree, pid_alive

KINDS = ("unified", "hybrid", "legacy")


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)
    ]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_names_are_scoped_by_the_roots_real_path(tmp_path: Path) -> None:
    (tmp_path / "r1").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "r1")
    one, two = Root(tmp_path / "r1"), Root(tmp_path / "r2")
    assert one.cgroup_name("a") != two.cgroup_name("a")
    assert one.cgroup_name("a") == Root(tmp_path / "link").cgroup_name("a")
    assert one.cgroup_name("a") == f"{one.cgroup_parent()}/a"
    assert one.cgroup_parent().startswith("ckpt/") and len(one.cgroup_parent()) == 17
    cgroups.manager.check_name(one.cgroup_name("a"))  # a valid relative group name


@pytest.mark.parametrize("kind", KINDS)
def test_two_roots_one_id_keep_their_own_groups(
    tmp_path: Path, kind: str, children: list[subprocess.Popen[bytes]]
) -> None:
    lay, fsys = make_tree(tmp_path / "fs", kind)
    one, two = Root(tmp_path / "r1"), Root(tmp_path / "r2")
    first = cgroups.create(one.cgroup_name("a"), cpus=0.25, layout=lay, fsys=fsys)
    second = cgroups.create(two.cgroup_name("a"), cpus=0.5, layout=lay, fsys=fsys)
    first.add_process(children[0].pid)
    second.add_process(children[1].pid)
    assert set(first.paths.values()).isdisjoint(second.paths.values())

    second.kill()
    second.delete()
    cgroups.remove_if_empty(two.cgroup_parent(), layout=lay, fsys=fsys)
    assert children[1].wait(timeout=5) == -9
    assert pid_alive(children[0].pid)
    assert first.procs() == [children[0].pid]
    assert first.cpu_quota() == 0.25
    for d in second.paths.values():
        assert not d.parent.exists()  # r2's parent group went once empty
    cgroups.remove_if_empty(one.cgroup_parent(), layout=lay, fsys=fsys)
    for d in first.paths.values():
        assert d.exists()  # r1's parent still holds its sandbox's group: left alone
    assert first.procs() == [children[0].pid]
