"""Workloads: kernels built in a known state, selectable by name.

``empty`` a pause process; ``http`` a small HTTP server whose listening socket the
sandbox serves for real; ``nginx`` a master and 4 idle workers sharing the listener, an
accept-mutex lock file held through FileLocks, logs, timers and several MiB of memory;
``files:N`` N open regular files, some locked (an object-heavy case);
``graph:N`` a random process/file/lock/timer graph for tests; ``memory:N`` an HTTP
server holding N MiB of dirty anonymous memory (zero, text-like and incompressible
pages, see ``memfill``) whose ``GET /memory`` returns its digest; ``memory:N@RATE``
the same with a thread rewriting RATE bytes of it a second (``memwriter``); ``kv:N``
the same server keeping the values of ``PUT /kv/KEY`` in those N MiB.  Everything is derived from
``seed``, so two builds with the same options are identical (same fingerprint).

Why one file: every workload is a recipe of system calls on a fresh kernel
built from the same few helpers (``new_kernel``, ``std_fds``, ``map_image``,
``_serve_http``), and ``graph:N``'s steps (``_g_*``) are a table that ``build_graph``
draws from.  ``build_workload`` names them all, so split by workload, each part would
import the same helpers and the registry would import every part back; read side by
side, the recipes show what each workload adds to the others.
"""

from __future__ import annotations

import contextlib
import inspect
import random
from collections.abc import Callable
from typing import Any

from ckpt.errors import KernelError, SyscallError
from ckpt.kernel import memfill, memwriter
from ckpt.kernel.clock import CLOCK_MONOTONIC, CLOCK_REALTIME
from ckpt.kernel.kernel import LOCK_EX, LOCK_SH, HttpService, Kernel, LockCmd
from ckpt.kernel.locks import LockType
from ckpt.kernel.mm import PROT_EXEC, PROT_NONE, PROT_READ, PROT_WRITE, VMA, MapKind
from ckpt.kernel.net import TCPSocket
from ckpt.kernel.programs import (
    KvServer,
    MemoryServer,
    NginxMaster,
    NginxWorker,
    SignalCounter,
)
from ckpt.kernel.rootfs import build_rootfs, page_bytes, page_cache
from ckpt.kernel.task import (
    SIG_IGN,
    SIGALRM,
    SIGCHLD,
    SIGCONT,
    SIGHUP,
    SIGINT,
    SIGIO,
    SIGPIPE,
    SIGQUIT,
    SIGSTOP,
    SIGTERM,
    SIGUSR1,
    SIGUSR2,
    SIGWINCH,
    Credentials,
    Program,
    Task,
)
from ckpt.kernel.timers import ITIMER_REAL
from ckpt.kernel.vfs import (
    O_APPEND,
    O_CLOEXEC,
    O_CREAT,
    O_RDONLY,
    O_RDWR,
    O_WRONLY,
    RegularFD,
)

MS = 1_000_000
WORKLOADS = (
    "empty",
    "http",
    "nginx",
    "files:N",
    "graph:N",
    "memory:N",
    "memory:N@RATE",
    "kv:N",
)
MEMORY_MAX_MIB = 16384
NGINX_WORKERS = 4


# -- building blocks ----------------------------------------------------------------------
def new_kernel(
    workload: str, seed: int, boot_id: str | None = None, rootfs: str = "full"
) -> tuple[Kernel, random.Random]:
    """A kernel with its root filesystem; ``rootfs`` "minimal" skips the cold bulk."""
    if rootfs not in ("full", "minimal"):
        raise KernelError(f"rootfs must be 'full' or 'minimal', not {rootfs!r}")
    rng = random.Random(seed)
    k = Kernel(workload, boot_id or f"{rng.getrandbits(64):016x}")
    k.rng_state = rng.getrandbits(64) | 1
    build_rootfs(k, rng, minimal=rootfs == "minimal")
    return k, rng


def std_fds(k: Kernel, task: Task) -> None:
    for flags in (O_RDONLY, O_WRONLY, O_WRONLY):
        k.open(task, "/dev/null", flags)


