"""ckpt.cgroups: one cgroup per sandbox (v2, with a hybrid/v1 fallback) and a lean stat.

from ckpt import cgroups
cgroups.mode()                       # Mode.UNIFIED / HYBRID / LEGACY / UNAVAILABLE
mgr = cgroups.create("ckpt/ID", cpus=0.25)
mgr.add_process(pid); mgr.freeze(); mgr.thaw(); mgr.cpu_usage_usec(); mgr.stat()
mgr.kill(); mgr.delete()
"""

from ckpt.cgroups.base import BaseManager
from ckpt.cgroups.detect import Layout, Mode, detect_layout, layout, mode, parse_mountinfo
from ckpt.cgroups.manager import (
    DEFAULT_CONTROLLERS,
    Manager,
    available_for_quota,
    create,
    open_group,
    remove_if_empty,
)
from ckpt.cgroups.stat import CgroupStat, StatReader, hugepage_sizes
from ckpt.errors import CgroupError


def __getattr__(name: str) -> object:
    """``InertManager`` on first use (PEP 562): it imports psutil, which costs every
    command start-up and is needed only on a host without cgroups."""
    if name == "InertManager":
        from ckpt.cgroups.inert import InertManager

        return InertManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_CONTROLLERS",
    "BaseManager",
    "CgroupError",
    "CgroupStat",
    "InertManager",
    "Layout",
    "Manager",
    "Mode",
    "StatReader",
    "available_for_quota",
    "create",
    "detect_layout",
    "hugepage_sizes",
    "layout",
    "mode",
    "open_group",
    "parse_mountinfo",
    "remove_if_empty",
]
