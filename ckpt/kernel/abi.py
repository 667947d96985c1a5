"""Linux constants the simulated system calls use, and the fcntl lock commands."""

from __future__ import annotations

SI_USER = 0
SI_TIMER = -2
CLD_EXITED, CLD_KILLED, CLD_STOPPED, CLD_CONTINUED = 1, 2, 5, 6
LOCK_SH, LOCK_EX, LOCK_UN = 1, 2, 8
SEEK_SET, SEEK_CUR, SEEK_END = 0, 1, 2
PROC_ENTRIES = [
    "auxv",
    "cgroup",
    "cmdline",
    "comm",
    "cwd",
    "environ",
    "exe",
    "gid_map",
    "io",
    "limits",
    "maps",
    "mem",
    "mountinfo",
    "mounts",
    "oom_score",
    "oom_score_adj",
    "root",
    "stat",
    "statm",
    "status",
    "uid_map",
]


class LockCmd:
    """fcntl lock commands: classic POSIX (owner: the process) and OFD (owner: the file)."""

    GETLK = "F_GETLK"
    SETLK = "F_SETLK"
    SETLKW = "F_SETLKW"
    OFD_GETLK = "F_OFD_GETLK"
    OFD_SETLK = "F_OFD_SETLK"
    OFD_SETLKW = "F_OFD_SETLKW"
