"""Workloads: names, options, determinism, shape, and the http workload's contract."""

from __future__ import annotations

import pytest

from ckpt import kernel, state
from ckpt.errors import KernelError
from ckpt.kernel.programs import NginxWorker
from ckpt.kernel.task import TaskState

MS = 1_000_000


@pytest.mark.parametrize("name", ["bogus", "files", "files:x", "empty:3"])
def test_bad_workload_names_are_kernel_errors_listing_valid_names(name):
    with pytest.raises(KernelError) as exc:
        kernel.build_workload(name)
    assert "files" in str(exc.value)


@pytest.mark.parametrize("name", ["graph:0", "files:-1"])
def test_out_of_range_counts_are_kernel_errors(name):
    with pytest.raises(KernelError, match="N"):
        kernel.build_workload(name)


def test_unknown_option_names_the_accepted_ones():
    with pytest.raises(KernelError, match="workers"):
        kernel.build_workload("nginx", color="blue")


def test_workloads_constant_lists_the_names():
    assert kernel.WORKLOADS == (
        "empty",
        "http",
        "nginx",
        "files:N",
        "graph:N",
        "memory:N",
        "memory:N@RATE",
        "kv:N",
    )


def test_same_seed_builds_the_same_kernel_and_another_seed_does_not():
    a = kernel.build_workload("graph:60", seed=3)
    b = kernel.build_workload("graph:60", seed=3)
    c = kernel.build_workload("graph:60", seed=4)
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_fingerprint_changes_when_visible_state_changes():
    k = kernel.build_workload("empty", rootfs="minimal")
    before = k.fingerprint()
    fd = k.open(k.init, "/tmp/visible", 0o102)  # O_RDWR | O_CREAT
    k.write(k.init, fd, b"x")
    after_write = k.fingerprint()
    k.run_for(1)
    assert before != after_write != k.fingerprint()


def test_nginx_shape_master_workers_mutex_logs_memory():
    k = kernel.build_workload("nginx")
    master = k.init
    workers = [t for t in k.tasks() if t.parent is master]
    assert len(workers) == 4 and all(t.comm == "nginx" for t in workers)
    holders = [w for w in workers if w.program.holds_mutex]
    assert len(holders) == 1
    lock_file = master.fd_table.get(workers[0].program.lock_fd).file
    assert lock_file.inode.nlink == 0  # nginx unlinks the accept-mutex file
    assert (
        k.fcntl_lock(
            master, workers[0].program.lock_fd, kernel.LockCmd.GETLK, kernel.LockType.WRITE
        )[3]
        == holders[0].tgid
    )
    frames, nonzero, _ = k.memory_file.usage()
    assert frames * 4096 > 3 << 20 and 0 < nonzero < frames
    pages = dict(k.memory_file.pages())
    assert any(p == bytes(4096) for p in pages.values())
    # Workers share the listener description with the master.
    listener = master.fd_table.get(3).file
    assert all(w.fd_table.get(3).file is listener for w in workers)
    assert "nginx" in k.describe()


def test_nginx_state_is_a_few_hundred_kib_of_thousands_of_objects():
    k = kernel.build_workload("nginx")
    data = state.dumps(k, engine="reflect")
    view = state.inspect_stream(data)
    objects = sum(t.count for t in view.types)
    assert objects > 2500
    assert len(data) > 150 * 1024
    lock_sets = {t.name: t.count for t in view.types}
    inodes = lock_sets["ckpt.kernel.vfs.Inode"]
    assert lock_sets.get("ckpt.kernel.locks.FileLocks", 0) < inodes / 100  # lazy lock sets


def test_idle_nginx_workers_retry_the_mutex_and_tick():
    k = kernel.build_workload("nginx")
    k.run_for(1000 * MS)
    workers = [t for t in k.tasks() if isinstance(t.program, NginxWorker)]
    assert all(w.program.timer_ticks >= 9 for w in workers)
    assert sum(w.program.holds_mutex for w in workers) == 1
    assert all(w.state is TaskState.SLEEPING for w in workers)


def test_http_counts_requests_and_restores_in_kernel_state():
    k = kernel.build_workload("http", id="sb-1")
    assert k.http_listen_address() is None  # the sandbox has not bound yet
    k.set_http_listen_address("127.0.0.1", 43123)
    assert k.http_listen_address() == ("127.0.0.1", 43123)
    status, body = k.http_request("GET", "/")
    assert status == 200 and body["id"] == "sb-1" and body["requests"] == 1
    status, body = k.http_request("DELETE", "/x")
    assert status == 405 and body["requests"] == 1
    k.note_restored()
    _, body = k.http_request("GET", "/again")
    assert (body["requests"], body["restores"]) == (2, 1)
    log = k.http.access_log
    assert b'"GET /again" 200' in log.inode.read(k.memory_file, 0, 4096)
    with pytest.raises(KernelError):
        k.set_http_listen_address("127.0.0.1", 0)


def test_http_only_workload_serves_http():
    k = kernel.build_workload("empty", rootfs="minimal")
    with pytest.raises(KernelError, match="http"):
        k.http_request("GET", "/")
    assert k.http_listen_address() is None


def test_files_workload_has_live_fds_and_some_locks():
    k = kernel.build_workload("files:300")
    entries = k.init.fd_table.entries
    assert len(entries) == 303
    locked = [e for e in entries.values() if getattr(e.file, "inode", None) and e.file.inode.locks]
    assert 30 <= len(locked) < 300
