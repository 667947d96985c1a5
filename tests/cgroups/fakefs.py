"""Fake cgroup filesystems in a temporary directory, for unified, hybrid and legacy hosts.

``FakeKernelFS`` plays the kernel's part over plain files: ``mkdir`` populates a new
group's control files according to its hierarchy and the controllers enabled above it,
``cgroup.subtree_control`` accepts only available controllers, ``cgroup.freeze`` and
``freezer.state`` update what the kernel would report, ``cgroup.procs`` lists only live
processes, and ``rmdir`` refuses while live processes remain.  ``fail_writes`` makes
chosen files refuse writes, to exercise the clean-up paths.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from ckpt.cgroups import fs
from ckpt.cgroups.detect import Layout
from ckpt.errors import CgroupError

SIZES = ("2MB", "1GB")
V1_ALL = ("cpu", "cpuacct", "freezer", "memory", "pids")


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie (the kernel drops exited tasks from cgroup.procs)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@dataclass
class FakeKernelFS(fs.CgroupFS):
    """Maps each mount to its hierarchy: ``"v2"`` or a tuple of v1 controllers."""

    mounts: dict[Path, str | tuple[str, ...]]
    fail_writes: set[str] = field(default_factory=set)  # file names whose writes fail
    fail_mkdir: set[Path] = field(default_factory=set)
    freeze_sticks: bool = False  # cgroup.events never reports frozen 1
    has_kill: bool = True
    writes: list[tuple[Path, str]] = field(default_factory=list)

    def _hierarchy(self, path: Path) -> tuple[Path, str | tuple[str, ...]]:
        for mount, kind in self.mounts.items():
            if path == mount or mount in path.parents:
                return mount, kind
        raise AssertionError(f"{path} is outside the fake cgroupfs")

    def mkdir(self, path: Path) -> bool:
        if path in self.fail_mkdir:
            raise CgroupError(f"cannot create cgroup {path}: Permission denied") from OSError(
                errno.EACCES, "Permission denied"
            )
        made = super().mkdir(path)
        if made:
            _, kind = self._hierarchy(path)
            populate(path, kind, self.has_kill)
        return made

    def rmdir(self, path: Path) -> None:
        if not path.exists():
            return
        if any(pid_alive(p) for p in _pids(path)):
            raise CgroupError(f"cannot remove cgroup {path}: Device or resource busy")
        if any(c.is_dir() for c in path.iterdir()):
            raise CgroupError(f"cannot remove cgroup {path}: Device or resource busy")
        for child in path.iterdir():
            child.unlink()
        path.rmdir()

    def write(self, path: Path, value: str) -> None:
        self.writes.append((path, value))
        if path.name in self.fail_writes:
            raise CgroupError(f"cannot write {value!r} to {path}: Invalid argument") from OSError(
                errno.EINVAL, "Invalid argument"
            )
        if path.name == fs.CGROUP_SUBTREE_CONTROL:
            available = set((path.parent / fs.CGROUP_CONTROLLERS).read_text().split())
            active = set(path.read_text().split())
            for tok in value.split():
                if tok[1:] not in available:
                    raise CgroupError(
                        f"cannot write {value!r} to {path}: No such file or directory"
                    )
                active.add(tok[1:]) if tok[0] == "+" else active.discard(tok[1:])
            path.write_text(" ".join(sorted(active)) + "\n")
            return
        if path.name == fs.CGROUP_PROCS:
            old = [p for p in _pids(path.parent) if pid_alive(p)]
            _move_out(path, int(value))
            path.write_text("".join(f"{p}\n" for p in sorted({*old, int(value)})))
            return
        if not path.exists():
            super().write(path, value)  # the real error for a missing control file
        path.write_text(value)  # plain files need truncating; control files do not
        if path.name == fs.CGROUP_FREEZE:
            frozen = "1" if value == "1" and not self.freeze_sticks else "0"
            (path.parent / fs.CGROUP_EVENTS).write_text(f"populated 0\nfrozen {frozen}\n")
        elif path.name == fs.CGROUP_KILL:
            for pid in _pids(path.parent):
                if pid_alive(pid):
                    os.kill(pid, 9)

    def read(self, path: Path) -> str:
        if path.name == fs.CGROUP_PROCS and path.exists():
            return "".join(f"{p}\n" for p in _pids(path.parent) if pid_alive(p))
        return super().read(path)


def _pids(group: Path) -> list[int]:
    try:
        return [int(x) for x in (group / fs.CGROUP_PROCS).read_text().split()]
    except FileNotFoundError:
        return []


def _move_out(procs: Path, pid: int) -> None:
    """A task is in one group per hierarchy: drop it from its siblings' lists."""
    mount = procs.parent
    while (mount.parent / fs.CGROUP_PROCS).exists():
        mount = mount.parent
    for other in mount.rglob(fs.CGROUP_PROCS):
        if other != procs:
            keep = [p for p in _pids(other.parent) if p != pid]
            other.write_text("".join(f"{p}\n" for p in keep))


