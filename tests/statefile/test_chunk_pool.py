"""The chunk pool: results in submission order, bounded look-ahead, errors passed on,
pending work cancelled, and two workers really running at once."""

from __future__ import annotations

import random
import threading
import time

import pytest

from ckpt.statefile import chunks


def scrambled(i: int) -> int:
    """Finish out of order: a short random sleep, then a result naming the input."""
    time.sleep(random.random() / 500)
    return i * i


def test_map_ordered_keeps_submission_order() -> None:
    assert list(chunks.map_ordered(scrambled, range(200), max_inflight=7)) == [
        i * i for i in range(200)
    ]


def test_map_ordered_of_nothing() -> None:
    assert list(chunks.map_ordered(scrambled, [])) == []


def test_look_ahead_is_bounded() -> None:
    pulled = 0

    def items():
        nonlocal pulled
        for i in range(100):
            pulled += 1
            yield i

    for consumed, _ in enumerate(chunks.map_ordered(scrambled, items(), max_inflight=4), 1):
        assert pulled - consumed <= 4 + 1


def test_error_reaches_the_caller() -> None:
    def fail_on_5(i: int) -> int:
        if i == 5:
            raise ValueError("chunk 5 is bad")
        return i

    got = []
    with pytest.raises(ValueError, match="chunk 5 is bad"):
        for r in chunks.map_ordered(fail_on_5, range(50), max_inflight=3):
            got.append(r)
    assert got == [0, 1, 2, 3, 4]


def test_two_workers_run_at_once() -> None:
    assert chunks.pool().threads and len(chunks.pool().threads) >= 2
    barrier = threading.Barrier(2, timeout=30)  # broken (an error) if only one runs

    def meet(i: int) -> str:
        barrier.wait()
        return threading.current_thread().name

    names = list(chunks.map_ordered(meet, range(2)))
    assert len(set(names)) == 2
    assert all(n.startswith("ckpt-chunk") for n in names)


def test_cancel_drops_pending_work() -> None:
    n = len(chunks.pool().threads)
    release = threading.Event()
    started = threading.Semaphore(0)
    ran: list[int] = []

    def block(i: int) -> int:
        started.release()
        release.wait(30)
        ran.append(i)
        return i

    ordered = chunks.Ordered(max_inflight=100)
    for i in range(n):  # occupy every worker
        ordered.submit(block, i)
    for _ in range(n):
        assert started.acquire(timeout=30)
    pending = [chunks.pool().submit(ran.append, -i) for i in range(1, 4)]
    for job in pending:
        assert job.cancel()
        with pytest.raises(RuntimeError, match="cancelled"):
            job.result()
    release.set()
    ordered.cancel()  # running jobs finish and are waited for
    assert sorted(ran) == list(range(n))


def test_cancel_after_completion_is_refused() -> None:
    job = chunks.pool().submit(scrambled, 3)
    assert job.result() == 9
    assert not job.cancel()
    assert job.result() == 9
