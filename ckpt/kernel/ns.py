"""Kernel-wide namespaces and registries: UTS, IPC, the cgroup tree, the syslog.

None of these do much in the simulation; they are here because a real sandbox kernel
saves them too (gVisor's kernel holds a UTS and an IPC namespace, cgroupfs hierarchies
and the boot messages), so the object graph has the shape the CheckpointFile benchmark
should exercise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ckpt import state


@state.savable
@dataclass(eq=False)
class UTSNamespace:
    hostname: str = "sandbox"
    domainname: str = "(none)"


@state.savable
@dataclass(eq=False)
class IPCNamespace:
    """System V IPC registries (empty unless a workload uses them) and their limits."""

    shm_segments: dict[int, int] = field(default_factory=dict)
    semaphore_sets: dict[int, int] = field(default_factory=dict)
    message_queues: dict[int, int] = field(default_factory=dict)
    shmmax: int = (1 << 64) - (1 << 24) - 1
    shmall: int = (1 << 64) - (1 << 24) - 1
    shmmni: int = 4096
    semmsl: int = 32000
    msgmax: int = 8192


@state.savable
@dataclass(eq=False)
class CgroupNode:
    """A directory of a cgroupfs hierarchy: its control files and member pids."""

    name: str
    controllers: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)
    children: list[CgroupNode] = field(default_factory=list)


CONTROLLER_FILES = {
    "cpu": {"cpu.shares": "1024", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "-1"},
    "cpuacct": {"cpuacct.usage": "0", "cpuacct.usage_user": "0", "cpuacct.usage_sys": "0"},
    "cpuset": {"cpuset.cpus": "0-1", "cpuset.mems": "0"},
    "memory": {
        "memory.limit_in_bytes": "9223372036854771712",
        "memory.usage_in_bytes": "0",
        "memory.max_usage_in_bytes": "0",
        "memory.soft_limit_in_bytes": "9223372036854771712",
        "memory.swappiness": "60",
    },
    "pids": {"pids.max": "max", "pids.current": "0"},
    "job": {"job.id": "0"},
}


def standard_cgroups() -> list[CgroupNode]:
    """One hierarchy per controller, each with the root and a /sandbox child."""
    roots = []
    for ctl, files in CONTROLLER_FILES.items():
        root = CgroupNode("/", (ctl,), dict(files))
        root.children.append(CgroupNode("sandbox", (ctl,), dict(files)))
        roots.append(root)
    return roots


BOOT_MESSAGES = [
    "Starting gVisor-like simulated kernel...",
    "Waiting for children...",
    "Committing treasure map to memory...",
    "Gathering forks...",
    "Creating process schedule...",
    "Generating random numbers by fair dice roll...",
    "Preparing for the zombie uprising...",
    "Checking naughty and nice process list...",
    "Ready!",
]
