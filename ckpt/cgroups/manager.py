"""One group per sandbox, across whichever hierarchies this host has.

A group has the same relative name (``ckpt/ID``) in every hierarchy it uses:

* unified host: one cgroup2 directory does everything (``cpu.max``, ``cgroup.freeze``...);
* hybrid host (cgroup v1 controllers, cgroup2 at ``/sys/fs/cgroup/unified`` without a cpu
  controller): CPU quota and usage through v1 ``cpu``/``cpuacct``, membership, freeze
  and kill through the cgroup2 directory, other controllers wherever they are mounted;
* legacy host: v1 for everything, the freezer via ``freezer.state``.

Optional v1 controllers (memory, pids, hugetlb) are skipped when this process itself sits
below the root of that hierarchy: a group at the root would lift the limits someone else
put on us.  ``cpu_backend`` and ``paths`` say what was chosen.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from ckpt.cgroups import fs, v1, v2
from ckpt.cgroups.base import BaseManager
from ckpt.cgroups.cpu import quota_us
from ckpt.cgroups.detect import Layout, Mode, can_write
from ckpt.cgroups.detect import layout as host_layout
from ckpt.cgroups.stat import CgroupStat, StatReader
from ckpt.errors import CgroupError

DEFAULT_CONTROLLERS = ("cpu", "cpuacct", "memory", "pids", "hugetlb", "freezer")
OPTIONAL_V1 = frozenset({"memory", "pids", "hugetlb"})
DELETE_RETRY_S = 1.0
QUOTA_HINT = "run as root or pass --ignore-cgroups"


def check_name(name: str) -> PurePosixPath:
    """A relative group name such as ``ckpt/ID``: no ``..``, no empty or absolute parts."""
    rel = PurePosixPath(name)
    if (
        not name
        or rel.is_absolute()
        or "\0" in name
        or any(part in ("..", ".") for part in rel.parts)
        or str(rel) != name.rstrip("/")
    ):
        raise CgroupError(f"invalid cgroup name {name!r}: use a relative path such as 'ckpt/ID'")
    return rel


def _quota_mount(lay: Layout) -> Path | None:
    """Where a CPU quota would be written: the v1 cpu mount, else the cgroup2 root."""
    if "cpu" in lay.v1:
        return lay.v1["cpu"]
    return lay.unified if lay.mode is Mode.UNIFIED else None


def available_for_quota(lay: Layout | None = None) -> tuple[bool, str]:
    """(True, how) when a CPU quota can be applied here, else (False, why); never raises."""
    lay = lay or host_layout()
    if lay.mode is Mode.UNAVAILABLE:
        return False, "no cgroup filesystem is mounted"
    mount = _quota_mount(lay)
    if mount is None:
        return False, "no hierarchy has the cpu controller"
    if lay.mode is Mode.UNIFIED:
        try:
            if "cpu" not in v2.controllers(fs.CgroupFS(), mount):
                return False, f"the cpu controller is not available in {mount}"
        except CgroupError as exc:
            return False, str(exc)
    if not can_write(mount, lay):
        return False, f"{mount} is not writable (not root, or a read-only cgroup filesystem)"
    backend = "cgroup v2 cpu.max" if lay.mode is Mode.UNIFIED else "cgroup v1 cpu.cfs_quota_us"
    return True, f"{backend} under {mount}"


def _manageable(lay: Layout) -> tuple[bool, str]:
    """Whether groups can be created at all (quota or not)."""
    if lay.mode is Mode.UNAVAILABLE:
        return False, "no cgroup filesystem is mounted"
    mounts = [lay.unified] if lay.unified is not None else list(dict.fromkeys(lay.v1.values()))
    for mount in mounts:
        if not can_write(mount, lay):
            return False, f"{mount} is not writable (not root, or a read-only cgroup filesystem)"
    return True, "ok"


def _v1_choice(lay: Layout, wanted: Iterable[str], in_unified: set[str]) -> list[str]:
    """The v1 controllers this group uses (freezer is decided after the cgroup2 mkdir)."""
    chosen = []
    for c in wanted:
        if c == "freezer" or c not in lay.v1 or c in in_unified:
            continue
        if c in OPTIONAL_V1 and lay.is_nested(c):
            continue
        chosen.append(c)
    return chosen


class Manager(BaseManager):
    """A group that exists in one or more hierarchies.  Build with ``create``/``open_group``."""

    inert = False

    def __init__(
        self,
        name: str,
        layout: Layout,
        *,
        unified: Path | None,
        v1_dirs: dict[str, Path],
        fsys: fs.CgroupFS | None = None,
    ) -> None:
        self.name = name
        self.layout = layout
        self.fs = fsys or fs.CgroupFS()
        self.unified = unified
        self.v1_dirs = dict(v1_dirs)
        if "cpu" in self.v1_dirs:
            self.cpu_backend = "v1"
        elif unified is not None and self.fs.exists(unified / fs.CPU_MAX):
            self.cpu_backend = "v2"
        else:
            self.cpu_backend = "none"
        if unified is not None and self.fs.exists(unified / fs.CGROUP_FREEZE):
            self.freezer_backend = "v2"
        elif "freezer" in self.v1_dirs:
            self.freezer_backend = "v1"
        else:
            self.freezer_backend = "none"
        self._reader: StatReader | None = None

    # -- what it is -----------------------------------------------------------------

    @property
    def paths(self) -> dict[str, Path]:
        """Hierarchy -> this group's directory there (``"unified"`` for cgroup2)."""
        out = {"unified": self.unified} if self.unified is not None else {}
        out.update(self.v1_dirs)
        return out

    def _dirs(self) -> list[Path]:
        """Each distinct directory once (co-mounted v1 controllers share one)."""
        return list(dict.fromkeys(self.paths.values()))

    def describe(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self.paths.items())
        return f"cgroup {self.name} ({self.layout.mode.value}; cpu via {self.cpu_backend}, freezer via {self.freezer_backend}): {where}"

    # -- verbs named after the files ------------------------------------------------

    def set_cpu_quota(self, cpus: float | None) -> None:
        """Cap the group at ``cpus`` CPUs (None: uncapped)."""
        if self.cpu_backend == "v1":
            v1.set_cfs(self.fs, self.v1_dirs["cpu"], cpus)
        elif self.cpu_backend == "v2":
            assert self.unified is not None
            v2.set_cpu_max(self.fs, self.unified, cpus)
        elif cpus is not None:
            quota_us(cpus)  # bad values are still reported as such
            raise CgroupError(
                f"cannot apply a CPU quota: cgroup {self.name} has no cpu controller; {QUOTA_HINT}"
            )

    def cpu_quota(self) -> float | None:
        """The current cap in CPUs (None: uncapped)."""
        if self.cpu_backend == "v1":
            quota, period = v1.cfs(self.fs, self.v1_dirs["cpu"])
        elif self.cpu_backend == "v2":
            assert self.unified is not None
            quota, period = v2.cpu_max(self.fs, self.unified)
        else:
            return None
        return None if quota is None else quota / period

    def add_process(self, pid: int) -> None:
        """Move ``pid`` into the group in every hierarchy (``cgroup.procs``)."""
        for d in self._dirs():
            self.fs.write(d / fs.CGROUP_PROCS, str(pid))

    def procs(self) -> list[int]:
        """Pids in the group (from cgroup2 when used, else the first v1 hierarchy)."""
        dirs = self._dirs()
        return v2.procs(self.fs, dirs[0]) if dirs else []

    def freeze(self, timeout: float = 5.0) -> None:
        """Stop every task and wait until the kernel reports the group frozen."""
        if self.freezer_backend == "v2":
            assert self.unified is not None
            v2.freeze(self.fs, self.unified, timeout)
        elif self.freezer_backend == "v1":
            v1.freeze(self.fs, self.v1_dirs["freezer"], timeout)
        else:
            raise CgroupError(
                f"cgroup {self.name} has no freezer (no cgroup.freeze, no v1 freezer)"
            )

    def thaw(self) -> None:
        if self.freezer_backend == "v2":
            assert self.unified is not None
            v2.thaw(self.fs, self.unified)
        elif self.freezer_backend == "v1":
            v1.thaw(self.fs, self.v1_dirs["freezer"])
        else:
            raise CgroupError(
                f"cgroup {self.name} has no freezer (no cgroup.freeze, no v1 freezer)"
            )

    def kill(self, timeout: float = 5.0) -> None:
        """Kill every task and wait until the group is empty."""
        if self.unified is not None:
            v2.kill(self.fs, self.unified, timeout)
            return
        dirs = self._dirs()
        if dirs:
            v1.kill(self.fs, dirs[0], self.v1_dirs.get("freezer"), timeout)

    def delete(self) -> None:
        """Remove the group from every hierarchy; refuses while processes remain.

        Processes that were just killed take a moment to leave, so this retries briefly
        before refusing.  The parent (``ckpt``) stays.  Already-removed directories are
        fine, so delete can be called again after a partial failure.
        """
        deadline = time.monotonic() + DELETE_RETRY_S
        while True:
            left = self._live_pids()
            if not left:
                break
            if time.monotonic() >= deadline:
                shown = ", ".join(map(str, left[:8]))
                raise CgroupError(
                    f"cgroup {self.name} still has processes ({shown}); kill them first"
                )
            time.sleep(0.01)
        for d in self._dirs():
            _rmdir_retrying(self.fs, d)
        self._reader = None

    def _live_pids(self) -> list[int]:
        pids: set[int] = set()
        for d in self._dirs():
            if self.fs.exists(d):
                pids.update(v2.procs(self.fs, d))
        return sorted(pids)

    # -- figures --------------------------------------------------------------------

    def _stat_reader(self) -> StatReader:
        if self._reader is None:
            self._reader = StatReader(self.unified, self.v1_dirs)
        return self._reader

    def cpu_usage_usec(self) -> int:
        """CPU time used by the group's tasks so far, in microseconds (one small read)."""
        return self._stat_reader().cpu_usage_usec()

    def stat(self) -> CgroupStat:
        """CPU, memory, pids and hugetlb figures, read through a plan fixed on first use."""
        return self._stat_reader().read()


