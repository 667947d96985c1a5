"""Scale: the event-driven step loop runs the same run as a full walk, large workloads
boot and checkpoint, and ``memory:N`` round-trips through a real image page for page."""

from __future__ import annotations

import zstandard
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from ckpt import kernel, state, statefile
from ckpt.kernel import memfill
from ckpt.kernel.events import EventIndex
from ckpt.kernel.kernel import Kernel
from ckpt.kernel.timers import ITIMER_REAL

from .conftest import MS, assert_same_state, checkpoint

# Shrinking rebuilds whole graphs many times over: a failure shows its seed at once.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


class Rebuilt(Kernel):
    """A kernel that forgets its event index before every use of it: each step then
    sees every timer and every task, as the old walk did.  Same run, or a hook is missing."""

    def _fire_timers(self) -> None:
        self._event_index = None
        super()._fire_timers()

    def _next_event(self) -> int:
        self._event_index = None
        return super()._next_event()

    def _deliver_signals(self) -> bool:
        self._event_index = None
        return super()._deliver_signals()


def _both(name: str, seed: int) -> tuple[Kernel, Kernel]:
    a = kernel.build_workload(name, seed=seed)
    b = kernel.build_workload(name, seed=seed)
    return a, b


@settings(max_examples=12, deadline=None, phases=NO_SHRINK)
@given(seed=st.integers(0, 10_000), n=st.integers(20, 260))
def test_the_event_index_gives_the_same_run_as_a_walk_of_everything(seed: int, n: int) -> None:
    # Build with the index, then run the same graph both ways from the same state.
    a = kernel.build_workload(f"graph:{n}", seed=seed)
    a.pause()
    data = state.dumps(a, engine="typed")
    a.resume(host_now_ns=a.timekeeper.paused_host_ns)
    b = state.loads(data, engine="typed")
    b.__class__ = Rebuilt
    b.memory_file.restore_pages(_Pages(dict(a.memory_file.pages())))
    b.resume(host_now_ns=b.timekeeper.paused_host_ns)
    for _ in range(3):
        a.run_for(37 * MS)
        b.run_for(37 * MS)
    assert_same_state(a, b)


@settings(max_examples=6, deadline=None, phases=NO_SHRINK)
@given(seed=st.integers(0, 10_000))
def test_graph_built_with_a_walk_of_everything_is_the_same_graph(seed: int) -> None:
    from ckpt.kernel import workloads

    plain = kernel.build_workload("graph:120", seed=seed)
    original = workloads.Kernel
    workloads.Kernel = Rebuilt  # type: ignore[misc]
    try:
        walked = kernel.build_workload("graph:120", seed=seed)
    finally:
        workloads.Kernel = original  # type: ignore[misc]
    assert type(walked) is Rebuilt
    assert plain.fingerprint() == walked.fingerprint()


class _Pages:
    def __init__(self, pages: dict[int, bytes]) -> None:
        self.pages = pages
        self.indices = sorted(pages)

    def read_page(self, index: int) -> bytes:
        return self.pages[index]


def test_next_event_is_the_nearest_timer_or_wake_up() -> None:
    k = kernel.build_workload("empty")
    assert k.next_event_ns() is None  # a pause process waits for nothing
    init = k.init
    assert init is not None
    k.setitimer(init, ITIMER_REAL, 30 * MS)
    tid = k.timer_create(init)
    k.timer_settime(init, tid, 12 * MS)
    assert k.next_event_ns() == k.now + 12 * MS
    k.timer_delete(init, tid)
    assert k.next_event_ns() == k.now + 30 * MS  # a deleted timer no longer counts
    k.setitimer(init, ITIMER_REAL, 0)
    assert k.next_event_ns() is None


def test_a_restored_kernel_rebuilds_its_index_and_fires_on_time(engine: str) -> None:
    k = kernel.build_workload("nginx")
    r, _ = checkpoint(k, engine)
    assert r._event_index is None  # not saved: rebuilt from the graph on first use
    k.resume(host_now_ns=k.timekeeper.paused_host_ns)
    r.resume(host_now_ns=r.timekeeper.paused_host_ns)
    assert r.next_event_ns() == k.next_event_ns()
    for kk in (k, r):
        kk.run_for(900 * MS)
    assert_same_state(k, r)


def test_large_files_and_graph_boot_and_checkpoint(engine: str) -> None:
    for name in ("files:4000", "graph:1500"):
        k = kernel.build_workload(name)
        r, _ = checkpoint(k, engine)  # asserts the restored fingerprint
        assert r.workload == name


def test_memory_mix_has_zero_text_and_incompressible_pages() -> None:
    import random

    pages = list(memfill.pages(2048, random.Random(3)))
    zero = [p for p in pages if not any(p)]
    assert len(pages) == 2048 and all(len(p) == 4096 for p in pages)
    assert len({bytes(p) for p in pages if any(p)}) == len(pages) - len(zero)  # distinct
    cctx = zstandard.ZstdCompressor(level=1)
    ratios = sorted(4096 / len(cctx.compress(p)) for p in pages if any(p))
    text = [r for r in ratios if r > 1.8]
    noise = [r for r in ratios if r < 1.01]
    assert 0.15 < len(zero) / len(pages) < 0.35
    assert 0.35 < len(text) / len(pages) < 0.65
    assert 0.15 < len(noise) / len(pages) < 0.35
    assert list(memfill.pages(64, random.Random(3))) == pages[:64]  # reproducible


def test_memory_workload_round_trips_through_a_real_image(tmp_path, engine: str) -> None:
    k = kernel.build_workload("memory:6", id="mem-1")
    status, body = k.http_request("GET", "/memory")
    assert status == 200 and body["memory_mib"] == 6 and not body["pages_loading"]
    digest = body["memory_sha256"]
    k.pause()
    with statefile.ImageWriter(tmp_path / "img") as img:
        state.save(k, img.state_file, engine=engine)
        summary = img.write_pages(k.memory_file.pages())
    assert summary.zero > 0 and summary.stored > 0 and summary.compression_ratio > 1.2
    for lazy in (False, True):
        image = statefile.open_image(tmp_path / "img")
        r = state.load(image.state_reader(), engine=engine)
        loaded = image.open_pages(lazy=lazy)
        r.memory_file.restore_pages(loaded)
        if not lazy:
            assert r.fingerprint() == k.fingerprint()  # every page, every object
        r.resume()
        _, after = r.http_request("GET", "/memory")  # lazily: touched pages come first
        assert after["memory_sha256"] == digest
        loaded.wait()


def test_memory_digest_sees_a_changed_page() -> None:
    k = kernel.build_workload("memory:1")
    _, before = k.http_request("GET", "/memory")
    server = k.init
    assert server is not None and server.program is not None
    k.mem_write(server, server.program.addr + 4096 * 100 + 7, b"!")  # type: ignore[attr-defined]
    _, after = k.http_request("GET", "/memory")
    assert before["memory_sha256"] != after["memory_sha256"]


def test_event_index_build_marks_every_task_ready() -> None:
    k = kernel.build_workload("graph:60", seed=1)
    idx = EventIndex.build(k)
    assert set(idx.ready) == set(k.pidns.tasks)
