"""The one place that touches cgroup files: mkdir, rmdir, write, read.

Every failure becomes a ``CgroupError`` naming the file, so a user sees which control
file refused which value.  The class is a seam: fake-tree tests subclass it to play the
kernel's part (populating a new group's control files on ``mkdir``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ckpt.errors import CgroupError

# Control files, one constant per kernel file (containerd style).
CGROUP_PROCS = "cgroup.procs"
CGROUP_CONTROLLERS = "cgroup.controllers"
CGROUP_SUBTREE_CONTROL = "cgroup.subtree_control"
CGROUP_FREEZE = "cgroup.freeze"
CGROUP_KILL = "cgroup.kill"
CGROUP_EVENTS = "cgroup.events"
CPU_MAX = "cpu.max"
CPU_STAT = "cpu.stat"
CFS_QUOTA = "cpu.cfs_quota_us"
CFS_PERIOD = "cpu.cfs_period_us"
CPUACCT_USAGE = "cpuacct.usage"
CPUACCT_USAGE_USER = "cpuacct.usage_user"
CPUACCT_USAGE_SYS = "cpuacct.usage_sys"
FREEZER_STATE = "freezer.state"
MEMORY_CURRENT = "memory.current"
MEMORY_PEAK = "memory.peak"
MEMORY_USAGE = "memory.usage_in_bytes"
MEMORY_MAX_USAGE = "memory.max_usage_in_bytes"
PIDS_CURRENT = "pids.current"

_PERMISSION = (errno.EACCES, errno.EPERM, errno.EROFS)


def is_permission_error(exc: BaseException) -> bool:
    """True when an error came from missing privilege or a read-only cgroupfs."""
    cause = exc.__cause__ if isinstance(exc, CgroupError) else exc
    return isinstance(cause, OSError) and cause.errno in _PERMISSION


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc)


class CgroupFS:
    """Reads and writes cgroup control files; raises CgroupError naming the path."""

    def mkdir(self, path: Path) -> bool:
        """Create one directory; False when it already existed."""
        try:
            os.mkdir(path)
        except FileExistsError:
            return False
        except OSError as exc:
            raise CgroupError(f"cannot create cgroup {path}: {_reason(exc)}") from exc
        return True

    def rmdir(self, path: Path) -> None:
        """Remove one group directory; a missing one is already gone."""
        try:
            os.rmdir(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise CgroupError(f"cannot remove cgroup {path}: {_reason(exc)}") from exc

    def write(self, path: Path, value: str) -> None:
        """Write ``value`` to a control file in one ``write`` call, as the kernel expects."""
        data = value.encode()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise CgroupError(f"cannot open {path} for writing: {_reason(exc)}") from exc
        try:
            os.write(fd, data)
        except OSError as exc:
            raise CgroupError(f"cannot write {value!r} to {path}: {_reason(exc)}") from exc
        finally:
            os.close(fd)

    def read(self, path: Path) -> str:
        """The whole text of a control file."""
        try:
            with open(path, "rb") as f:
                return f.read().decode()
        except OSError as exc:
            raise CgroupError(f"cannot read {path}: {_reason(exc)}") from exc
        except UnicodeDecodeError as exc:
            raise CgroupError(f"malformed {path}: not text") from exc

    def exists(self, path: Path) -> bool:
        return os.path.exists(path)


def parse_int(text: str, path: Path) -> int:
    """A single integer control file value; malformed content names the file."""
    try:
        return int(text.strip())
    except ValueError:
        raise CgroupError(
            f"malformed {path}: expected an integer, got {text.strip()[:40]!r}"
        ) from None


def parse_keyed(text: str, path: Path) -> dict[str, str]:
    """A flat-keyed file (``key value`` per line, e.g. cgroup.events, cpu.stat)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition(" ")
        if not sep:
            raise CgroupError(f"malformed {path}: line {line[:40]!r} has no value")
        out[key] = value.strip()
    return out


def parse_pids(text: str, path: Path) -> list[int]:
    """``cgroup.procs`` / ``tasks``: one pid per line."""
    try:
        return sorted({int(line) for line in text.split()})
    except ValueError:
        raise CgroupError(f"malformed {path}: expected one pid per line") from None