def _rmdir_retrying(fsys: fs.CgroupFS, path: Path) -> None:
    """rmdir, retrying EBUSY briefly (a just-exited task may still be leaving)."""
    deadline = time.monotonic() + DELETE_RETRY_S
    while True:
        try:
            fsys.rmdir(path)
            return
        except CgroupError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def _cleanup(fsys: fs.CgroupFS, made: list[Path]) -> None:
    """Remove what a failed create made, deepest first; a busy parent is left alone."""
    for d in reversed(made):
        with contextlib.suppress(CgroupError):
            fsys.rmdir(d)


def _inert(name: str, why: str) -> BaseManager:
    """An ``InertManager``, imported here: it needs psutil, which a host with cgroups
    (and every command that only opens a group) never does."""
    from ckpt.cgroups.inert import InertManager

    return InertManager(name, why)


def create(
    name: str,
    cpus: float | None = None,
    *,
    layout: Layout | None = None,
    controllers: Iterable[str] = DEFAULT_CONTROLLERS,
    fsys: fs.CgroupFS | None = None,
) -> BaseManager:
    """Create group ``name`` (e.g. ``ckpt/ID``) and apply the CPU quota.

    Without privilege or cgroupfs and with ``cpus=None``, returns an ``InertManager``
    that tracks processes with psutil, so the sandbox still runs; asking for a quota
    then is a CgroupError.  Creation that fails half-way removes what it made.
    """
    rel = check_name(name)
    if cpus is not None:
        quota_us(cpus)  # bad values fail before anything is made
    lay = layout or host_layout()
    fsys = fsys or fs.CgroupFS()
    ok, why = _manageable(lay)
    if ok and cpus is not None:
        ok, why = available_for_quota(lay)
    if not ok:
        if cpus is not None:
            raise CgroupError(f"cannot apply a CPU quota: {why}; {QUOTA_HINT}")
        return _inert(name, why)
    wanted = list(dict.fromkeys(controllers))
    made: list[Path] = []
    try:
        unified_dir, v1_dirs = _make_dirs(fsys, lay, rel, wanted, made)
        mgr = Manager(name, lay, unified=unified_dir, v1_dirs=v1_dirs, fsys=fsys)
        if cpus is not None or mgr.cpu_backend is not None:
            mgr.set_cpu_quota(cpus)  # uncapped too: a group left behind keeps its quota
    except CgroupError as exc:
        made.extend(getattr(exc, "made", []))
        _cleanup(fsys, made)
        if cpus is None and fs.is_permission_error(exc):
            return _inert(name, str(exc))
        raise
    except BaseException:
        _cleanup(fsys, made)
        raise
    return mgr


