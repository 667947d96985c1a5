"""Phase timings and CPU accounting for checkpoint and restore.

Phases (runsc/seed names):

* ``Checkpoint``    the save RPC: freeze, serialize, write the image, commit
* ``SuspendTotal``  ``ckpt checkpoint`` start to the sandbox stopped (or resumed)
* ``SandboxCreate`` sandbox process spawn to its control socket ready
* ``Restore``       loading the image inside the new sandbox (state, pages, resume);
                    importing the kernel/engine modules is not part of it (it is
                    reported as ``import_ms`` and counted in ResumeTotal and CPU)
* ``ResumeTotal``   ``ckpt restore`` start to the sandbox serving again

CPU comes from the sandbox's cgroup when it has one (so it counts exactly the work done
inside it, under its quota), else from the process with psutil / getrusage.
Stdlib only: the sandbox process imports this.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

CHECKPOINT = "Checkpoint"
SUSPEND_TOTAL = "SuspendTotal"
SANDBOX_CREATE = "SandboxCreate"
RESTORE = "Restore"
RESUME_TOTAL = "ResumeTotal"
CPU = "CPU"
PHASES = (CHECKPOINT, SUSPEND_TOTAL, SANDBOX_CREATE, RESTORE, RESUME_TOTAL)


@dataclass
class Timings:
    """Phase durations in nanoseconds, CPU in microseconds, plus free-form counters."""

    phases_ns: dict[str, int] = field(default_factory=dict)
    cpu_usec: int | None = None
    cpu_source: str = ""
    counters: dict[str, Any] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            self.phases_ns[name] = time.perf_counter_ns() - start

    def summary(self) -> str:
        """The phases and CPU on one line of plain text, as the CLI prints them."""
        parts = [f"{name} {ns / 1e6:.1f} ms" for name, ns in self.phases_ns.items()]
        frozen = self.counters.get("frozen_time_ms")
        if isinstance(frozen, int | float):
            # what --pre-copy, --pre-dump and --parent-path are for: SuspendTotal counts
            # time the sandbox kept serving, so the freeze is said on its own
            parts.insert(0, f"frozen {frozen:.1f} ms")
        if self.cpu_usec is not None:
            parts.append(f"CPU {self.cpu_usec / 1e3:.1f} ms ({self.cpu_source})")
        if self.counters.get("listener"):
            parts.append(f"listener {self.counters['listener']}")
        if self.counters.get("handover"):
            parts.append(f"sockets handed to {self.counters['handover']}")
        start = self.counters.get("sandbox_start")
        if start:
            parts.append("from the template" if start == "template" else "cold start")
        return " · ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"{k}_ms": round(v / 1e6, 3) for k, v in self.phases_ns.items()}
        if self.cpu_usec is not None:
            out["CPU_ms"] = round(self.cpu_usec / 1e3, 3)
            out["cpu_source"] = self.cpu_source
        if self.counters:
            out["counters"] = self.counters
        return out
