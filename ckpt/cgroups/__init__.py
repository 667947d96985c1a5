"""ckpt.cgroups: one cgroup per sandbox (v2, with a hybrid/v1 fallback) and a lean stat.

from ckpt import cgroups
cgroups.mode()                       # Mode.UNIFIED / HYBRID / LEGACY / UNAVAILABLE
mgr = cgroups.create("ckpt/ID", cpus=0.25)
mgr.add_process(pid); mgr.freeze(); mgr.thaw(); mgr.cpu_usage_usec(); mgr.stat()
mgr.kill(); mgr.delete()
"""

from ckpt.cgroups.base import BaseManager
from ckpt.cgroups.detect import Layout, Mode, detect_layout, layout, mode, parse_mountinfo
from ckpt.cgroups.inert import InertManager
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
