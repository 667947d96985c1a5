"""CPU quota values: validation, and the v2 (``cpu.max``) and v1 (CFS) encodings.

A quota of ``cpus`` CPUs is ``cpus * period`` microseconds of run time per period.
v2 writes both as one line, ``"<quota> <period>"`` or ``"max <period>"``; v1 splits them
over ``cpu.cfs_quota_us`` (``-1`` = unlimited) and ``cpu.cfs_period_us``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ckpt.errors import CgroupError

DEFAULT_PERIOD_US = 100_000
MIN_QUOTA_US = 1_000  # the kernel refuses smaller quotas
MAX_PERIOD_US = 1_000_000


def host_cpus() -> int:
    """CPUs this host has (the upper bound for a quota)."""
    return os.cpu_count() or 1


def quota_us(cpus: float, period_us: int = DEFAULT_PERIOD_US, ncpu: int | None = None) -> int:
    """Validate ``cpus`` and turn it into microseconds per ``period_us``."""
    ncpu = host_cpus() if ncpu is None else ncpu
    if isinstance(cpus, bool) or not isinstance(cpus, int | float):
        raise CgroupError(f"invalid CPU quota {cpus!r}: give a number of CPUs such as 0.5")
    if math.isnan(cpus) or math.isinf(cpus) or cpus <= 0:
        raise CgroupError(f"invalid CPU quota {cpus!r}: it must be a positive number of CPUs")
    if cpus > ncpu:
        raise CgroupError(
            f"invalid CPU quota {cpus!r}: this host has only {ncpu} CPU(s); "
            "omit the quota to run uncapped"
        )
    return max(MIN_QUOTA_US, round(cpus * period_us))


def format_cpu_max(
    cpus: float | None, period_us: int = DEFAULT_PERIOD_US, ncpu: int | None = None
) -> str:
    """The ``cpu.max`` line: ``"25000 100000"`` for 0.25 CPU, ``"max 100000"`` for none."""
    if cpus is None:
        return f"max {period_us}"
    return f"{quota_us(cpus, period_us, ncpu)} {period_us}"


def parse_cpu_max(text: str, path: Path) -> tuple[int | None, int]:
    """``cpu.max`` -> (quota_us or None for ``max``, period_us).

    The kernel writes ``"max 100000"``; a lone ``"max"`` (what one may write) keeps the
    default period.
    """
    parts = text.split()
    try:
        if len(parts) == 1 and parts[0] == "max":
            return None, DEFAULT_PERIOD_US
        if len(parts) == 2:
            quota = None if parts[0] == "max" else int(parts[0])
            period = int(parts[1])
            if period > 0 and (quota is None or quota > 0):
                return quota, period
    except ValueError:
        pass
    raise CgroupError(
        f"malformed {path}: expected '<quota> <period>' or 'max <period>', got {text.strip()[:40]!r}"
    )


def cpus_from(quota: int | None, period_us: int) -> float | None:
    """The number of CPUs a quota/period pair allows (None: unlimited)."""
    return None if quota is None or quota < 0 else quota / period_us
