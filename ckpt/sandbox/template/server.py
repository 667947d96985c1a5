"""The warm sandbox template: a long-lived process per root that forks sandboxes.

A cold sandbox is a new interpreter that imports the kernel, the state engine and the
statefile reader and builds every schema and generated function before it can load a
byte of an image: most of a restore's wall time, and four times more under a 0.25 CPU
quota.  The template does that work once, then forks a ready sandbox per request, as
Android's zygote and gVisor's warm-sandbox proposal do::

    ckpt run / restore ──sendmsg(JSON, SCM_RIGHTS: log, ready pipe, cgroup.procs…)──▶
        template (single-threaded, warm; never loads an image)
          │ fork
          ▼
        child: write "0" to each cgroup.procs (joins the sandbox's cgroup first),
               setsid (its own session), tell the template it joined, then
               fds 0/1/2 = /dev/null/log/log, everything else inherited closed,
                 random reseeded, GC back on; then the sandbox process proper
                 (``process.serve``) writes ``ready PID`` to the pipe

Requests are JSON lines on ``ROOT/template.sock`` (0600), answered only for peers of
our own uid (``SO_PEERCRED``); every field and every passed descriptor is checked before
anything is forked.  A request naming another code version is refused and the template
exits, so the client starts a fresh one.  The template exits by itself when its socket
is removed or replaced, or after ``CKPT_TEMPLATE_IDLE_S`` seconds (default 1800)
without a request.  Killing it never touches a sandbox: each runs in its own session
(a sandbox is the template's child, reaped by it, and reparented if it dies; one fork
rather than two, since a fork copies the warm template's page tables and costs time in
proportion to its size).

Every wait has a deadline: a forked child that has not joined its cgroup within
JOIN_TIMEOUT_S is killed and the spawn refused (below the client's reply timeout, so the
client hears a refusal and leaves the template, with any sockets it holds, alone); a
spawn whose reply cannot be sent (the client gave up) kills the child it made.
``template.json`` lists the IDs whose sockets are held, so a client that times out
knows not to kill a template that holds them.

Fault points (``ckpt/faults.py``), in the template's environment: ``spawn-reply-delay``
sleeps after a spawn's fork and before its reply, as a template slowed by a busy host
would; ``join-stall`` has the forked child sleep before it reports that it joined its
cgroup; ``hold-delay`` sleeps before acting on a ``hold`` whose descriptors it has
received; ``warm-delay`` sleeps before warming, as a template started on a loaded host
would.

Stdlib and ``ckpt`` only, no ``typing``: this module is on the cold path of the
template's own start.

Why one file: the template is one single-threaded server, and every handler (spawn,
hold, adopt, release, status) works on the same state: the listening socket, the
requests still arriving, the sockets held for sandboxes, the children to reap.  The
request checks (``checks.py``) are its security boundary, and the forked child's set-up
(``child.py``) is code the template never runs itself; both have their module.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import gc
import json
import os
import select
import selectors
import signal
import socket
import stat
import sys
import time

from ckpt import faults, settings
from ckpt.faults import Fault
from ckpt.sandbox.template.checks import (
    Refused,
    cgroup_mounts,
    check_spawn,
    checked_id,
    close_all,
    peer,
)
from ckpt.sandbox.template.child import become_sandbox
from ckpt.sandbox.wire import handover
from ckpt.sandbox.wire import template_proto as proto

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

POLL_S = 1.0
LOCK_WAIT_S = 5.0
REQUEST_TIMEOUT_S = 5.0
JOIN_TIMEOUT_S = 5.0  # below template_client.REPLY_TIMEOUT_S: see the module docstring
MAX_INCOMING = 64  # requests still arriving, read side by side; past it the oldest goes


def log(msg: str) -> None:
    now = time.time()
    stamp = f"{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d}"
    sys.stderr.write(f"{stamp} [template {os.getpid()}] {msg}\n")
    sys.stderr.flush()


# -- warming ---------------------------------------------------------------------------


def warm() -> dict[str, Any]:
    """Import and build everything a sandbox needs before its first request.

    Each workload is built and round-tripped through both engines, which builds the
    schema and both directions of generated code for every type a kernel holds, the
    msgspec encoders and the zstd contexts.  Nothing here starts a thread.
    """
    t0 = time.perf_counter_ns()
    from ckpt import kernel, state, statefile  # noqa: F401
    from ckpt.images import pagefeed  # noqa: F401  (post-copy: a restore fed its pages)
    from ckpt.sandbox.host import dump, http, process  # noqa: F401
    from ckpt.sandbox.wire import protocol, rpc, timings  # noqa: F401
    from ckpt.statefile import seal

    seal.preload()  # keyed and encrypted images: 40-90 ms no forked sandbox pays
    t_import = time.perf_counter_ns()
    for workload in proto.WARM_WORKLOADS:
        k = kernel.build_workload(workload)
        for engine in state.ENGINES:
            state.loads(state.dumps(k, engine=engine), engine=engine)
    cgroup_mounts()  # read mountinfo once, not per request
    gc.collect()
    t_end = time.perf_counter_ns()
    return {
        "import_ms": round((t_import - t0) / 1e6, 3),
        "build_ms": round((t_end - t_import) / 1e6, 3),
    }


# -- requests --------------------------------------------------------------------------


class PendingRequest:
    """A connection whose request line is still arriving.

    Every connection is read as its bytes come, beside all others, so a client that
    sends half a request (or a byte now and then) delays nobody: each has its own
    deadline, REQUEST_TIMEOUT_S for the whole request."""

    def __init__(self, conn: socket.socket, peer_pid: int) -> None:
        self.conn = conn
        self.peer_pid = peer_pid
        self.deadline = time.monotonic() + REQUEST_TIMEOUT_S
        self.buf = bytearray()
        self.fds: list[int] = []

    def read_some(self) -> bool:
        """Take what has arrived; True once the request line (or EOF) is in."""
        space = socket.CMSG_SPACE(proto.MAX_FDS * array.array("i").itemsize)
        try:
            data, ancdata, flags, _ = self.conn.recvmsg(65536, space)
        except (BlockingIOError, InterruptedError):
            return False
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                got = array.array("i")
                got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
                self.fds.extend(got)
        if flags & socket.MSG_CTRUNC:
            raise Refused("too many descriptors")
        self.buf += data
        if len(self.buf) > proto.MAX_REQUEST:
            raise Refused("request too large")
        return not data or self.buf.endswith(b"\n")

    def close(self) -> None:
        close_all(self.fds)
        self.fds = []
        self.conn.close()


class Template:
    """The serving loop on one thread: requests are read side by side as their bytes
    arrive, and each complete one is handled at once, one at a time."""

    def __init__(self, root: str, sock_path: str, version: str) -> None:
        self.root = root
        self.sock_path = sock_path
        self.version = version
        self.started = time.time()
        self.spawned = 0
        self.refused = 0
        self.warm_info: dict[str, Any] = {}
        self.idle_s = settings.current().template_idle_s
        self.last_request = time.monotonic()
        self.listener: socket.socket | None = None
        self.inode: tuple[int, int] | None = None
        self.running = True
        self.stale = False  # a newer ckpt asked: fork no more, exit once nothing is held
        self.held: dict[str, tuple[list[int], list[str], float]] = {}
        self.lent: dict[str, int] = {}  # sandbox ID -> pid of the restore using them
        self.after_send: list[str] = []
        self.lock_fd: int | None = None
        self.hold_s = settings.current().hold_timeout_s
        self.info: dict[str, Any] = {}  # template.json while serving
        self.reply_delay = faults.delay(Fault.SPAWN_REPLY_DELAY)
        self.hold_delay = faults.delay(Fault.HOLD_DELAY)

    def take_over(self) -> None:
        """Collect the held sockets of a stale template still serving our socket path."""
        try:
            reply, fds = proto.exchange(
                self.sock_path,
                {"op": "migrate"},
                timeout=REQUEST_TIMEOUT_S,
                max_fds=handover.MAX_SOCKETS,
            )
        except (OSError, ValueError):
            return  # nobody there, or not answering: nothing to take over
        held = (reply.get("result") or {}).get("held") if reply.get("ok") else None
        if not isinstance(held, list):
            close_all(fds)
            return
        at = 0
        for entry in held:
            kinds = entry.get("kinds") if isinstance(entry, dict) else None
            if not isinstance(kinds, list) or at + len(kinds) > len(fds):
                break
            self.held[str(entry.get("id"))] = (fds[at : at + len(kinds)], kinds, time.monotonic())
            at += len(kinds)
        close_all(fds[at:])
        if self.held:
            log(f"took over the sockets held for {', '.join(sorted(self.held))}")

    def bind(self) -> None:
        """Bind under a temporary name and rename into place: clients see a warm
        template or none."""
        tmp = f"{self.sock_path}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(tmp)
        finally:
            os.umask(old)
        sock.listen(64)
        os.replace(tmp, self.sock_path)
        st = os.stat(self.sock_path)
        self.inode = (st.st_dev, st.st_ino)
        self.listener = sock

    def still_ours(self) -> bool:
        if self.inode is None:
            return False
        try:
            st = os.stat(self.sock_path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.inode

    def serve(self) -> None:
        assert self.listener is not None
        self.listener.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ, None)
        incoming: dict[int, PendingRequest] = {}
        next_check = time.monotonic() + POLL_S
        try:
            while self.running:
                due = min([next_check, *(i.deadline for i in incoming.values())])
                for key, _ in sel.select(max(0.0, due - time.monotonic())):
                    if key.data is None:
                        self._accept(sel, incoming)
                    else:
                        self._readable(sel, incoming, key.data)
                    if not self.running:
                        return
                self._expire_incoming(sel, incoming)
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + POLL_S
                    if self._should_exit():
                        return
        finally:
            for inc in incoming.values():
                inc.close()
            sel.close()

    def _should_exit(self) -> bool:
        """The checks of a quiet moment: reap, expire holds, and whether to go."""
        self._reap()
        self._expire_holds()
        if not self.still_ours():
            log("socket removed or replaced: exiting")
            return True
        if self.stale and not self.held:
            log("a newer ckpt is in use and nothing is held: exiting")
            return True
        if time.monotonic() - self.last_request > self.idle_s and not self.held:
            log(f"idle for {self.idle_s:g} s: exiting")
            self.close()
            return True
        return False

    def _accept(self, sel: selectors.BaseSelector, incoming: dict[int, PendingRequest]) -> None:
        assert self.listener is not None
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log(f"accept failed: {exc}; exiting")
                self.running = False
                return
            self.last_request = time.monotonic()
            try:
                peer_pid, peer_uid = peer(conn)
                if peer_uid != os.getuid():
                    raise Refused("requests are accepted from this template's own user only")
            except Refused as exc:
                self._refuse(conn, exc)
                conn.close()
                continue
            except OSError:
                conn.close()
                continue
            if len(incoming) >= MAX_INCOMING:  # a flood: the oldest waiter goes
                oldest = min(incoming.values(), key=lambda i: i.deadline)
                self._refuse(
                    oldest.conn,
                    Refused(f"more than {MAX_INCOMING} requests arriving at once; try again"),
                )
                self._drop(sel, incoming, oldest)
            conn.setblocking(False)
            incoming[conn.fileno()] = inc = PendingRequest(conn, peer_pid)
            sel.register(conn, selectors.EVENT_READ, inc)

    def _readable(
        self, sel: selectors.BaseSelector, incoming: dict[int, PendingRequest], inc: PendingRequest
    ) -> None:
        try:
            complete = inc.read_some()
        except Refused as exc:
            complete = False
            self._refuse(inc.conn, exc)
            self._drop(sel, incoming, inc)
        except OSError as exc:
            complete = False
            log(f"request failed: {exc!r}")
            self._drop(sel, incoming, inc)
        if not complete:
            return
        sel.unregister(inc.conn)
        del incoming[inc.conn.fileno()]
        inc.conn.setblocking(True)
        inc.conn.settimeout(REQUEST_TIMEOUT_S)  # for the reply
        fds, inc.fds = inc.fds, []
        with inc.conn:
            self._handle(inc.conn, inc.peer_pid, bytes(inc.buf), fds)
        self._reap()
        self._expire_holds()  # steady traffic must not keep a hold alive

    def _expire_incoming(
        self, sel: selectors.BaseSelector, incoming: dict[int, PendingRequest]
    ) -> None:
        now = time.monotonic()
        for inc in [i for i in incoming.values() if i.deadline <= now]:
            self._refuse(
                inc.conn, Refused(f"the request did not arrive within {REQUEST_TIMEOUT_S:g} s")
            )
            self._drop(sel, incoming, inc)

    def _drop(
        self, sel: selectors.BaseSelector, incoming: dict[int, PendingRequest], inc: PendingRequest
    ) -> None:
        sel.unregister(inc.conn)
        del incoming[inc.conn.fileno()]
        inc.close()

    def _refuse(self, conn: socket.socket, exc: Refused) -> None:
        self.refused += 1
        log(f"refused: {exc}")
        with contextlib.suppress(OSError):
            conn.setblocking(False)  # a refusal is one small line: never wait to send it
        _send(conn, {"ok": False, "error": str(exc)})

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def _handle(self, conn: socket.socket, peer_pid: int, line: bytes, fds: list[int]) -> None:
        try:
            try:
                req = json.loads(line)
            except ValueError:
                raise Refused("request is not JSON") from None
            if not isinstance(req, dict):
                raise Refused("request is not a JSON object")
            op = req.get("op")
            send: list[int] = []
            if op == "spawn":
                if req.get("version") != self.version:
                    self._go_stale()
                    raise Refused(f"{proto.VERSION_MISMATCH}: template runs {self.version}")
                reply = self._spawn(check_spawn(req, fds, self.root), conn)
            elif op == "status":
                reply = self.status()
            elif op == "stop":
                self.running = False
                reply = {"stopping": True}
            elif op == "hold":
                if self.hold_delay:
                    log(f"hold: delaying {self.hold_delay:g} s (CKPT_FAULT)")
                    time.sleep(self.hold_delay)
                reply = self._hold(req, fds)
                fds = []  # kept, not closed
            elif op == "adopt":
                reply, send = self._adopt(req, peer_pid)
            elif op == "migrate":
                reply, send = self._migrate()
            elif op == "release":
                reply = {"released": self._release(checked_id(req))}
            else:
                raise Refused(f"unknown op {op!r}")
            if op == "spawn" and self.reply_delay:
                log(f"spawn: delaying the reply {self.reply_delay:g} s (CKPT_FAULT)")
                time.sleep(self.reply_delay)
            if not _send(conn, {"ok": True, "result": reply}, send) and op == "spawn":
                # the client gave up waiting and starts the sandbox another way: the
                # child we forked for it is nobody's, so it goes
                log(f"spawn: the client left before the reply; killing pid {reply['pid']}")
                with contextlib.suppress(OSError):
                    os.kill(reply["pid"], signal.SIGKILL)
            for sandbox_id in self.after_send:
                self._release(sandbox_id)
            self.after_send = []
        except Refused as exc:
            self._refuse(conn, exc)
        except (OSError, TimeoutError) as exc:
            log(f"request failed: {exc!r}")
        finally:
            close_all(fds)
        if self.stale and not self.held:
            self.running = False
        if not self.running:
            self.close()

    # -- sockets held between a checkpoint and its restore (see wire/handover.py) --------

    def _hold(self, req: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        sandbox_id = checked_id(req)
        kinds = req.get("kinds")
        if (
            not isinstance(kinds, list)
            or not 1 <= len(kinds) <= handover.MAX_SOCKETS
            or len(kinds) != len(fds)
            or kinds[0] != handover.LISTEN
            or any(k != handover.CONN for k in kinds[1:])
        ):
            raise Refused("hold needs 'kinds': ['listen', 'conn', ...], one per descriptor")
        for fd in fds:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                raise Refused("hold takes sockets only")
        with socket.socket(fileno=os.dup(fds[0])) as listener:
            if not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                raise Refused("the first socket to hold must be listening")
        self._release(sandbox_id)
        self.held[sandbox_id] = (list(fds), list(kinds), time.monotonic())
        self.publish()
        log(f"holding {len(fds)} socket(s) for {sandbox_id}")
        return {"held": len(fds)}

    def _adopt(self, req: dict[str, Any], peer: int) -> tuple[dict[str, Any], list[int]]:
        """Lend the held sockets to the restoring sandbox ``peer``: copies go out, ours
        stay until release.  One borrower at a time: while it lives, a second restore
        of the same image gets nothing and binds its own port."""
        sandbox_id = checked_id(req)
        entry = self.held.get(sandbox_id)
        if entry is None:
            return {"kinds": []}, []
        borrower = self.lent.get(sandbox_id)
        if borrower is not None and borrower != peer and proto.pid_alive(borrower):
            raise Refused(f"the sockets held for {sandbox_id} are in use by pid {borrower}")
        self.lent[sandbox_id] = peer
        fds, kinds, _ = entry
        return {"kinds": kinds}, list(fds)

    def _release(self, sandbox_id: str) -> bool:
        self.lent.pop(sandbox_id, None)
        entry = self.held.pop(sandbox_id, None)
        if entry is not None:
            close_all(entry[0])
            self.publish()
            log(f"released the sockets held for {sandbox_id}")
        return entry is not None

    def publish(self) -> None:
        """Rewrite template.json (while serving) with the IDs whose sockets we hold."""
        if not self.info or not self.running:
            return
        with contextlib.suppress(OSError):
            proto.write_info(self.root, {**self.info, "held": sorted(self.held)})

    def _go_stale(self) -> None:
        """A newer ckpt asked: fork no more, and let a fresh template take the lock; it
        collects our held sockets (``migrate``) before it serves, and we exit."""
        if self.stale:
            return
        self.stale = True
        log("a newer ckpt is in use: handing over to a fresh template")
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # releases the flock for the fresh template
            self.lock_fd = None

    def _migrate(self) -> tuple[dict[str, Any], list[int]]:
        """Give every held socket to the fresh template that replaces us, then exit."""
        held = [{"id": sid, "kinds": kinds} for sid, (_, kinds, _) in self.held.items()]
        fds = [fd for fds, _, _ in self.held.values() for fd in fds]
        if len(fds) > handover.MAX_SOCKETS:
            raise Refused(f"too many held sockets to migrate ({len(fds)})")
        self.after_send = list(self.held)  # closed once the reply (and fds) went out
        self.running = False
        # The socket path is the successor's from now on: it binds its own in place as
        # soon as it has our reply, so close() must not unlink it (a look at the inode
        # and then an unlink could remove the successor's socket in between).
        self.inode = None
        return {"held": held}, fds

    def _expire_holds(self) -> None:
        now = time.monotonic()
        for sandbox_id, (_, _, since) in list(self.held.items()):
            if now - since > self.hold_s:
                log(f"no restore of {sandbox_id} within {self.hold_s:g} s: closing its sockets")
                self._release(sandbox_id)

    def _spawn(self, spec: dict[str, Any], conn: socket.socket) -> dict[str, Any]:
        sys.stderr.flush()
        keep_out = [conn.fileno(), self.listener.fileno()] if self.listener else [conn.fileno()]
        joined_r, spec["joined_w"] = os.pipe()
        spec["template_socket"] = self.sock_path
        spec["root"] = self.root
        try:
            pid = os.fork()
        except BaseException:
            os.close(spec["joined_w"])
            os.close(joined_r)
            raise
        if pid == 0:
            os.close(joined_r)
            become_sandbox(spec, keep_out)
        os.close(spec["joined_w"])  # once, so no later descriptor of that number is hit
        try:
            # "joined", or nothing if the child died first, or no answer in time
            ready = select.select([joined_r], [], [], JOIN_TIMEOUT_S)[0]
            joined = os.read(joined_r, 32) if ready else b""
        finally:
            os.close(joined_r)
        if joined != b"joined":
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            if ready:  # it exited (or is exiting): reap it now; else _reap will
                os.waitpid(pid, 0)
            raise Refused(
                "the forked sandbox could not join its cgroup or detach"
                + ("" if ready else f" within {JOIN_TIMEOUT_S:g} s; it was killed")
            )
        self.spawned += 1
        return {"pid": pid}  # our child: reaped by _reap when it exits

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "version": self.version,
            "root": self.root,
            "socket": self.sock_path,
            "started": self.started,
            "uptime_s": round(time.time() - self.started, 3),
            "spawned": self.spawned,
            "refused": self.refused,
            "idle_timeout_s": self.idle_s,
            "stale": self.stale,
            "held": {
                sid: {"sockets": len(fds), "age_s": round(time.monotonic() - since, 3)}
                for sid, (fds, _, since) in self.held.items()
            },
            "rss_kib": _rss_kib(),
            **self.warm_info,
        }

    def close(self) -> None:
        self.running = False
        for sandbox_id in list(self.held):
            self._release(sandbox_id)
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self.still_ours():
            with contextlib.suppress(OSError):
                os.unlink(self.sock_path)
        with contextlib.suppress(OSError):
            info = proto.read_info(self.root)
            if info and info.get("pid") == os.getpid():
                os.unlink(proto.info_path(self.root))


def _send(conn: socket.socket, reply: dict[str, Any], fds: list[int] = ()) -> bool:
    """Send a reply; False if the client is gone (or does not read within the timeout)."""
    data = json.dumps(reply).encode() + b"\n"
    try:
        if fds:
            socket.send_fds(conn, [data], list(fds))
        else:
            conn.sendall(data)
    except OSError:
        return False
    return True


def _rss_kib() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError):
        return 0


# -- entry point -----------------------------------------------------------------------

USAGE = "usage: python -m ckpt.sandbox.template --root DIR --socket PATH --version TOKEN"


def parse_args(argv: list[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    it = iter(argv)
    for arg in it:
        if arg not in ("--root", "--socket", "--version"):
            raise SystemExit(f"{USAGE}\nunrecognized argument: {arg}")
        value = next(it, None)
        if value is None:
            raise SystemExit(f"{USAGE}\nargument {arg}: expected one argument")
        opts[arg[2:]] = value
    missing = [n for n in ("root", "socket", "version") if n not in opts]
    if missing:
        raise SystemExit(f"{USAGE}\nmissing: {', '.join(missing)}")
    return opts


def _lock(root: str) -> int | None:
    """The root's template lock, or None if another template keeps it.  A stale template
    lets go of it as soon as a newer ckpt asks it for a sandbox, so wait a little."""
    fd = os.open(proto.lock_path(root), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return None
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> None:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    lock_fd = _lock(opts["root"])
    if lock_fd is None:
        return  # another template for this root is starting or serving
    t = Template(os.path.abspath(opts["root"]), opts["socket"], opts["version"])
    t.lock_fd = lock_fd
    from ckpt.sandbox.wire import title  # its module is loaded now, so forked sandboxes pay nothing

    title.set_title(title.template_title(t.root))
    signal.signal(signal.SIGTERM, lambda *_: (t.close(), os._exit(0)))
    info = {"pid": os.getpid(), "version": t.version, "socket": t.sock_path, "started": t.started}
    proto.write_info(opts["root"], {**info, "state": "warming"})
    time.sleep(faults.delay(Fault.WARM_DELAY))
    t.warm_info = warm()
    if settings.current().template_gc_freeze:
        gc.freeze()  # children's collections skip the template's objects: see README
    t.take_over()
    t.bind()
    t.info = {**info, "state": "serving"}
    proto.write_info(opts["root"], {**t.info, "held": sorted(t.held)})
    log(f"warm ({t.warm_info}); serving on {t.sock_path}")
    try:
        t.serve()
    finally:
        t.close()
        log("stopped")
