"""``memory:N@RATE``: the name, the pace on the kernel's clock, the pages it dirties, its
digest, and writing that goes on after a checkpoint where it stopped."""

from __future__ import annotations

import re

import pytest
import zstandard

from ckpt import state
from ckpt.errors import KernelError
from ckpt.kernel import Kernel, MemoryFault, build_workload, memwriter
from ckpt.kernel.memwriter import BATCH_PAGES, PAGE, STAMP, PageWriter, parse_rate
from ckpt.kernel.mm import PROT_READ, PROT_WRITE, MapKind
from ckpt.kernel.programs import memory_digest
from ckpt.kernel.task import SIGCONT, SIGSTOP

from .conftest import MemoryPages, blank_kernel, checkpoint, resume_same_instant, through_image

MS = 1_000_000
S = 1_000_000_000
RATE = "2M"  # 512 pages a second: a run of a simulated second takes a few ms
PAGES_PER_S = (2 << 20) // PAGE


def writing(n: int = 4, rate: str = RATE, seed: int = 0) -> Kernel:
    k = build_workload(f"memory:{n}@{rate}", seed=seed)
    k.set_http_listen_address("127.0.0.1", 40000)
    return k


def writer(k: Kernel) -> PageWriter:
    found = [t.program for t in k.tasks() if isinstance(t.program, PageWriter)]
    assert len(found) == 1
    return found[0]


def digest(k: Kernel) -> str:
    """The mapping's digest as ``GET /memory`` computes it (also while paused)."""
    w = writer(k)
    assert k.init is not None
    return memory_digest(k, k.init, w.addr, w.npages)


def mapping_frames(k: Kernel) -> dict[int, int]:
    """frame -> page number in the writer's mapping."""
    w, mm = writer(k), k.init.tg.mm  # type: ignore[union-attr]
    first = w.addr // PAGE
    return {mm.ptes[first + i]: i for i in range(w.npages)}


def stamped(k: Kernel) -> set[int]:
    """Pages of the mapping whose contents the writer wrote (its stamp heads them)."""
    w, mm = writer(k), k.init.tg.mm  # type: ignore[union-attr]
    prefix = len(b"page%010x" % 0)
    return {i for i in range(w.npages) if mm.read(w.addr + i * PAGE, prefix) == b"page%010x" % i}


# -- the name -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "rate"),
    [("200M", 200 << 20), ("64k", 64 << 10), ("1G", 1 << 30), ("16G", 16 << 30), ("4096", 4096)],
)
def test_accepted_rates(text: str, rate: int) -> None:
    assert parse_rate(text) == rate


def test_the_workload_is_named_in_its_shortest_form_and_reports_its_rate() -> None:
    k = build_workload("memory:2@2048K")
    assert k.workload == "memory:2@2M"
    assert writer(k).rate == 2 << 20
    assert build_workload("memory:1@5000").workload == "memory:1@5000"


@pytest.mark.parametrize(
    "name",
    [
        "memory:64@",
        "memory:64@-1M",
        "memory:64@1X",
        "memory:64@17G",
        "memory:64@0",
        "memory:64@1.5M",
        "memory:64@ 1M",
        "memory:64@1MB",
    ],
)
def test_bad_rates_are_one_line_errors_saying_what_is_accepted(name: str) -> None:
    with pytest.raises(KernelError) as exc:
        build_workload(name)
    message = str(exc.value)
    assert "\n" not in message and "K, M or G" in message and "memory:256@200M" in message


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("kv:1@1M", "only memory:N takes @RATE"),
        ("files:3@1M", "only memory:N takes @RATE"),
        ("http@1M", "memory:N@RATE"),  # an unknown name: the list of names
        ("memory@1M", "memory:N@RATE"),
    ],
)
def test_only_memory_n_takes_a_rate(name: str, says: str) -> None:
    with pytest.raises(KernelError, match=re.escape(says)):
        build_workload(name)


def test_rate_is_not_an_option() -> None:
    with pytest.raises(KernelError, match="no option rate"):
        build_workload("memory:1", rate=4096)


