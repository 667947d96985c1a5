"""``ckpt bench cgroup-stat``: the lean ``stat()`` against a naive reader (after containerd's
cgroup2 Stat allocation work).

Both read the real cgroup of a live child process (a fresh group holding ``sleep``) and
return the same figures; the bench checks that they agree before measuring.

* ``naive``: what one writes without thinking about allocations: ``open().read()`` per
  file, text parsed into a dict per file, file paths joined on every call, hugetlb files
  found by listing the group directory on every call, a slotted dataclass as result.
* ``lean``: ``Manager.stat()`` (see ``ckpt/cgroups/stat.py``).

One operation is one ``stat`` call.  The harness times a batch of calls per sample
(a single call is tens of microseconds, too short to time alone) and the figures are
divided by the batch size.  Metrics per call: wall and CPU time; *blocks*, the net
``sys.getallocatedblocks`` delta with every result of the batch kept alive (what a
result costs to hold; Python has no counter of transient allocations); *peak mem*,
the peak traced memory of one call in its own ``tracemalloc`` pass (transient churn).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tracemalloc
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpt.bench import harness
from ckpt.cgroups import Manager, available_for_quota, create
from ckpt.errors import CgroupError

TARGET_TIME = 0.60  # at least 40% less time than naive
TARGET_BLOCKS = 0.60  # at least 40% fewer blocks
DEFAULT_BATCH = 200
_HUGETLB = re.compile(r"hugetlb\.(\w+)\.(current|usage_in_bytes)")


@dataclass(slots=True)
class NaiveStat:
    """The same figures as ``CgroupStat``, held the ordinary way."""

    usage_usec: int | None = None
    user_usec: int | None = None
    system_usec: int | None = None
    nr_periods: int | None = None
    nr_throttled: int | None = None
    throttled_usec: int | None = None
    memory_current: int | None = None
    memory_peak: int | None = None
    pids_current: int | None = None
    hugetlb: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def _read_int(path: str) -> int | None:
    text = _read_text(path)
    return None if text is None else int(text.strip())


def _read_keyed(path: str) -> dict[str, int]:
    text = _read_text(path)
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, value = line.split()
        out[key] = int(value)
    return out


def naive_stat(unified: Path | None, v1: dict[str, Path]) -> NaiveStat:
    """Read a group's figures without any of the lean reader's tricks."""
    st = NaiveStat()
    if "cpuacct" in v1:
        d = str(v1["cpuacct"])
        usage = _read_int(os.path.join(d, "cpuacct.usage"))
        user = _read_int(os.path.join(d, "cpuacct.usage_user"))
        system = _read_int(os.path.join(d, "cpuacct.usage_sys"))
        st.usage_usec = None if usage is None else usage // 1000
        st.user_usec = None if user is None else user // 1000
        st.system_usec = None if system is None else system // 1000
    if "cpu" in v1:
        stats = _read_keyed(os.path.join(str(v1["cpu"]), "cpu.stat"))
        st.nr_periods = stats.get("nr_periods")
        st.nr_throttled = stats.get("nr_throttled")
        throttled = stats.get("throttled_time")
        st.throttled_usec = None if throttled is None else throttled // 1000
    if unified is not None and ("cpu" not in v1 or "cpuacct" not in v1):
        stats = _read_keyed(os.path.join(str(unified), "cpu.stat"))
        if "cpuacct" not in v1:
            st.usage_usec = stats.get("usage_usec")
            st.user_usec = stats.get("user_usec")
            st.system_usec = stats.get("system_usec")
        if "cpu" not in v1:
            st.nr_periods = stats.get("nr_periods")
            st.nr_throttled = stats.get("nr_throttled")
            st.throttled_usec = stats.get("throttled_usec")
    if "memory" in v1:
        st.memory_current = _read_int(os.path.join(str(v1["memory"]), "memory.usage_in_bytes"))
        st.memory_peak = _read_int(os.path.join(str(v1["memory"]), "memory.max_usage_in_bytes"))
    elif unified is not None:
        st.memory_current = _read_int(os.path.join(str(unified), "memory.current"))
        st.memory_peak = _read_int(os.path.join(str(unified), "memory.peak"))
    pids_dir = v1.get("pids", unified)
    if pids_dir is not None:
        st.pids_current = _read_int(os.path.join(str(pids_dir), "pids.current"))
    hugetlb_dir = v1.get("hugetlb", unified)
    if hugetlb_dir is not None:
        for name in os.listdir(hugetlb_dir):  # every call, as containerd's Stat once did
            m = _HUGETLB.fullmatch(name)
            if m:
                value = _read_int(os.path.join(str(hugetlb_dir), name))
                if value is not None:
                    st.hugetlb[m.group(1)] = value
    return st


def start_target() -> tuple[Manager, subprocess.Popen[bytes]]:
    """A fresh group ``ckpt/bench-stat-<id>`` holding a sleeping child."""
    ok, why = available_for_quota()
    if not ok:
        raise CgroupError(f"ckpt bench cgroup-stat needs a real cgroup: {why}; run as root")
    mgr = create(f"ckpt/bench-stat-{uuid.uuid4().hex[:8]}")
    if not isinstance(mgr, Manager):
        raise CgroupError(f"ckpt bench cgroup-stat needs a real cgroup: {mgr.describe()}")
    try:
        proc = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL)
    except OSError:
        mgr.delete()
        raise
    try:
        mgr.add_process(proc.pid)
    except BaseException:
        proc.kill()
        proc.wait()
        mgr.delete()
        raise
    return mgr, proc


def stop_target(mgr: Manager, proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(CgroupError):
        mgr.kill()
    proc.kill()
    proc.wait()
    mgr.delete()


def one_call_peak(call: Callable[[], Any]) -> int:
    """Peak traced memory of one call (transient churn), in its own tracemalloc pass."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        result = call()
        _, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        tracemalloc.stop()
    return max(0, peak - base)


