"""The interface every group manager offers, real or inert (what the sandbox calls)."""

from __future__ import annotations

import abc
from pathlib import Path
from types import TracebackType

from ckpt.cgroups.stat import CgroupStat


class BaseManager(abc.ABC):
    """One sandbox's group: membership, CPU cap, freeze/thaw/kill, figures, delete.

    Used as a context manager it kills and deletes the group on the way out, so a failed
    start or restore leaves no process and no group behind.
    """

    name: str
    cpu_backend: str  # "v2", "v1", or "none" (no CPU controller / inert)
    freezer_backend: str
    inert: bool
    reason: str = ""  # why an inert manager has no group; empty for a real one

    @property
    @abc.abstractmethod
    def paths(self) -> dict[str, Path]: ...

    @abc.abstractmethod
    def set_cpu_quota(self, cpus: float | None) -> None: ...

    @abc.abstractmethod
    def add_process(self, pid: int) -> None: ...

    @abc.abstractmethod
    def procs(self) -> list[int]: ...

    @abc.abstractmethod
    def freeze(self, timeout: float = 5.0) -> None: ...

    @abc.abstractmethod
    def thaw(self) -> None: ...

    @abc.abstractmethod
    def kill(self, timeout: float = 5.0) -> None: ...

    @abc.abstractmethod
    def delete(self) -> None: ...

    @abc.abstractmethod
    def cpu_usage_usec(self) -> int: ...

    @abc.abstractmethod
    def stat(self) -> CgroupStat: ...

    @abc.abstractmethod
    def describe(self) -> str: ...

    def __enter__(self) -> BaseManager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.kill()
        finally:
            self.delete()