def populate(group: Path, kind: str | tuple[str, ...], has_kill: bool = True) -> None:
    """The control files the kernel would show in a new group."""
    files = {fs.CGROUP_PROCS: ""}
    if kind == "v2":
        parent_sub = (group.parent / fs.CGROUP_SUBTREE_CONTROL).read_text().split()
        files.update(
            {
                fs.CGROUP_CONTROLLERS: " ".join(parent_sub) + "\n",
                fs.CGROUP_SUBTREE_CONTROL: "\n",
                fs.CGROUP_EVENTS: "populated 0\nfrozen 0\n",
                fs.CGROUP_FREEZE: "0\n",
                fs.CPU_STAT: "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
            }
        )
        if has_kill:
            files[fs.CGROUP_KILL] = ""
        if "cpu" in parent_sub:
            files[fs.CPU_MAX] = "max 100000\n"
            files[fs.CPU_STAT] += "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n"
        if "memory" in parent_sub:
            files[fs.MEMORY_CURRENT] = "0\n"
            files[fs.MEMORY_PEAK] = "0\n"
        if "pids" in parent_sub:
            files[fs.PIDS_CURRENT] = "0\n"
        if "hugetlb" in parent_sub:
            for s in SIZES:
                files[f"hugetlb.{s}.current"] = "0\n"
    else:
        files["tasks"] = ""
        if "cpu" in kind:
            files.update(
                {
                    fs.CFS_QUOTA: "-1\n",
                    fs.CFS_PERIOD: "100000\n",
                    fs.CPU_STAT: "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
                }
            )
        if "cpuacct" in kind:
            files.update(
                {fs.CPUACCT_USAGE: "0\n", fs.CPUACCT_USAGE_USER: "0\n", fs.CPUACCT_USAGE_SYS: "0\n"}
            )
        if "freezer" in kind:
            files[fs.FREEZER_STATE] = "THAWED\n"
        if "memory" in kind:
            files.update({fs.MEMORY_USAGE: "0\n", fs.MEMORY_MAX_USAGE: "0\n"})
        if "pids" in kind:
            files[fs.PIDS_CURRENT] = "0\n"
    for name, text in files.items():
        (group / name).write_text(text)


def _root_v2(root: Path, controllers: str) -> None:
    root.mkdir(parents=True)
    for name, text in {
        fs.CGROUP_CONTROLLERS: controllers + "\n",
        fs.CGROUP_SUBTREE_CONTROL: "\n",
        fs.CGROUP_PROCS: "",
        fs.CPU_STAT: "usage_usec 0\n",
    }.items():
        (root / name).write_text(text)


def _root_v1(root: Path) -> None:
    root.mkdir(parents=True)
    (root / fs.CGROUP_PROCS).write_text("")


def make_tree(tmp: Path, kind: str, **options: object) -> tuple[Layout, FakeKernelFS]:
    """A fake host of ``kind`` ("unified", "hybrid", "legacy") under ``tmp``."""
    tmp = Path(tmp)
    mounts: dict[Path, str | tuple[str, ...]] = {}
    if kind == "unified":
        layout = Layout.for_unified(tmp)
        _root_v2(tmp, "cpu io memory pids hugetlb")
        mounts[tmp] = "v2"
    elif kind == "hybrid":
        layout = Layout.for_hybrid(tmp, V1_ALL)
        _root_v2(tmp / "unified", "hugetlb")
        mounts[tmp / "unified"] = "v2"
    elif kind == "legacy":
        layout = Layout.for_legacy(tmp, V1_ALL)
    else:
        raise ValueError(kind)
    for c, mount in layout.v1.items():
        _root_v1(mount)
        mounts[mount] = (c,)
    return layout, FakeKernelFS(mounts, **options)  # type: ignore[arg-type]
