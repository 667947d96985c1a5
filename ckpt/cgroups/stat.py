"""An allocation-lean ``stat()`` for a cgroup (after containerd's cgroup2
Stat allocation work).

What makes it lean, each point as containerd's change did it:

* the files to read and the keys to pick are decided once per group (a *plan* of
  precomputed, already-encoded paths), not rediscovered per call;
* each file is read with one ``os.readv`` into a buffer reused across calls, and only the
  wanted values are sliced out of it (no text decoding, no line splitting, no dicts);
* hugepage sizes come from ``/sys/kernel/mm/hugepages`` once per process instead of a
  directory listing of the cgroup on every call;
* the figures go into one presized ``array('q')`` per reader, reset and refilled on
  every call; the result holds an immutable ``bytes`` copy of it (one allocation), with
  ``-1`` for "not available here", behind named read-only properties.
"""

from __future__ import annotations

import functools
import os
import re
import struct
import threading
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckpt.cgroups import fs
from ckpt.errors import CgroupError

HUGEPAGES_DIR = Path("/sys/kernel/mm/hugepages")
MISSING = -1
BUFFER_SIZE = 8192

# Order of the figures in the values array; hugetlb usages follow, one per page size.
FIELDS = (
    "usage_usec",
    "user_usec",
    "system_usec",
    "nr_periods",
    "nr_throttled",
    "throttled_usec",
    "memory_current",
    "memory_peak",
    "pids_current",
)
_INDEX = {name: i for i, name in enumerate(FIELDS)}
HUGETLB_BASE = len(FIELDS)
_Q = struct.Struct("q")


def _human_size(nbytes: int) -> str:
    """2097152 -> "2MB", 1073741824 -> "1GB": the page size names used in hugetlb files."""
    units = ("B", "KB", "MB", "GB", "TB", "PB")
    i = 0
    while nbytes >= 1024 and nbytes % 1024 == 0 and i < len(units) - 1:
        nbytes //= 1024
        i += 1
    return f"{nbytes}{units[i]}"


def parse_hugepage_dirs(names: list[str]) -> tuple[str, ...]:
    """``hugepages-2048kB`` entries -> page size names, smallest first; others ignored."""
    sizes = []
    for name in names:
        m = re.fullmatch(r"hugepages-(\d+)kB", name)
        if m:
            sizes.append(int(m.group(1)) * 1024)
    return tuple(_human_size(n) for n in sorted(sizes))


@functools.cache
def hugepage_sizes(directory: Path = HUGEPAGES_DIR) -> tuple[str, ...]:
    """Page sizes this host supports, computed once per process (runc's trick)."""
    try:
        return parse_hugepage_dirs(os.listdir(directory))
    except OSError:
        return ()


def _field(index: int) -> property:
    offset = index * _Q.size

    def get(self: CgroupStat) -> int | None:
        value = _Q.unpack_from(self._data, offset)[0]
        return None if value == MISSING else value

    get.__name__ = FIELDS[index]
    return property(get, doc=f"{FIELDS[index]}, or None when this host's cgroup does not report it")


class CgroupStat:
    """CPU, memory, pids and hugetlb figures of one group at one moment.

    CPU times are microseconds, memory and hugetlb bytes.  A figure the group's
    hierarchies do not provide is None (e.g. memory when the memory controller is not
    used for this group).
    """

    __slots__ = ("_data", "_sizes")

    def __init__(self, data: bytes, sizes: tuple[str, ...]) -> None:
        self._data = data  # native int64 figures: FIELDS, then one per hugepage size
        self._sizes = sizes

    @classmethod
    def from_values(
        cls,
        sizes: tuple[str, ...] = (),
        hugetlb: Mapping[str, int] | None = None,
        **figures: int | None,
    ) -> CgroupStat:
        """Build one from named figures (for callers without cgroup files, and tests)."""
        values = array("q", [MISSING]) * (HUGETLB_BASE + len(sizes))
        for name, value in figures.items():
            if name not in _INDEX:
                raise TypeError(f"unknown figure {name!r}; known: {', '.join(FIELDS)}")
            if value is not None:
                values[_INDEX[name]] = value
        for i, size in enumerate(sizes):
            if hugetlb and size in hugetlb:
                values[HUGETLB_BASE + i] = hugetlb[size]
        return cls(values.tobytes(), sizes)

    usage_usec = _field(0)
    user_usec = _field(1)
    system_usec = _field(2)
    nr_periods = _field(3)
    nr_throttled = _field(4)
    throttled_usec = _field(5)
    memory_current = _field(6)
    memory_peak = _field(7)
    pids_current = _field(8)

    @property
    def hugetlb(self) -> dict[str, int]:
        """Usage in bytes per page size (``"2MB"``), for the sizes the group reports."""
        v = array("q", self._data)
        return {
            s: v[HUGETLB_BASE + i]
            for i, s in enumerate(self._sizes)
            if v[HUGETLB_BASE + i] != MISSING
        }

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in FIELDS}
        out["hugetlb"] = self.hugetlb
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CgroupStat) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"CgroupStat({inner})"


