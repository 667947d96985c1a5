"""Files: offsets, dup, cloexec, shared fd tables, pipes, FIFOs, unlinked files, sockets."""

from __future__ import annotations

import errno

import pytest

from ckpt.errors import SyscallError
from ckpt.kernel.vfs import O_APPEND, O_CLOEXEC, O_CREAT, O_RDONLY, O_RDWR, O_WRONLY

from .conftest import blank_kernel, checkpoint, open_rw, resume_same_instant


def test_dup_shares_the_offset_and_open_does_not():
    k, init = blank_kernel()
    fd = open_rw(k, init, "/tmp/f")
    k.write(init, fd, b"hello world")
    dup = k.dup(init, fd)
    other = k.open(init, "/tmp/f", O_RDONLY)
    k.lseek(init, fd, 6)
    assert k.read(init, dup, 5) == b"world"
    assert k.read(init, other, 5) == b"hello"


def test_append_writes_at_the_end_whatever_the_offset():
    k, init = blank_kernel()
    fd = k.open(init, "/tmp/log", O_WRONLY | O_CREAT | O_APPEND)
    k.write(init, fd, b"a")
    k.lseek(init, fd, 0)
    k.write(init, fd, b"b")
    rd = k.open(init, "/tmp/log", O_RDONLY)
    assert k.read(init, rd, 10) == b"ab"


def test_files_larger_than_a_page_and_holes_read_back():
    k, init = blank_kernel()
    fd = open_rw(k, init, "/tmp/big")
    k.lseek(init, fd, 10_000)
    k.write(init, fd, b"x" * 5000)
    k.lseek(init, fd, 0)
    data = k.read(init, fd, 20_000)
    assert data == bytes(10_000) + b"x" * 5000


def test_cloexec_fds_close_on_exec_and_others_survive():
    k, init = blank_kernel()
    child = k.fork(init)
    keep = k.open(child, "/etc/hostname", O_RDONLY)
    gone = k.open(child, "/etc/passwd", O_RDONLY | O_CLOEXEC)
    k.execve(child, "sh")
    assert keep in child.fd_table.entries and gone not in child.fd_table.entries


def test_shared_fd_table_sees_opens_and_closes_of_the_other_task():
    k, init = blank_kernel()
    a = k.fork(init, "a")
    b = k.fork(a, "b", share_files=True)
    fd = k.open(a, "/etc/hostname", O_RDONLY)
    assert k.read(b, fd, 7) == b"sandbox"
    k.close(b, fd)
    with pytest.raises(SyscallError):
        k.read(a, fd, 1)


def test_dup2_replaces_and_bad_fds_are_ebadf():
    k, init = blank_kernel()
    fd = open_rw(k, init, "/tmp/x")
    assert k.dup2(init, fd, 2) == 2
    k.write(init, 2, b"err")
    with pytest.raises(SyscallError) as exc:
        k.close(init, 99)
    assert exc.value.errno == errno.EBADF


def test_pipe_data_and_end_of_file():
    k, init = blank_kernel()
    r, w = k.pipe(init)
    k.write(init, w, b"abc")
    assert k.read(init, r, 2) == b"ab"
    k.close(init, w)
    assert k.read(init, r, 10) == b"c"
    assert k.read(init, r, 10) == b""


def test_pipe_without_reader_is_epipe_and_full_pipe_is_eagain():
    k, init = blank_kernel()
    r, w = k.pipe(init)
    assert k.write(init, w, b"x" * 70_000) == 65536
    with pytest.raises(SyscallError) as exc:
        k.write(init, w, b"y")
    assert exc.value.errno == errno.EAGAIN
    k.close(init, r)
    with pytest.raises(SyscallError) as exc:
        k.write(init, w, b"y")
    assert exc.value.errno == errno.EPIPE


def test_pipe_and_fifo_data_and_shared_ends_survive_restore(engine):
    k, init = blank_kernel()
    r, w = k.pipe(init)
    k.write(init, w, b"buffered in the pipe")
    child = k.fork(init)  # both processes hold both ends
    k.mkfifo(init, "/tmp/fifo")
    fr = k.open(init, "/tmp/fifo", O_RDONLY)
    fw = k.open(child, "/tmp/fifo", O_WRONLY)
    k.write(child, fw, b"fifo bytes")
    rk, _ = checkpoint(k, engine)
    resume_same_instant(rk)
    ri, rc = rk.task(init.tid), rk.task(child.tid)
    assert rk.read(rc, r, 11) == b"buffered in"  # the child reads what the parent wrote
    assert rk.read(ri, r, 100) == b" the pipe"
    assert rk.read(ri, fr, 100) == b"fifo bytes"
    assert ri.fd_table.get(r).file is rc.fd_table.get(r).file
    # Both writers must close before the reader sees end of file.
    rk.close(ri, w)
    with pytest.raises(SyscallError):
        rk.read(ri, r, 1)
    rk.close(rc, w)
    assert rk.read(ri, r, 1) == b""


