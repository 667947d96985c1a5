"""What the sandbox answers to ``tasks`` and ``counters``, read from real kernels without
starting a sandbox: every task with its parent and state, figures counted once each."""

from __future__ import annotations

import threading

from ckpt import kernel
from ckpt.kernel.task import TaskState
from ckpt.sandbox.host import introspect
from ckpt.sandbox.wire import protocol as p


def test_tasks_name_their_parent_thread_group_and_state() -> None:
    k = kernel.build_workload("nginx")
    rows, omitted = introspect.task_rows(k, 100)
    assert omitted == 0
    assert [r.tid for r in rows] == sorted(t.tid for t in k.tasks())
    master = rows[0]
    assert (master.tid, master.ppid, master.comm) == (1, 0, "nginx")
    assert {r.ppid for r in rows[1:]} == {1}
    assert all(r.state == "S" for r in rows)


def test_a_thread_is_its_own_row_in_its_leaders_group() -> None:
    k = kernel.build_workload("empty")
    leader = k.tasks()[0]
    thread = k.clone_thread(leader, "worker")
    rows, _ = introspect.task_rows(k, 100)
    row = next(r for r in rows if r.tid == thread.tid)
    assert (row.tgid, row.comm, row.threads) == (leader.tid, "worker", 2)


def test_a_zombie_shows_as_z_with_its_status_and_is_counted() -> None:
    k = kernel.build_workload("empty")
    child = k.fork(k.tasks()[0], "child")
    k.exit_group(child.tg, 3)
    rows, _ = introspect.task_rows(k, 100)
    row = next(r for r in rows if r.tid == child.tid)
    assert row.state == TaskState.ZOMBIE.value
    assert row.exit_code is not None
    assert introspect.kernel_figures(k)["zombies"] == 1


def test_the_limit_bounds_the_rows_and_says_how_many_were_left_out() -> None:
    k = kernel.build_workload("nginx")
    rows, omitted = introspect.task_rows(k, 2)
    assert [r.tid for r in rows] == [1, 2]
    assert omitted == len(k.tasks()) - 2
    assert introspect.task_rows(k, -5) == ([], len(k.tasks()))


def test_a_shared_fd_table_counts_its_files_once() -> None:
    k = kernel.build_workload("http")
    before = introspect.kernel_figures(k)
    k.fork(k.tasks()[0], "sharer", share_files=True)
    after = introspect.kernel_figures(k)
    assert after["open_files"] == before["open_files"]
    assert after["sockets"] == before["sockets"] == 1
    assert after["tasks"] == before["tasks"] + 1


def test_a_forked_fd_table_shares_its_descriptions_and_counts_them_once() -> None:
    k = kernel.build_workload("http")
    before = introspect.kernel_figures(k)
    k.fork(k.tasks()[0], "copy")
    assert introspect.kernel_figures(k)["open_files"] == before["open_files"]


def test_counters_count_sockets_timers_and_pages() -> None:
    figures = introspect.kernel_figures(kernel.build_workload("nginx"))
    assert figures["sockets"] >= 5 and figures["timers"] >= 1
    assert figures["pages_allocated"] > 0
    assert figures["processes"] == figures["tasks"] == 5


class _Host:
    """What the handlers read of ``process.Host``."""

    def __init__(self, k: object) -> None:
        self.id = "x"
        self.cond = threading.Condition()
        self.kernel = k
        self.frozen = False


def test_the_handlers_reply_with_their_verbs_types() -> None:
    host = _Host(kernel.build_workload("http"))
    handlers = introspect.handlers(host)
    assert set(handlers) == introspect.VERBS
    tasks = handlers["tasks"](p.TasksRequest())
    assert isinstance(tasks, p.TasksReply) and tasks.tasks[0].comm == "http-server"
    counters = handlers["counters"](p.CountersRequest())
    assert isinstance(counters, p.CountersReply) and counters.booted and counters.sockets == 1
    for request, reply in ((p.TasksRequest(), tasks), (p.CountersRequest(), counters)):
        env = p.decode_envelope(p.ok(reply))
        assert p.decode_reply(request, env.result) == reply


def test_a_sandbox_without_a_kernel_says_so() -> None:
    import pytest

    from ckpt.errors import SandboxError

    host = _Host(None)
    with pytest.raises(SandboxError, match="no kernel yet"):
        introspect.tasks_reply(host, p.TasksRequest())
    reply = introspect.counters_reply(host, p.CountersRequest())
    assert not reply.booted and reply.tasks == 0