@dataclass(frozen=True, slots=True)
class _Read:
    """One file of the plan: a single value (``keys`` None) or picked ``key value`` lines."""

    path: bytes
    index: int  # single value: where it goes
    mul: int
    div: int
    keys: tuple[tuple[bytes, int, int, int], ...] | None = None  # (b"key ", index, mul, div)


_NS = (1, 1000)  # nanoseconds -> microseconds
_ONE = (1, 1)


class StatReader:
    """Reads a group's figures through a plan fixed when the reader is built.

    ``unified`` is the group's cgroup2 directory (or None); ``v1`` maps the v1
    controllers used for the group to its directory in that hierarchy.  Files that do
    not exist when the plan is built are left out (their figures read as None);
    files that vanish later (the group was deleted) are errors.
    """

    def __init__(
        self, unified: Path | None, v1: Mapping[str, Path], sizes: tuple[str, ...] | None = None
    ) -> None:
        self.sizes = hugepage_sizes() if sizes is None else sizes
        self._buf = bytearray(BUFFER_SIZE)
        self._bufs = [self._buf]
        self._lock = threading.Lock()
        self._template = array("q", [MISSING]) * (HUGETLB_BASE + len(self.sizes))
        self._scratch = self._template[:]
        self._usage_scratch = array("q", [MISSING])
        self.plan: tuple[_Read, ...] = tuple(self._build(unified, v1))
        self._usage = self._usage_read(unified, v1)

    # -- plan -----------------------------------------------------------------------

    @staticmethod
    def _single(path: Path, field: str | int, scale: tuple[int, int] = _ONE) -> _Read | None:
        if not path.exists():
            return None
        index = _INDEX[field] if isinstance(field, str) else field
        return _Read(os.fsencode(path), index, scale[0], scale[1])

    @staticmethod
    def _keyed(path: Path, keys: list[tuple[str, str, tuple[int, int]]]) -> _Read | None:
        if not path.exists():
            return None
        picked = tuple((k.encode() + b" ", _INDEX[f], s[0], s[1]) for k, f, s in keys)
        return _Read(os.fsencode(path), -1, 1, 1, picked)

    def _build(self, unified: Path | None, v1: Mapping[str, Path]) -> list[_Read]:
        reads: list[_Read | None] = []
        v2_cpu: list[tuple[str, str, tuple[int, int]]] = []
        if "cpuacct" in v1:
            d = v1["cpuacct"]
            reads.append(self._single(d / fs.CPUACCT_USAGE, "usage_usec", _NS))
            reads.append(self._single(d / fs.CPUACCT_USAGE_USER, "user_usec", _NS))
            reads.append(self._single(d / fs.CPUACCT_USAGE_SYS, "system_usec", _NS))
        elif unified is not None:
            v2_cpu += [(k, k, _ONE) for k in ("usage_usec", "user_usec", "system_usec")]
        if "cpu" in v1:
            keys = [
                ("nr_periods", "nr_periods", _ONE),
                ("nr_throttled", "nr_throttled", _ONE),
                ("throttled_time", "throttled_usec", _NS),
            ]
            reads.append(self._keyed(v1["cpu"] / fs.CPU_STAT, keys))
        elif unified is not None:
            v2_cpu += [(k, k, _ONE) for k in ("nr_periods", "nr_throttled", "throttled_usec")]
        if v2_cpu and unified is not None:
            reads.append(self._keyed(unified / fs.CPU_STAT, v2_cpu))
        if "memory" in v1:
            reads.append(self._single(v1["memory"] / fs.MEMORY_USAGE, "memory_current"))
            reads.append(self._single(v1["memory"] / fs.MEMORY_MAX_USAGE, "memory_peak"))
        elif unified is not None:
            reads.append(self._single(unified / fs.MEMORY_CURRENT, "memory_current"))
            reads.append(self._single(unified / fs.MEMORY_PEAK, "memory_peak"))
        pids_dir = v1.get("pids", unified)
        if pids_dir is not None:
            reads.append(self._single(pids_dir / fs.PIDS_CURRENT, "pids_current"))
        hugetlb_dir, suffix = (
            (v1["hugetlb"], "usage_in_bytes") if "hugetlb" in v1 else (unified, "current")
        )
        if hugetlb_dir is not None:
            for i, size in enumerate(self.sizes):
                reads.append(
                    self._single(hugetlb_dir / f"hugetlb.{size}.{suffix}", HUGETLB_BASE + i)
                )
        return [r for r in reads if r is not None]

    def _usage_read(self, unified: Path | None, v1: Mapping[str, Path]) -> _Read | None:
        """The plan for ``cpu_usage_usec``: the value lands at index 0 of a 1-slot array."""
        if "cpuacct" in v1:
            return self._single(v1["cpuacct"] / fs.CPUACCT_USAGE, 0, _NS)
        if unified is not None and (unified / fs.CPU_STAT).exists():
            return _Read(os.fsencode(unified / fs.CPU_STAT), -1, 1, 1, ((b"usage_usec ", 0, 1, 1),))
        return None

    # -- reading --------------------------------------------------------------------

    def _fill(self, read: _Read) -> int:
        """Read one file into the shared buffer; returns its length."""
        try:
            fd = os.open(read.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise CgroupError(
                f"cannot read {os.fsdecode(read.path)}: {os.strerror(exc.errno or 0)}"
            ) from exc
        try:
            n = os.readv(fd, self._bufs)
        except OSError as exc:
            raise CgroupError(
                f"cannot read {os.fsdecode(read.path)}: {os.strerror(exc.errno or 0)}"
            ) from exc
        finally:
            os.close(fd)
        if n >= BUFFER_SIZE:
            raise CgroupError(
                f"malformed {os.fsdecode(read.path)}: larger than {BUFFER_SIZE} bytes"
            )
        return n

    def _apply(self, read: _Read, n: int, values: array) -> None:
        buf = self._buf
        try:
            if read.keys is None:
                values[read.index] = int(buf[:n]) * read.mul // read.div
                return
            for key, index, mul, div in read.keys:
                pos = buf.find(key, 0, n)
                while pos > 0 and buf[pos - 1] != 10:  # only at a line start
                    pos = buf.find(key, pos + 1, n)
                if pos < 0:
                    continue
                start = pos + len(key)
                end = buf.find(b"\n", start, n)
                values[index] = int(buf[start : n if end < 0 else end]) * mul // div
        except (ValueError, OverflowError):
            text = bytes(buf[: min(n, 60)])
            raise CgroupError(
                f"malformed {os.fsdecode(read.path)}: unexpected content {text!r}"
            ) from None

    def read(self) -> CgroupStat:
        """One snapshot of every planned figure."""
        with self._lock:
            values = self._scratch
            values[:] = self._template  # same size: copies in place, allocates nothing
            for read in self.plan:
                self._apply(read, self._fill(read), values)
            data = values.tobytes()
        return CgroupStat(data, self.sizes)

    def cpu_usage_usec(self) -> int:
        """Total CPU time of the group in microseconds: one small file, one read."""
        read = self._usage
        if read is None:
            raise CgroupError("this cgroup has no CPU accounting file (cpuacct.usage or cpu.stat)")
        with self._lock:
            values = self._usage_scratch
            values[0] = MISSING
            self._apply(read, self._fill(read), values)
            usage = values[0]
        if usage == MISSING:
            raise CgroupError(f"malformed {os.fsdecode(read.path)}: no usage_usec line")
        return usage
