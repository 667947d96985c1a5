"""A process's start time, state, command line and size, read from ``/proc``.

Every command checks a sandbox's pid against its record (``pids.py``), and these three
reads are all it needs; importing psutil for them cost a command more start-up than the
check itself.  The values are the ones psutil gives (records written with either compare
equal): the start time is the boot time plus ``starttime`` clock ticks, the command
line is split as psutil splits it.  ``None`` means no such process, or one ckpt may not
read.
"""

from __future__ import annotations

import os

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_boot: float | None = None


def boot_time() -> float:
    """The host's boot time, seconds since the epoch (``btime`` of ``/proc/stat``)."""
    global _boot
    if _boot is None:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime"):
                    _boot = float(line.split()[1])
                    break
            else:
                raise OSError("/proc/stat has no btime line")
    return _boot


def _stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (which may hold spaces
    and parentheses: the last ``)`` ends it); field 3 of proc(5) is index 0."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields if len(fields) > 19 else None


def create_time(pid: int) -> float | None:
    """When ``pid`` started, seconds since the epoch, or None if there is no such
    process."""
    fields = _stat(pid)
    if fields is None:
        return None
    try:
        return int(fields[19]) / _CLOCK_TICKS + boot_time()
    except (OSError, ValueError):
        return None


def state(pid: int) -> str | None:
    """``pid``'s one-letter state (``R``, ``S``, ``Z`` for a zombie...), or None."""
    fields = _stat(pid)
    return fields[0].decode("ascii", "replace") if fields is not None else None


def cmdline(pid: int) -> list[str] | None:
    """``pid``'s command line, or None if it cannot be read; a zombie's is empty.  A
    process that rewrote its title may separate words by spaces, not NULs."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", encoding="utf-8", errors="surrogateescape") as f:
            data = f.read()
    except OSError:
        return None
    if not data:
        return []
    sep = "\x00" if data.endswith("\x00") else " "
    if data.endswith(sep):
        data = data[:-1]
    words = data.split(sep)
    if sep == "\x00" and len(words) == 1 and " " in data:
        words = data.split(" ")
    return words


def resident(pid: int) -> int | None:
    """``pid``'s resident memory in bytes (``/proc/PID/statm``), or None."""
    try:
        with open(f"/proc/{int(pid)}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