def _make_dirs(
    fsys: fs.CgroupFS, lay: Layout, rel: PurePosixPath, wanted: list[str], made: list[Path]
) -> tuple[Path | None, dict[str, Path]]:
    """mkdir the group in every hierarchy it will use, recording each new directory."""
    unified_dir: Path | None = None
    in_unified: set[str] = set()
    if lay.unified is not None:
        new, in_unified = v2.create(fsys, lay.unified, rel, wanted)
        made.extend(new)
        unified_dir = lay.unified.joinpath(*rel.parts)
    v1_wanted = _v1_choice(lay, wanted, in_unified)
    if (
        "freezer" in wanted
        and "freezer" in lay.v1
        and not (unified_dir and fsys.exists(unified_dir / fs.CGROUP_FREEZE))
    ):
        v1_wanted.append("freezer")
    v1_dirs: dict[str, Path] = {}
    for c in v1_wanted:
        current = lay.v1[c]
        for part in rel.parts:
            current = current / part
            if fsys.mkdir(current):
                made.append(current)
        v1_dirs[c] = current
    if unified_dir is None and not v1_dirs:
        raise CgroupError(
            f"no usable cgroup hierarchy for {'/'.join(rel.parts)} (mode {lay.mode.value})"
        )
    return unified_dir, v1_dirs


