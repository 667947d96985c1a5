"""Which cgroup hierarchies a host has, and where they are mounted.

Like containerd's ``cgroups.Mode()``, the answer is one of unified (cgroup2 at the
cgroup root), hybrid (v1 controllers plus a cgroup2 tree, usually at
``/sys/fs/cgroup/unified``), legacy (v1 only) or unavailable.  We read it from
``/proc/self/mountinfo`` rather than ``statfs`` (which the stdlib lacks), and keep the
mount point of every hierarchy so the manager never hard-codes a path: tests build a
``Layout`` over a temporary directory instead.
"""

from __future__ import annotations

import enum
import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ckpt.errors import CgroupError

DEFAULT_ROOT = Path("/sys/fs/cgroup")
MOUNTINFO = Path("/proc/self/mountinfo")
SELF_CGROUP = Path("/proc/self/cgroup")

# v1 controllers we may use; other super options (rw, name=systemd, ...) are ignored.
V1_CONTROLLERS = frozenset(
    {
        "blkio",
        "cpu",
        "cpuacct",
        "cpuset",
        "devices",
        "freezer",
        "hugetlb",
        "memory",
        "misc",
        "net_cls",
        "net_prio",
        "perf_event",
        "pids",
        "rdma",
    }
)


class Mode(enum.Enum):
    """The cgroup setup of a host (containerd's Unified / Hybrid / Legacy / Unavailable)."""

    UNIFIED = "unified"
    HYBRID = "hybrid"
    LEGACY = "legacy"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class Layout:
    """Mount points of the hierarchies, plus where this process sits in each.

    ``unified`` is the cgroup2 mount (None without one); ``v1`` maps a controller name to
    its v1 mount point (co-mounted controllers share a path); ``own`` maps a v1 controller
    (or ``""`` for cgroup2) to this process's cgroup path in that hierarchy.
    """

    mode: Mode
    unified: Path | None = None
    v1: Mapping[str, Path] = field(default_factory=dict)
    own: Mapping[str, str] = field(default_factory=dict)
    read_only: frozenset[Path] = frozenset()

    @classmethod
    def for_unified(cls, root: Path) -> Layout:
        """A unified host whose cgroup2 tree is mounted at ``root``."""
        return cls(Mode.UNIFIED, unified=Path(root))

    @classmethod
    def for_hybrid(
        cls,
        root: Path,
        controllers: tuple[str, ...] = ("cpu", "cpuacct", "freezer", "memory", "pids"),
    ) -> Layout:
        """v1 controllers at ``root/<controller>`` and cgroup2 at ``root/unified``."""
        root = Path(root)
        return cls(Mode.HYBRID, unified=root / "unified", v1={c: root / c for c in controllers})

    @classmethod
    def for_legacy(
        cls,
        root: Path,
        controllers: tuple[str, ...] = ("cpu", "cpuacct", "freezer", "memory", "pids"),
    ) -> Layout:
        """v1 controllers only, each at ``root/<controller>``."""
        root = Path(root)
        return cls(Mode.LEGACY, v1={c: root / c for c in controllers})

    def is_nested(self, controller: str) -> bool:
        """True when this process sits below the root of that v1 hierarchy.

        A group at the hierarchy root would then lift limits someone else set on us
        (this host keeps its memory limit in a v1 memory cgroup), so optional
        controllers in that state are left alone.
        """
        return self.own.get(controller, "/") not in ("/", "")


def _unescape(text: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as ``\\ooo`` octal."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(
    text: str, root: Path = DEFAULT_ROOT, own: Mapping[str, str] | None = None
) -> Layout:
    """Build a Layout from the text of ``/proc/<pid>/mountinfo``.

    Line format: ``id parent maj:min root mountpoint opts [optional...] - fstype source super``.
    """
    root = Path(root)
    unified: Path | None = None
    unified_at_root = False
    v1: dict[str, Path] = {}
    read_only: set[Path] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        left, sep, right = line.partition(" - ")
        fields_left, fields_right = left.split(), right.split()
        if not sep or len(fields_left) < 6 or len(fields_right) < 3:
            raise CgroupError(f"malformed mountinfo line {lineno}: {line!r}")
        mountpoint = Path(_unescape(fields_left[4]))
        fstype, super_opts = fields_right[0], fields_right[2].split(",")
        mount_ro = "ro" in fields_left[5].split(",")
        if fstype == "cgroup2":
            # Prefer the mount at the root, else the first one found (hybrid "unified").
            if mountpoint == root:
                unified, unified_at_root = mountpoint, True
            elif unified is None:
                unified = mountpoint
        elif fstype == "cgroup":
            for opt in super_opts:
                if opt in V1_CONTROLLERS:
                    v1.setdefault(opt, mountpoint)
        else:
            continue
        if mount_ro:
            read_only.add(mountpoint)
    if unified_at_root or (unified is not None and not v1):
        mode = Mode.UNIFIED
    elif v1:
        mode = Mode.HYBRID if unified is not None else Mode.LEGACY
    else:
        mode = Mode.UNAVAILABLE
    if mode is Mode.UNIFIED:
        v1 = {}
    return Layout(mode, unified=unified, v1=v1, own=dict(own or {}), read_only=frozenset(read_only))


def parse_self_cgroup(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` (``hier:controllers:path``) as controller -> path; ``""`` is cgroup2."""
    own: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            own[""] = path
        for c in controllers.split(","):
            if c:
                own[c] = path
    return own


def detect_layout(
    mountinfo: Path = MOUNTINFO, self_cgroup: Path = SELF_CGROUP, root: Path = DEFAULT_ROOT
) -> Layout:
    """Read the layout of this host (uncached; ``layout()`` caches it)."""
    try:
        text = Path(mountinfo).read_text()
    except OSError:
        return Layout(Mode.UNAVAILABLE)
    try:
        own = parse_self_cgroup(Path(self_cgroup).read_text())
    except OSError:
        own = {}
    return parse_mountinfo(text, root=root, own=own)


@functools.cache
def layout() -> Layout:
    """The host's layout, detected once per process."""
    return detect_layout()


def mode() -> Mode:
    """UNIFIED / HYBRID / LEGACY / UNAVAILABLE for this host, detected once."""
    return layout().mode


def can_write(path: Path, lay: Layout) -> bool:
    """Whether we may create groups under ``path``: writable and not a read-only mount."""
    if any(path == ro or ro in path.parents for ro in lay.read_only):
        return False
    return os.access(path, os.W_OK)
