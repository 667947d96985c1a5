"""How ``checkpoint`` and ``restore`` close their timings: the total phase, CPU from the
sandbox's cgroup when there is one (else the sandbox process's own count), and the
sandbox's counters, copied so that adding to them leaves the reply alone."""

from __future__ import annotations

import time

from ckpt.sandbox.client import lifecycle
from ckpt.sandbox.wire import protocol as p
from ckpt.sandbox.wire.timings import RESUME_TOTAL, SUSPEND_TOTAL, Timings


def _reply() -> p.CheckpointReply:
    return p.CheckpointReply(checkpoint_ns=1, cpu_usec=700, stopping=True, counters={"objects": 3})


def test_cgroup_cpu_is_taken_when_the_sandbox_has_a_cgroup() -> None:
    timings, reply = Timings(), _reply()
    t0 = time.perf_counter_ns()
    lifecycle._settle(timings, SUSPEND_TOTAL, t0, 1234, reply)
    assert (timings.cpu_usec, timings.cpu_source) == (1234, "cgroup")
    assert timings.phases_ns[SUSPEND_TOTAL] >= 0 and list(timings.phases_ns) == [SUSPEND_TOTAL]
    assert timings.counters == {"objects": 3}
    timings.counters["handover"] = "none"
    assert reply.counters == {"objects": 3}


def test_without_a_cgroup_the_process_count_is_taken() -> None:
    timings = Timings()
    lifecycle._settle(timings, RESUME_TOTAL, time.perf_counter_ns(), None, _reply())
    assert (timings.cpu_usec, timings.cpu_source) == (700, "process")
    assert list(timings.phases_ns) == [RESUME_TOTAL]


def test_zero_cgroup_cpu_is_still_the_cgroup_s() -> None:
    timings = Timings()
    lifecycle._settle(timings, SUSPEND_TOTAL, time.perf_counter_ns(), 0, _reply())
    assert (timings.cpu_usec, timings.cpu_source) == (0, "cgroup")