def test_unlinked_open_file_keeps_data_and_offset_across_restore(engine):
    k, init = blank_kernel()
    fd = open_rw(k, init, "/tmp/secret")
    k.write(init, fd, b"still here after unlink")
    k.lseek(init, fd, 6)
    k.unlink(init, "/tmp/secret")
    with pytest.raises(SyscallError):
        k.vfs.lookup("/tmp/secret")
    rk, _ = checkpoint(k, engine)
    resume_same_instant(rk)
    ri = rk.task(init.tid)
    entry = ri.fd_table.get(fd)
    assert rk.vfs.path_of(entry.file.dentry) == "/tmp/secret (deleted)"
    assert entry.file.inode.nlink == 0
    assert rk.read(ri, fd, 100) == b"here after unlink"
    frames_before = len(rk.memory_file.refs)
    rk.close(ri, fd)
    assert len(rk.memory_file.refs) == frames_before - 1  # last close frees the data


def test_offsets_cloexec_and_shared_tables_survive_restore(engine):
    k, init = blank_kernel()
    a = k.fork(init, "a")
    b = k.fork(a, "b", share_files=True)
    fd = k.open(a, "/etc/passwd", O_RDONLY | O_CLOEXEC)
    k.read(a, fd, 5)
    dup = k.dup(a, fd)
    rk, _ = checkpoint(k, engine)
    resume_same_instant(rk)
    ra, rb = rk.task(a.tid), rk.task(b.tid)
    assert ra.fd_table is rb.fd_table and ra.fd_table.users == 2
    assert ra.fd_table.get(fd).cloexec and not ra.fd_table.get(dup).cloexec
    assert rk.read(rb, dup, 4) == b"x:0:"  # shares the offset with fd
    new = rk.open(ra, "/etc/hostname", O_RDONLY)
    assert new in rb.fd_table.entries


def test_sockets_keep_buffered_data_and_listeners_accept_after_restore(engine):
    k, init = blank_kernel()
    s1, s2 = k.socketpair(init)
    k.write(init, s1, b"over the pair")
    lst = k.socket_tcp(init)
    k.bind(init, lst, "127.0.0.1", 8080)
    k.listen(init, lst, 4)
    cli = k.socket_tcp(init)
    k.connect(init, cli, "127.0.0.1", 8080)
    k.write(init, cli, b"GET /")
    rk, _ = checkpoint(k, engine)
    resume_same_instant(rk)
    ri = rk.task(init.tid)
    assert rk.read(ri, s2, 100) == b"over the pair"
    conn = rk.accept(ri, lst)
    assert rk.read(ri, conn, 100) == b"GET /"
    rk.write(ri, conn, b"200 OK")
    assert rk.read(ri, cli, 100) == b"200 OK"
    with pytest.raises(SyscallError):
        rk.bind(ri, rk.socket_tcp(ri), "127.0.0.1", 8080)


def test_directories_list_and_reject_writes():
    k, init = blank_kernel()
    d = k.open(init, "/etc", O_RDONLY)
    names = k.getdents(init, d, 1000)
    assert "passwd" in names and names == sorted(names)
    with pytest.raises(SyscallError):
        k.open(init, "/etc", O_RDWR)


def test_symlinks_resolve_and_loops_fail():
    k, _ = blank_kernel()
    assert k.vfs.lookup("/bin/sh").inode is k.vfs.lookup("/usr/bin/sh").inode
    k.vfs.symlink("/tmp/loop", "/tmp/loop")
    with pytest.raises(SyscallError) as exc:
        k.vfs.lookup("/tmp/loop")
    assert exc.value.errno == errno.ELOOP


def test_character_devices_discard_give_zeros_and_fill_up():
    k, init = blank_kernel()
    null = k.open(init, "/dev/null", O_RDWR)
    assert k.write(init, null, b"gone") == 4 and k.read(init, null, 10) == b""
    assert k.vfs.lookup("/dev/null").inode.size == 0
    assert k.read(init, k.open(init, "/dev/zero", O_RDONLY), 5) == bytes(5)
    rnd = k.open(init, "/dev/urandom", O_RDONLY)
    a, b = k.read(init, rnd, 16), k.read(init, rnd, 16)
    assert len(a) == 16 and a != b
    with pytest.raises(SyscallError) as exc:
        k.write(init, k.open(init, "/dev/full", O_WRONLY), b"x")
    assert exc.value.errno == errno.ENOSPC