def test_memory_n_without_a_rate_has_no_writer() -> None:
    k = build_workload("memory:1")
    assert not any(isinstance(t.program, PageWriter) for t in k.tasks())
    assert k.pace_ns() is None
    k.set_http_listen_address("127.0.0.1", 40000)
    assert "pages_written" not in k.http_request("GET", "/memory")[1]  # type: ignore[operator]


# -- the pace --------------------------------------------------------------------------------
@pytest.mark.parametrize("rate", ["2M", "8M", "50M", "5000"])
def test_it_writes_rate_bytes_a_second_of_kernel_time(rate: str) -> None:
    k = writing(rate=rate)
    per_s = parse_rate(rate) / PAGE
    k.run_for(2 * S)
    written = writer(k).written
    assert per_s * 2 - 1 <= written <= per_s * 2 + 1
    k.run_for(S // 2)
    assert per_s * 2.5 - 1 <= writer(k).written <= per_s * 2.5 + 1


def test_the_dirty_frames_are_the_pages_it_wrote() -> None:
    k = writing(n=16)  # 4096 pages; a second writes 512 of them, a few twice
    k.memory_file.take_dirty()
    k.run_for(S)
    frames = mapping_frames(k)
    taken = k.memory_file.take_dirty()
    dirty = {frames[f] for f in taken if f in frames}
    assert len(dirty) == len(taken)  # nothing else was written
    assert dirty == stamped(k)
    assert PAGES_PER_S - 100 <= len(dirty) < PAGES_PER_S  # random pages: a few repeat


def test_a_step_writes_at_most_a_batch_and_asks_to_run_again_soon() -> None:
    k = writing(rate="200M")
    w = writer(k)
    assert k.pace_ns() == w.pace_ns() == 2_500_000  # 128 pages at 200 MiB/s
    k.pause()
    k.resume(host_now_ns=k.timekeeper.paused_host_ns + 10 * S)  # frozen 10 s: it steps
    assert w.written == BATCH_PAGES  # of the 5120 pages of 100 ms owed
    assert w.wake_ns == k.now + w.pace_ns()
    for step in range(2, 6):
        k.run_for(w.pace_ns())
        assert w.written == step * BATCH_PAGES and w.generation == step


def test_after_a_freeze_it_catches_up_at_most_100_ms() -> None:
    k = writing(rate="8M")  # 2048 pages a second; a step may write 256
    k.run_for(S)
    before = writer(k).written
    k.pause()
    k.resume(host_now_ns=k.timekeeper.paused_host_ns + 60 * S)
    k.run_for(S)
    caught_up = writer(k).written - before - 2048
    assert 2048 // 10 - 1 <= caught_up <= 2048 // 10 + 1


def test_a_stopped_writer_neither_writes_nor_asks_for_a_pace() -> None:
    k = writing()
    thread = k.tasks()[-1]
    assert isinstance(thread.program, PageWriter)
    k.kill(k.init, thread.tid, SIGSTOP)
    k.run_for(S)
    assert writer(k).written == 0 and k.pace_ns() is None
    k.kill(k.init, thread.tid, SIGCONT)
    k.run_for(S)
    assert writer(k).written > 0


# -- what it writes ------------------------------------------------------------------------
def test_pages_are_stamped_distinct_never_zero_and_compress_like_the_fill() -> None:
    k = writing(n=16, rate="8M")
    frames = mapping_frames(k)
    fill = [k.memory_file.read(f) for f in frames]
    k.memory_file.take_dirty()
    k.run_for(S)
    written = [k.memory_file.read(f) for f in k.memory_file.take_dirty() if f in frames]
    assert len(written) > 1500
    assert bytes(PAGE) not in written and len(set(written)) == len(written)
    assert all(p.startswith(b"page") for p in written)

    def ratio(pages: list[bytes]) -> float:
        raw = b"".join(pages)
        return len(raw) / len(zstandard.ZstdCompressor(level=1).compress(raw))

    nonzero = [p for p in fill if p != bytes(PAGE)]
    assert 0.7 * ratio(nonzero[:1500]) <= ratio(written[:1500]) <= 1.3 * ratio(nonzero[:1500])
    assert ratio(written) > 1.3  # not noise only


def test_the_digest_follows_the_writes_and_the_same_seed_writes_the_same() -> None:
    a, b, c = writing(seed=1), writing(seed=1), writing(seed=2)
    first = digest(a)
    assert digest(b) == first
    for k in (a, b, c):
        k.run_for(S // 4)
    assert digest(a) == digest(b) != first
    assert digest(c) != digest(a)
    a.run_for(S // 4)
    assert digest(a) != digest(b)


def test_http_reports_the_rate_and_the_pages_written() -> None:
    k = writing()
    k.run_for(S)
    for path in ("/", "/memory"):
        status, body = k.http_request("GET", path)
        assert status == 200 and isinstance(body, dict)
        assert body["write_rate"] == 2 << 20 and body["pages_written"] == PAGES_PER_S
    assert k.http_request("GET", "/memory")[1]["memory_sha256"] == digest(k)  # type: ignore[index]


def test_a_page_lost_or_copied_to_another_changes_the_digest() -> None:
    k = writing()
    k.memory_file.take_dirty()
    k.run_for(S)
    frames = mapping_frames(k)
    rewritten = [f for f in k.memory_file.take_dirty() if f in frames]
    mf, good = k.memory_file, digest(k)
    one, other = rewritten[0], rewritten[1]
    kept = mf.read(one)
    mf.write(one, 0, mf.read(other))  # a page duplicated into another frame
    assert digest(k) != good
    mf.write(one, 0, kept[:-1] + b"?")  # an older or damaged copy of it
    assert digest(k) != good
    mf.write(one, 0, kept)
    assert digest(k) == good


# -- checkpoint and restore ------------------------------------------------------------------
def test_writing_goes_on_after_a_restore_as_if_never_stopped(engine: str) -> None:
    k = writing(seed=3)
    k.run_for(S // 2)
    restored, _ = checkpoint(k, engine)  # paused: nothing is written meanwhile
    paused = digest(k)
    assert digest(restored) == paused and writer(restored).written == writer(k).written
    resume_same_instant(k, restored)
    status, body = restored.http_request("GET", "/memory")
    assert status == 200 and body["memory_sha256"] == paused  # type: ignore[index]
    for kernel in (k, restored):
        kernel.run_for(S // 2)
    assert writer(restored).written == PAGES_PER_S
    assert digest(restored) == digest(k) != paused


def test_writing_goes_on_after_a_real_image(tmp_path, engine: str) -> None:
    k = writing(seed=4)
    k.run_for(S // 2)
    restored = through_image(k, engine, tmp_path / "img")
    assert digest(restored) == digest(k)
    restored.resume()  # host time passed: catch-up, then the pace
    before = writer(restored).written
    restored.run_for(S)
    assert writer(restored).written >= before + PAGES_PER_S - 1


def test_the_writer_state_is_saved_not_rebuilt(engine: str) -> None:
    k = writing(seed=5)
    k.run_for(S // 3)
    w = writer(k)
    restored, _ = checkpoint(k, engine)
    r = writer(restored)
    saved = ("rate", "seed", "generation", "written", "last_ns", "owed", "addr", "npages")
    assert [getattr(r, f) for f in saved] == [getattr(w, f) for f in saved]
    assert r.owed > 0 and r.generation > 0


def test_module_constants_agree() -> None:
    assert memwriter.PAGE_UNITS == PAGE * S
    assert STAMP % (1, 2) == b"page0000000001 write000000000002\n"


def test_writing_over_pages_not_fetched_yet_after_a_lazy_restore(engine: str) -> None:
    """A whole page written before its restored copy is fetched must stay written."""
    k = writing(seed=6)
    k.run_for(S // 2)
    k.pause()
    restored = state.loads(state.dumps(k, engine=engine), engine=engine)
    pages = MemoryPages(dict(k.memory_file.pages()))
    restored.memory_file.restore_pages(pages)  # lazily: nothing read yet
    resume_same_instant(k, restored)
    for kernel in (k, restored):
        kernel.run_for(S // 2)
    assert restored.memory_file.unfetched > 0  # some pages were never touched
    assert digest(restored) == digest(k)


# -- the whole-page write path (MemoryManager.write / MemoryFile.write) ----------------------
def test_a_whole_page_write_after_fork_is_copied_on_write_and_marked_dirty() -> None:
    k, init = blank_kernel()
    addr = k.mmap(init, 4 * PAGE)
    k.mem_write(init, addr + PAGE, b"p" * PAGE)
    child = k.fork(init)
    k.memory_file.take_dirty()
    k.mem_write(child, addr + PAGE, b"c" * PAGE)
    assert k.mem_read(init, addr + PAGE, PAGE) == b"p" * PAGE
    assert k.mem_read(child, addr + PAGE, PAGE) == b"c" * PAGE
    assert k.memory_file.take_dirty() == [child.tg.mm.ptes[(addr + PAGE) // PAGE]]
    k.mem_write(child, addr + PAGE + 10, b"partial")  # the kept page is copied first
    assert k.mem_read(child, addr + PAGE + 8, 11) == b"cc" + b"partial" + b"cc"


def test_a_whole_page_write_to_a_shared_mapping_is_seen_by_both() -> None:
    k, init = blank_kernel()
    addr = k.mmap(init, 2 * PAGE, PROT_READ | PROT_WRITE, MapKind.ANON_SHARED)
    child = k.fork(init)
    k.mem_write(child, addr + PAGE, b"s" * PAGE)
    assert k.mem_read(init, addr + PAGE, PAGE) == b"s" * PAGE


@pytest.mark.parametrize("where", ["read-only", "unmapped"])
def test_a_whole_page_write_faults_where_a_small_one_does(where: str) -> None:
    k, init = blank_kernel()
    addr = k.mmap(init, 2 * PAGE, PROT_READ)
    if where == "unmapped":
        k.munmap(init, addr, 2 * PAGE)
    with pytest.raises(MemoryFault):
        k.mem_write(init, addr, bytes(PAGE))
    with pytest.raises(MemoryFault):
        k.mem_write(init, addr, b"x")


def test_write_pages_is_write_for_each_across_mappings_and_faults_alike() -> None:
    k, init = blank_kernel()
    mm = init.tg.mm
    a = k.mmap(init, 3 * PAGE)
    b = k.mmap(init, 2 * PAGE)
    ro = k.mmap(init, PAGE, PROT_READ)
    hole = k.mmap(init, PAGE)
    k.munmap(init, hole, PAGE)
    mm.write_pages([(a, b"1" * PAGE), (a + 2 * PAGE, b"2" * PAGE), (b + PAGE, b"3" * PAGE)])
    mm.write_pages([(a + PAGE + 5, b"small"), (a + PAGE, b"4" * PAGE)])  # not a page: write
    assert k.mem_read(init, a, 3 * PAGE) == b"1" * PAGE + b"4" * PAGE + b"2" * PAGE
    mm.write_pages([(a, b"1" * PAGE), (a + PAGE, b"5" * (PAGE + 8))])  # over two pages
    assert k.mem_read(init, a + PAGE, PAGE + 9) == b"5" * (PAGE + 8) + b"2"
    mm.write_pages([(a + PAGE, b"4" * PAGE)])
    assert k.mem_read(init, b + PAGE, PAGE) == b"3" * PAGE
    for bad in (ro, hole):
        with pytest.raises(MemoryFault):
            mm.write_pages([(a, b"5" * PAGE), (bad, b"6" * PAGE), (a + PAGE, bytes(PAGE))])
        assert k.mem_read(init, a + PAGE, 1) == b"4"  # nothing after the fault is written
    with pytest.raises(MemoryFault):  # nothing written to it, and still read-only
        mm.write_pages([(ro, b""), (ro, b"7" * PAGE)])
    assert k.mem_read(init, ro, 1) == b"\0"