def build_cases(
    mgr: Manager, batch: int
) -> tuple[list[harness.Case], dict[str, Callable[[], Any]]]:
    unified = mgr.paths.get("unified")
    v1 = {k: v for k, v in mgr.paths.items() if k != "unified"}
    calls: dict[str, Callable[[], Any]] = {
        "naive": lambda: naive_stat(unified, v1),
        "lean": mgr.stat,
    }

    def batch_of(call: Callable[[], Any]) -> Callable[[], list[Any]]:
        def run() -> list[Any]:
            out = [None] * batch
            for i in range(batch):
                out[i] = call()
            return out

        return run

    cases = [harness.Case("CgroupStat", variant, batch_of(call)) for variant, call in calls.items()]
    return cases, calls


def run_suite(count: int = 10, batch: int = DEFAULT_BATCH, progress: bool = True) -> dict[str, Any]:
    """Measure both readers on a live group; returns results and the figures."""
    if batch < 1:
        raise harness.BenchError(f"--batch must be at least 1, not {batch}")
    mgr, proc = start_target()
    try:
        cases, calls = build_cases(mgr, batch)
        naive, lean = calls["naive"]().as_dict(), calls["lean"]().as_dict()
        if naive != lean:
            raise harness.BenchError(f"the two readers disagree: naive {naive} vs lean {lean}")
        results = harness.run_interleaved(cases, count=count, memory=False, progress=progress)
        for r in results:
            for s in r.samples:
                s.wall_ns, s.cpu_ns, s.blocks = (
                    s.wall_ns / batch,
                    s.cpu_ns / batch,
                    s.blocks / batch,
                )  # type: ignore[assignment]
            r.peak_bytes = one_call_peak(calls[r.variant])
            r.extras = {"files": float(len(mgr._stat_reader().plan))}
        where = mgr.describe()
    finally:
        stop_target(mgr, proc)
    time_ratio = harness.ratio(results, "CgroupStat", "lean", "naive")
    blocks_ratio = harness.ratio(results, "CgroupStat", "lean", "naive", "blocks")
    peak = {r.variant: r.peak_bytes for r in results}
    peak_ratio = peak["lean"] / peak["naive"] if peak.get("naive") else float("nan")
    return {
        "results": results,
        "batch": batch,
        "group": where,
        "figures": lean,
        "time_ratio": time_ratio,
        "blocks_ratio": blocks_ratio,
        "peak_ratio": peak_ratio,
        "time_target_met": time_ratio <= TARGET_TIME,
        "blocks_target_met": blocks_ratio <= TARGET_BLOCKS,
    }


def to_json(suite: dict[str, Any]) -> dict[str, Any]:
    doc = harness.to_json(suite["results"], baseline="naive")
    doc.update({k: v for k, v in suite.items() if k != "results"})
    doc["targets"] = {"time_ratio_max": TARGET_TIME, "blocks_ratio_max": TARGET_BLOCKS}
    return doc


def summary_lines(suite: dict[str, Any]) -> list[str]:
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    return [
        f"group: {suite['group']}",
        f"per call, {suite['batch']} calls per sample; lean/naive:",
        f"  time   {suite['time_ratio']:.2f}  (target <= {TARGET_TIME:.2f}: {verdict(suite['time_target_met'])})",
        f"  blocks {suite['blocks_ratio']:.2f}  (target <= {TARGET_BLOCKS:.2f}: {verdict(suite['blocks_target_met'])})",
        f"  peak   {suite['peak_ratio']:.2f}  (transient traced memory of one call)",
    ]