def map_image(
    k: Kernel,
    task: Task,
    binary: str,
    libs: list[str],
    rng: random.Random,
    *,
    heap_pages: int,
    zero_every: int = 0,
) -> None:
    """Map an executable, its libraries, heap, stack and vdso, and touch the heap."""
    mm = task.tg.mm
    assert mm is not None
    fd = k.open(task, binary, O_RDONLY | O_CLOEXEC)
    size = k.vfs.lookup(binary).inode.size
    text = max(4096, size // 2 // 4096 * 4096)
    base = 0x0040_0000
    k.mmap(task, text, PROT_READ | PROT_EXEC, MapKind.FILE_PRIVATE, fd=fd, addr=base)
    k.mmap(task, 4096 * 4, PROT_READ, MapKind.FILE_PRIVATE, fd=fd, offset=text, addr=base + text)
    data_at = base + text + 4096 * 4
    k.mmap(
        task,
        4096 * 2,
        PROT_READ | PROT_WRITE,
        MapKind.FILE_PRIVATE,
        fd=fd,
        offset=text,
        addr=data_at,
    )
    k.close(task, fd)
    mm.brk_start = mm.brk = data_at + 4096 * 16
    for lib in libs:
        path = "/usr/lib/x86_64-linux-gnu/" + lib
        lfd = k.open(task, path, O_RDONLY | O_CLOEXEC)
        lsize = max(8 * 4096, k.vfs.lookup(path).inode.size // 4096 * 4096)
        code = lsize // 2 // 4096 * 4096
        at = k.mmap(task, lsize + 4096 * 3, PROT_NONE, name=path)
        k.mmap(task, code, PROT_READ | PROT_EXEC, MapKind.FILE_PRIVATE, fd=lfd, addr=at)
        k.mmap(task, 4096 * 2, PROT_NONE, addr=at + code, name=path)
        k.mmap(
            task, 4096, PROT_READ, MapKind.FILE_PRIVATE, fd=lfd, offset=code, addr=at + code + 8192
        )
        k.mmap(
            task,
            4096,
            PROT_READ | PROT_WRITE,
            MapKind.FILE_PRIVATE,
            fd=lfd,
            offset=code + 4096,
            addr=at + code + 12288,
        )
        k.mem_write(task, at + code + 12288, rng.randbytes(64))  # relocations: COW copy
        k.munmap(task, at + code + 16384, lsize + 4096 * 3 - code - 16384)
        k.close(task, lfd)
    stack_top = 0x7FFF_FFFF_0000 - rng.randrange(1, 256) * 4096
    stack = k.mmap(
        task, 8 << 20, PROT_READ | PROT_WRITE, addr=stack_top - (8 << 20), name="[stack]"
    )
    for i in range(1, 5):
        k.mem_write(task, stack + (8 << 20) - i * 4096, page_bytes(rng)[:2048])
    k.mmap(task, 4096 * 2, PROT_READ, name="[vvar]")
    k.mmap(task, 4096 * 2, PROT_READ | PROT_EXEC, name="[vdso]")
    if heap_pages:
        mm.set_brk(mm.brk_start + heap_pages * 4096)
        for i in range(heap_pages):
            addr = mm.brk_start + i * 4096
            if zero_every and i % zero_every == 0:
                k.mem_write(task, addr, bytes(4096))  # touched, still zero
            else:
                k.mem_write(task, addr, page_bytes(rng))
    task.regs.rip = base + rng.randrange(0, text, 16)
    task.regs.rsp = stack + (8 << 20) - 4096 + rng.randrange(0, 2048, 16)
    task.regs.rbp = task.regs.rsp + 64
    task.regs.fs_base = 0x7F00_0000_0000 + rng.randrange(1 << 20) * 16
    task.regs.orig_rax = 232  # epoll_wait / pause: sleeping in a system call
    fp = bytearray(task.fpstate)
    fp[160:288] = rng.randbytes(128)  # some XMM registers in use
    task.fpstate = bytes(fp)
    task.robust_list = task.regs.fs_base + 0x2E0
    task.rseq_addr, task.rseq_signature = task.regs.fs_base + 0x8A0, 0x53053053
    task.tg.exe = binary
    mm.executable = k.vfs.lookup(binary).inode
    mm.argv = (stack + (8 << 20) - 512, stack + (8 << 20) - 480)
    mm.envp = (mm.argv[1], stack + (8 << 20) - 64)
    mm.auxv = [
        (3, base + 64),
        (4, 56),
        (5, 13),
        (6, 4096),
        (7, 0x7F00_0000_0000),
        (9, base + 0x1040),
    ]
    mm.auxv += [
        (11, 0),
        (12, 0),
        (13, 0),
        (14, 0),
        (16, 0x178BFBFF),
        (17, 100),
        (23, 0),
        (25, stack),
    ]
    mm.auxv += [(26, 0x2), (31, mm.argv[0]), (33, 0x7FFF_F7FF_D000), (0, 0)]
    task.regs.rax = (1 << 64) - 4  # -EINTR, as a restarted syscall shows


# -- workloads ------------------------------------------------------------------------------
def build_empty(seed: int = 0, id: str | None = None, rootfs: str = "full") -> Kernel:
    """A pause container: pid 1 sleeping forever with a tiny address space."""
    k, rng = new_kernel("empty", seed, id, rootfs)
    init = k.spawn_init("pause")
    init.program = Program()
    std_fds(k, init)
    page_cache(k, "/usr/lib/x86_64-linux-gnu/libc.so.6", rng, 0.05)
    map_image(k, init, "/usr/sbin/init", ["libc.so.6"], rng, heap_pages=4)
    return k


def build_http(seed: int = 0, id: str | None = None, rootfs: str = "full") -> Kernel:
    """One server process: a listening socket (address set by the sandbox), config,
    content and an access log open, request and restore counters in kernel state."""
    k, rng = new_kernel("http", seed, id, rootfs)
    init = k.spawn_init("http-server")
    init.program = Program()
    std_fds(k, init)
    page_cache(k, "/usr/lib/x86_64-linux-gnu/libc.so.6", rng, 0.1)
    map_image(k, init, "/usr/bin/sh", ["libc.so.6", "libz.so.1"], rng, heap_pages=48, zero_every=6)
    sock_fd = k.socket_tcp(init)
    k.bind(init, sock_fd, "127.0.0.1", 0)
    k.listen(init, sock_fd, 128)
    k.open(init, "/etc/http/server.conf", O_RDONLY | O_CLOEXEC)
    k.open(init, "/srv/www/index.html", O_RDONLY | O_CLOEXEC)
    log_fd = k.open(init, "/var/log/http/access.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC)
    for signo in (SIGTERM, SIGINT, SIGHUP):
        k.sigaction(init, signo, 0x41_2000 + signo * 16)
    k.sigaction(init, SIGPIPE, SIG_IGN)
    _serve_http(k, init, sock_fd, log_fd)
    return k


def build_nginx(
    seed: int = 0, id: str | None = None, workers: int = NGINX_WORKERS, rootfs: str = "full"
) -> Kernel:
    """nginx: master and workers, listener, unlinked accept-mutex lock file, logs, timers."""
    if not 1 <= workers <= 64:
        raise KernelError(f"nginx workers must be 1-64, not {workers}")
    k, rng = new_kernel("nginx", seed, id, rootfs)
    init = k.spawn_init("nginx")
    init.program = NginxMaster()
    std_fds(k, init)
    libs = [
        "libc.so.6",
        "libcrypt.so.1",
        "libpcre2-8.so.0",
        "libssl.so.3",
        "libcrypto.so.3",
        "libz.so.1",
    ]
    for lib in libs:
        page_cache(k, "/usr/lib/x86_64-linux-gnu/" + lib, rng, 0.35)
    page_cache(k, "/usr/sbin/nginx", rng, 0.5)
    map_image(k, init, "/usr/sbin/nginx", libs, rng, heap_pages=320, zero_every=5)
    master_handlers = (
        SIGCHLD,
        SIGHUP,
        SIGUSR1,
        SIGUSR2,
        SIGWINCH,
        SIGTERM,
        SIGQUIT,
        SIGINT,
        SIGIO,
        SIGALRM,
    )
    for signo in master_handlers:
        k.sigaction(init, signo, 0x45_0000 + signo * 32, flags=0x4000000, mask=0)
    k.sigaction(init, SIGPIPE, SIG_IGN)
    listen_fd = k.socket_tcp(init)
    k.bind(init, listen_fd, "0.0.0.0", 80)
    k.listen(init, listen_fd, 511)
    access = k.open(init, "/var/log/nginx/access.log", O_WRONLY | O_CREAT | O_APPEND)
    error = k.open(init, "/var/log/nginx/error.log", O_WRONLY | O_CREAT | O_APPEND)
    k.write(init, error, b'2026/11/29 00:00:00 [notice] 1#1: using the "epoll" event method\n')
    k.dup2(init, error, 2)
    pid = k.open(init, "/run/nginx.pid", O_WRONLY | O_CREAT | O_CLOEXEC)
    k.write(init, pid, b"1\n")
    k.close(init, pid)
    lock_fd = k.open(init, "/var/lock/nginx.lock.accept", O_RDWR | O_CREAT)
    k.unlink(init, "/var/lock/nginx.lock.accept")  # nginx unlinks it at once
    shm = k.mmap(
        init, 32 * 4096, PROT_READ | PROT_WRITE, MapKind.ANON_SHARED, name="/dev/zero (deleted)"
    )
    for i in range(8):
        k.mem_write(init, shm + i * 4096, page_bytes(rng)[:512])
    channels = []
    for _ in range(workers):
        channels.append(k.socketpair(init))
    for n in range(workers):
        w = k.fork(init, "nginx")
        w.creds = Credentials(101, 101, 101, 101, 101, 101, 101, 101, (101,), 0, 0, 0, 0)
        w.program = NginxWorker(lock_fd=lock_fd, delay_ns=500 * MS, wake_ns=k.now + (n + 1) * MS)
        for i, (a, b) in enumerate(channels):
            k.close(w, a if i == n else b) if i == n else (k.close(w, a), k.close(w, b))
        ep = k.epoll_create(w)
        k.epoll_ctl_add(w, ep, listen_fd)
        k.epoll_ctl_add(w, ep, channels[n][1])
        for signo in master_handlers:
            k.sigaction(w, signo, 0x46_0000 + signo * 32)
        k.setitimer(w, ITIMER_REAL, 100 * MS + n * 7 * MS, 100 * MS)
        heap = w.tg.mm.brk_start if w.tg.mm else 0
        for i in range(0, 40, 5):  # each worker dirties part of the inherited heap (COW)
            k.mem_write(w, heap + i * 4096, page_bytes(rng))
        k.mmap(w, 16 * 4096, PROT_READ | PROT_WRITE, name="")
        k.mem_write(w, k.mmap(w, 64 * 4096, PROT_READ | PROT_WRITE), page_bytes(rng) * 8)
    for _, b in channels:
        k.close(init, b)
    k.write(init, access, b"")
    k.run_for(50 * MS)  # workers start, one takes the accept mutex
    return k


def build_files(n: int, seed: int = 0, id: str | None = None, rootfs: str = "full") -> Kernel:
    """``n`` open regular files with live fds; every 10th POSIX-locked, every 7th flock'd."""
    if not 0 <= n <= 1_000_000:
        raise KernelError(f"files:N needs 0 <= N <= 1000000, not {n}")
    k, rng = new_kernel(f"files:{n}", seed, id, rootfs)
    init = k.spawn_init("files")
    init.program = Program()
    std_fds(k, init)
    map_image(k, init, "/usr/bin/sh", ["libc.so.6"], rng, heap_pages=8)
    assert init.fd_table is not None
    init.fd_table.limit = n + 64
    init.tg.rlimits[7].cur = n + 64
    data = k.vfs.lookup("/data")
    for i in range(n):
        dentry = k.vfs.link_new(
            data, f"f{i:06d}", k.vfs.new_inode(k.vfs.root.inode.kind.REGULAR, 0o644, k.now)
        )
        fd = k.open(init, k.vfs.path_of(dentry), O_RDWR)
        if i % 50 == 0:
            k.write(init, fd, b"%06d\n" % i)
        if i % 10 == 0:
            k.fcntl_lock(init, fd, LockCmd.SETLK, LockType.WRITE, 0, 1 + i % 100)
        if i % 7 == 0:
            k.flock(init, fd, LOCK_SH if i % 2 else LOCK_EX)
    return k


def build_memory(
    n: int, seed: int = 0, id: str | None = None, rootfs: str = "minimal", *, rate: int = 0
) -> Kernel:
    """An HTTP server holding ``n`` MiB of dirty anonymous memory in one mapping.

    Served like ``http`` (same listener, counters and access log); ``GET /memory``
    answers with the SHA-256 of the whole mapping, so a restore can be verified.
    A ``rate`` (``memory:N@RATE``, bytes a second) adds a ``memwriter`` thread that
    rewrites that much of the mapping a second (``memwriter.PageWriter``).
    """
    return _build_memory_server("memory", n, seed, id, rootfs, rate)


def build_kv(n: int, seed: int = 0, id: str | None = None, rootfs: str = "minimal") -> Kernel:
    """A key-value server whose values live in ``n`` MiB of anonymous memory.

    Built as ``memory:N`` is (the same fill, listener and ``GET /memory`` digest of the
    whole arena); ``PUT /kv/KEY`` and ``GET /kv/KEY`` store and fetch values of up to
    64 KiB in that arena (``programs.KvServer``).
    """
    return _build_memory_server("kv", n, seed, id, rootfs)


def _build_memory_server(
    base: str, n: int, seed: int, id: str | None, rootfs: str, rate: int = 0
) -> Kernel:
    if not 1 <= n <= MEMORY_MAX_MIB:
        raise KernelError(f"{base}:N needs 1 <= N <= {MEMORY_MAX_MIB} (MiB), not {n}")
    name = f"{base}:{n}" + (f"@{memwriter.format_rate(rate)}" if rate else "")
    k, rng = new_kernel(name, seed, id, rootfs)
    init = k.spawn_init(f"{base}-server")
    npages = n << 8
    std_fds(k, init)
    map_image(k, init, "/usr/bin/sh", ["libc.so.6"], rng, heap_pages=8)
    addr = k.mmap(init, npages * 4096, PROT_READ | PROT_WRITE, name="[anon:data]")
    program = KvServer if base == "kv" else MemoryServer
    init.program = program(addr=addr, npages=npages)
    mm = init.tg.mm
    assert mm is not None
    for i, page in enumerate(memfill.pages(npages, rng)):
        mm.write(addr + i * 4096, page)
    sock_fd = k.socket_tcp(init)
    k.bind(init, sock_fd, "127.0.0.1", 0)
    k.listen(init, sock_fd, 128)
    log_fd = k.open(init, f"/var/log/{base}.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC)
    _serve_http(k, init, sock_fd, log_fd)
    if rate:
        writer = k.clone_thread(init, "memwriter")
        program = memwriter.PageWriter(
            addr=addr, npages=npages, rate=rate, seed=rng.getrandbits(62), last_ns=k.now
        )
        program.wake_ns = k.now + program.pace_ns()
        writer.program = program
    return k


# graph:N's timers, sized like a real program's (see build_graph): a thread group keeps
# at most this many POSIX timers, and periodic timers fire every few hundred ms to seconds.
GRAPH_TIMERS_PER_GROUP = 4
GRAPH_MAPPINGS_PER_GROUP = 32  # anonymous mappings; mm scans its mappings per call
GRAPH_TIMER_INTERVAL_MS = (100, 1000)  # randrange bounds for a periodic POSIX timer
GRAPH_ITIMER_INTERVAL_MS = (200, 2000)  # and for a periodic ITIMER_REAL


def _serve_http(k: Kernel, init: Task, sock_fd: int, log_fd: int) -> None:
    """Make ``init`` the workload's HTTP server: its listening socket and access log."""
    listener = k._file(init, sock_fd).sock  # type: ignore[attr-defined]
    assert isinstance(listener, TCPSocket)
    log = k._file(init, log_fd)
    assert isinstance(log, RegularFD)
    k.http = HttpService(k.boot_id, listener, init, log)


def build_graph(n: int, seed: int = 0, id: str | None = None, rootfs: str = "minimal") -> Kernel:
    """A random but deterministic kernel of about ``n`` operations, for tests.

    Each step picks a live, runnable task and one of ``GRAPH_OPS`` (fork, thread, files,
    pipes, FIFOs, unlink, locks (some blocking), timers, mappings, mprotect, munmap, dup,
    sockets, sessions, stop/continue, exit, running the clock).

    What it asks of the kernel grows linearly with ``n``, as a real program's does: a
    thread group holds at most ``GRAPH_TIMERS_PER_GROUP`` POSIX timers (it deletes its
    oldest with timer_delete before creating another) and ``GRAPH_MAPPINGS_PER_GROUP`` anonymous mappings (it
    unmaps one first), and periodic timers fire every 100 ms to 2 s, so neither boot
    nor an idle sandbox spends its time delivering signals.
    """
    if not 1 <= n <= 100_000:
        raise KernelError(f"graph:N needs 1 <= N <= 100000, not {n}")
    k, rng = new_kernel(f"graph:{n}", seed, id, rootfs)
    init = k.spawn_init("init")
    init.program = SignalCounter()
    std_fds(k, init)
    map_image(k, init, "/usr/bin/sh", ["libc.so.6"], rng, heap_pages=4)
    for signo in (SIGALRM, SIGUSR1, SIGCHLD):
        k.sigaction(init, signo, 0x40_1000 + signo * 16)
    live = [init]
    for step in range(n):
        ready = [t for t in live if t.runnable_or_idle()]
        if not ready:
            break
        task = rng.choice(ready)
        op = rng.choice(GRAPH_OPS)
        with contextlib.suppress(SyscallError):  # calls fail as on Linux (EAGAIN, EDEADLK)
            op(k, task, rng, live, step)
    return k


def _g_fork(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    if len(live) < 64:
        child = k.fork(task, f"p{step}", share_files=rng.random() < 0.2)
        child.program = rng.choice([Program(), SignalCounter()])
        live.append(child)


def _g_thread(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    if len(live) < 64:
        live.append(k.clone_thread(task, f"t{step}"))


def _g_file(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    flags = O_RDWR | O_CREAT | (O_CLOEXEC if rng.random() < 0.3 else 0)
    fd = k.open(task, f"/tmp/g{rng.randrange(40)}", flags)
    k.write(task, fd, rng.randbytes(rng.randrange(1, 6000)))
    if rng.random() < 0.2:
        k.unlink(task, k.vfs.path_of(k._file(task, fd).dentry))  # type: ignore[attr-defined]


def _g_pipe(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    _r, w = k.pipe(task)
    k.write(task, w, rng.randbytes(rng.randrange(1, 300)))


def _g_fifo(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    path = f"/tmp/fifo{step}"
    k.mkfifo(task, path)
    k.open(task, path, O_RDONLY)
    k.write(task, k.open(task, path, O_WRONLY), rng.randbytes(rng.randrange(1, 100)))


def _g_lock(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    fds = _regular_fds(task)
    if fds:
        kind = rng.choice([LockType.READ, LockType.WRITE])
        blocking = [LockCmd.SETLKW] if task.tgid != 1 else []  # init never sleeps on a lock
        cmd = rng.choice([LockCmd.SETLK, LockCmd.OFD_SETLK, *blocking])
        k.fcntl_lock(task, rng.choice(fds), cmd, kind, rng.randrange(1000), rng.randrange(500))


def _g_flock(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    fds = _regular_fds(task)
    if fds:
        block = task.tgid != 1 and rng.random() < 0.3
        k.flock(task, rng.choice(fds), rng.choice([LOCK_SH, LOCK_EX]), block=block)


def _g_timer(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    timers = task.tg.posix_timers
    if len(timers) >= GRAPH_TIMERS_PER_GROUP:
        k.timer_delete(task, min(timers))  # the oldest: ids only grow
    tid = k.timer_create(task, rng.choice([CLOCK_MONOTONIC, CLOCK_REALTIME]), SIGUSR1)
    interval = rng.randrange(*GRAPH_TIMER_INTERVAL_MS) * MS
    k.timer_settime(task, tid, rng.randrange(1, 50) * MS, rng.choice([0, interval]))


def _g_itimer(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    interval = rng.randrange(*GRAPH_ITIMER_INTERVAL_MS) * MS
    k.setitimer(task, ITIMER_REAL, rng.randrange(1, 30) * MS, rng.choice([0, interval]))


def _g_mmap(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    ours = _graph_mappings(task)
    while len(ours) >= GRAPH_MAPPINGS_PER_GROUP:  # a loop: mprotect below splits one in two
        gone = ours.pop(rng.randrange(len(ours)))
        k.munmap(task, gone.start, gone.end - gone.start)
    kind = rng.choice([MapKind.ANON_PRIVATE, MapKind.ANON_SHARED])
    addr = k.mmap(task, rng.randrange(1, 8) * 4096, PROT_READ | PROT_WRITE, kind)
    k.mem_write(task, addr, rng.randbytes(rng.randrange(1, 9000)))
    if rng.random() < 0.3:
        k.mprotect(task, addr, 4096, PROT_READ)


def _g_dup(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    fds = sorted(task.fd_table.entries) if task.fd_table else []
    if len(fds) > 3:
        k.dup(task, rng.choice(fds[3:]), cloexec=rng.random() < 0.5)


def _g_socket(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    a, _b = k.socketpair(task)
    k.write(task, a, rng.randbytes(rng.randrange(1, 200)))


def _g_session(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    if rng.random() < 0.5:
        k.setsid(task)
    else:
        k.setpgid(task)


def _g_stop(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    target = rng.choice(live)
    if target is not task and target.tgid != 1:
        k.kill(task, target.tgid, rng.choice([SIGSTOP, SIGCONT, SIGUSR1]))


def _g_exit(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    if task.tgid != 1 and rng.random() < 0.5:
        k.exit(task, rng.randrange(256))


def _g_run(k: Kernel, task: Task, rng: random.Random, live: list[Task], step: int) -> None:
    k.run_for(rng.randrange(1, 20) * MS)


GRAPH_OPS: list[Callable[[Kernel, Task, random.Random, list[Task], int], None]] = [
    _g_fork,
    _g_thread,
    _g_file,
    _g_file,
    _g_pipe,
    _g_fifo,
    _g_lock,
    _g_flock,
    _g_timer,
    _g_itimer,
    _g_mmap,
    _g_dup,
    _g_socket,
    _g_session,
    _g_stop,
    _g_exit,
    _g_run,
    _g_run,
]


def _graph_mappings(task: Task) -> list[VMA]:
    """The anonymous mappings ``_g_mmap`` made (not the image's heap, stack or vdso)."""
    mm = task.tg.mm
    if mm is None:
        return []
    return [
        v
        for v in mm.vmas
        if v.kind is MapKind.ANON_SHARED or (v.kind is MapKind.ANON_PRIVATE and not v.name)
    ]


def _regular_fds(task: Task) -> list[int]:
    if task.fd_table is None:
        return []
    return [
        fd
        for fd, e in task.fd_table.entries.items()
        if isinstance(e.file, RegularFD) and e.file.writable()
    ]


_BUILDERS: dict[str, Callable[..., Kernel]] = {
    "empty": build_empty,
    "http": build_http,
    "nginx": build_nginx,
}
_COUNTED: dict[str, Callable[..., Kernel]] = {
    "files": build_files,
    "graph": build_graph,
    "memory": build_memory,
    "kv": build_kv,
}


def build_workload(name: str, **options: Any) -> Kernel:
    """Build a workload by name (see ``WORKLOADS``); options: seed, id, rootfs, and per
    workload (nginx: workers)."""
    base, sep, count = name.partition(":")
    count, at, rate = count.partition("@")
    fixed: dict[str, Any] = {}
    if at:
        if base != "memory" or not sep:
            raise KernelError(f"workload {name!r}: only memory:N takes @RATE")
        fixed["rate"] = memwriter.parse_rate(rate)
    if base in _BUILDERS and not sep:
        builder, args = _BUILDERS[base], []
    elif base in _COUNTED and sep:
        try:
            n = int(count)
        except ValueError:
            raise KernelError(
                f"workload {name!r}: N must be an integer, as in {base}:100"
            ) from None
        builder, args = _COUNTED[base], [n]
    else:
        raise KernelError(f"unknown workload {name!r}; choose one of: {', '.join(WORKLOADS)}")
    accepted = [p for p in inspect.signature(builder).parameters if p not in ("n", "rate")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise KernelError(
            f"workload {base!r} has no option {', '.join(unknown)}; it takes {', '.join(accepted)}"
        )
    return builder(*args, **options, **fixed)