def open_group(
    name: str,
    *,
    layout: Layout | None = None,
    controllers: Iterable[str] = DEFAULT_CONTROLLERS,
    fsys: fs.CgroupFS | None = None,
) -> Manager:
    """The existing group ``name``, in every hierarchy where its directory exists."""
    rel = check_name(name)
    lay = layout or host_layout()
    fsys = fsys or fs.CgroupFS()
    unified_dir = lay.unified.joinpath(*rel.parts) if lay.unified is not None else None
    if unified_dir is not None and not fsys.exists(unified_dir):
        unified_dir = None
    v1_dirs = {}
    for c in controllers:
        if c in lay.v1:
            d = lay.v1[c].joinpath(*rel.parts)
            if fsys.exists(d):
                v1_dirs[c] = d
    if unified_dir is None and not v1_dirs:
        raise CgroupError(f"no cgroup named {name!r} exists (mode {lay.mode.value})")
    return Manager(name, lay, unified=unified_dir, v1_dirs=v1_dirs, fsys=fsys)


def remove_if_empty(
    name: str, *, layout: Layout | None = None, fsys: fs.CgroupFS | None = None
) -> None:
    """rmdir group ``name`` in every hierarchy where it exists, quietly leaving it where
    it still has children or processes (a parent such as ``ckpt/<root hash>``)."""
    try:
        mgr = open_group(name, layout=layout, fsys=fsys)
    except CgroupError:
        return
    for d in mgr._dirs():
        with contextlib.suppress(CgroupError):
            mgr.fs.rmdir(d)
