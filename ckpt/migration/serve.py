"""``ckpt serve``: accept migrations into a root, one at a time, until told to stop.

One session at a time keeps the destination's memory and disk use to one migration's
and makes "an ID that already exists" a simple check.  The listening port is open to
anyone, so nothing a stranger does may hold that one slot::

    acceptor thread ─ accept ─ caps ─▶ handshake thread (one per unauthenticated
                                        connection, at most ``Limits.pending``)
                                          │ key proven
                                          ▼
    main thread ◀── the authenticated channel and its first message (or, if a
      │              session runs past ``Limits.slot_wait_s``, Error BUSY to it)
      └ receive(): the session, each step within ``Limits.phase_s``

A first message ``Resume`` (``reconnect.py``) does not take the slot: its channel
goes to the post-copy relay of the session that runs, whose source lost its link.

Before its key is proven a connection gets ``Limits.handshake_s`` seconds (TLS included),
at most ``Limits.per_address`` of them come from one address, at most
``Limits.pending`` in all; when all are taken, a newcomer replaces the oldest of the
address holding the most, so one host cannot crowd the others out.  A key holder holds
the slot only while each step moves (``Channel``'s step deadline).  SIGTERM and SIGINT
raise ``Stopping`` wherever the main thread is: a session in progress is abandoned (what
it restored is stopped, what it received removed, the source told) and the server
exits 0.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ckpt.errors import CkptError
from ckpt.migration.errors import MigrationError
from ckpt.migration.reconnect import Resumable, reconnect_s

POLL_S = 0.5
SESSION_DEADLINE_S = 3600.0  # a whole migration, however large, ends by then
READY_FD_ENV = "CKPT_SERVE_READY_FD"


@dataclass(frozen=True)
class Limits:
    """What a stranger may hold of the server before it proves the key, and how fast a
    key holder must move to keep the migration slot."""

    handshake_s: float = 5.0  # TLS and the handshake, from the accept
    per_address: int = 4  # unauthenticated connections from one address
    pending: int = 32  # unauthenticated connections in all, one thread each
    phase_s: float = 120.0  # a step of a session: an image, an answer ...
    phase_min_rate: float = float(256 << 10)  # ... plus 1 s per this many bytes it brings
    backlog: int = 64
    slot_wait_s: float = 10.0  # a second key holder waits this long for the slot ...
    busy_linger_s: float = 5.0  # ... then its offer is read and it is told: busy
    resume_s: float | None = None  # post-copy, a cut after the commit (None: settings')


class Stopping(BaseException):
    """SIGTERM or SIGINT: unwind whatever is running, then exit cleanly."""


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise Stopping(signal.Signals(signum).name)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def parse_address(text: str, what: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port), or a one-line error."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise MigrationError(f"{what} {text!r}: give HOST:PORT, such as 198.18.0.2:7070")
    return host, int(port)


class _Pending:
    """One unauthenticated connection; ``handle`` (a duplicate of its descriptor, ours
    to close) lets another thread cut it without racing its own close."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.address = address
        self.handle = sock.dup()
        self.since = time.monotonic()

    def cut(self) -> None:
        with contextlib.suppress(OSError):
            self.handle.shutdown(socket.SHUT_RDWR)
        self.handle.close()


def _since(entry: _Pending) -> float:
    return entry.since


class _Throttled:
    """Refusal lines, at most ``burst`` per ``every`` seconds: a flood of connections
    must not become a flood of log lines."""

    def __init__(self, say: Callable[[str], None], every: float = 10.0, burst: int = 10) -> None:
        self.say, self.every, self.burst = say, every, burst
        self.lock = threading.Lock()
        self.window = time.monotonic()
        self.shown = self.dropped = 0

    def __call__(self, line: str) -> None:
        with self.lock:
            now = time.monotonic()
            if now - self.window >= self.every:
                if self.dropped:
                    self.say(f"({self.dropped} more refusals not shown)")
                self.window, self.shown, self.dropped = now, 0, 0
            if self.shown >= self.burst:
                self.dropped += 1
                return
            self.shown += 1
        self.say(line)


class Server:
    """Receive migrations from ``listener`` into ``root``: ``run`` until ``stop``."""

    def __init__(
        self,
        root: Any,
        listener: Any,
        *,
        limits: Limits = Limits(),
        say: Callable[[str], None] = print,
        debug: bool = False,
        bridge: str | None = None,
    ) -> None:
        self.root = root
        self.bridge = bridge  # arriving sandboxes with an address of their own join it
        self.listener = listener
        self.limits = limits
        self.say = say
        self.debug = debug
        self._refused = _Throttled(say)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending: dict[str, list[_Pending]] = {}
        self._threads = 0  # handshake threads alive
        self._busy = False  # a channel is handed to the main thread or in a session
        self._handoff: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self.resumable = Resumable()  # post-copy relays a source may reconnect to
        self.resume_s = limits.resume_s if limits.resume_s is not None else reconnect_s()

    def stop(self) -> None:
        """Make ``run`` return within ``POLL_S`` once no session runs."""
        self._stop.set()

    def pending(self) -> int:
        """Unauthenticated connections held now."""
        with self._lock:
            return sum(len(v) for v in self._pending.values())

    def run(self) -> None:
        """Sessions in this thread (so a signal reaches them), accepts in another."""
        acceptor = threading.Thread(target=self._accept_loop, name="ckpt-serve-accept")
        acceptor.daemon = True
        acceptor.start()
        try:
            while not self._stop.is_set():
                try:
                    ch, first = self._handoff.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                try:
                    self._session(ch, first)
                finally:
                    with self._idle:
                        self._busy = False
                        self._idle.notify()
        finally:
            self._stop.set()
            with self._idle:
                self._idle.notify_all()
            acceptor.join(4 * POLL_S)
            with self._lock:
                for entries in self._pending.values():
                    for entry in entries:
                        entry.cut()
                self._pending.clear()
                with contextlib.suppress(queue.Empty):
                    self._handoff.get_nowait()[0].close()

    def _session(self, ch: Any, first: Any) -> None:
        from ckpt.migration.session import receive

        with ch:
            try:
                got = receive(
                    ch,
                    self.root,
                    self.bridge,
                    first=first,
                    resumable=self.resumable,
                    resume_s=self.resume_s,
                )
            except CkptError as exc:
                self.say(f"migration failed: {exc}")
                return
            except Exception as exc:  # a bug must not take the server down
                self.say(f"migration failed (internal error, --debug shows it): {exc!r}")
                if self.debug:
                    traceback.print_exc()
                return
        self.say(f"received {got.sandbox_id}: running at {got.address}")

    def _accept_loop(self) -> None:
        from ckpt.migration.channel import NoPeer

        while not self._stop.is_set():
            try:
                sock, address = self.listener.accept_socket(timeout=POLL_S)
            except NoPeer:
                continue
            except MigrationError as exc:
                if self._stop.is_set():
                    return
                self._refused(f"refused a peer: {exc}")
                self._stop.wait(POLL_S)  # out of descriptors: do not spin
                continue
            try:
                self._admit(sock, address)
            except Exception as exc:  # out of descriptors or threads: refuse this one only
                sock.close()
                self._refused(f"refused a peer from {address}: {exc}")

    def _admit(self, sock: socket.socket, address: str) -> None:
        """Start the handshake of ``sock`` within the caps, or close it at once."""
        lim = self.limits
        why = ""
        with self._lock:
            mine = self._pending.get(address, [])
            total = sum(len(v) for v in self._pending.values())
            if len(mine) >= lim.per_address:
                why = f"more than {lim.per_address} unauthenticated connections from it"
            elif self._threads >= 2 * lim.pending:
                why = "too many handshakes in progress"
            elif total >= lim.pending:
                victim = self._victim(len(mine))
                if victim is None:
                    why = f"more than {lim.pending} unauthenticated connections"
                else:
                    self._pending[victim.address].remove(victim)
                    victim.cut()
            if not why:
                entry = _Pending(sock, address)
                self._pending.setdefault(address, []).append(entry)
                self._threads += 1
            self._pending = {a: v for a, v in self._pending.items() if v}
        if why:
            sock.close()
            self._refused(f"refused a peer from {address}: {why}")
            return
        t = threading.Thread(target=self._handshake, args=(entry,), name="ckpt-serve-handshake")
        t.daemon = True
        try:
            t.start()
        except BaseException:
            self._forget(entry)
            with self._lock:
                self._threads -= 1
            raise

    def _victim(self, holds: int) -> _Pending | None:
        """The connection a newcomer replaces when all are taken: the oldest of the
        addresses holding the most, if they hold more than the newcomer's will."""
        most = max(len(v) for v in self._pending.values())
        if most < holds + 1:
            return None
        return min((v[0] for v in self._pending.values() if len(v) == most), key=_since)

    def _forget(self, entry: _Pending) -> None:
        with self._lock:
            entries = self._pending.get(entry.address, [])
            if entry in entries:
                entries.remove(entry)
                entry.handle.close()

    def _handshake(self, entry: _Pending) -> None:
        from ckpt.migration import messages as m

        try:
            try:
                ch = self.listener.open(entry.sock)
            except MigrationError as exc:
                self._refused(f"refused a peer from {entry.address}: {exc}")
                return
            except Exception as exc:  # a bug must not take the server down
                self._refused(f"refused a peer from {entry.address} (internal error): {exc!r}")
                return
            finally:
                self._forget(entry)
            try:  # a Resume joins its migration in its window, beside the slot
                first = ch.recv()
            except MigrationError as exc:
                ch.close()
                self._refused(f"refused a peer from {entry.address}: {exc}")
                return
            if isinstance(first, m.Resume):
                try:
                    self.resumable.take(ch, first)
                except MigrationError as exc:
                    self._refused(str(exc))
                else:
                    self.say(f"{first.sandbox_id}: its source reconnected from {entry.address}")
                return
            until = time.monotonic() + self.limits.slot_wait_s
            with self._idle:  # a session that ends soon leaves the slot to this one
                while self._busy and not self._stop.is_set():
                    if not self._idle.wait(until - time.monotonic()):
                        break
                take = not self._busy and not self._stop.is_set()
                if take:  # under the lock: ``run`` drains the queue under it on its way out
                    self._busy = True
                    self._handoff.put_nowait((ch, first))
            if not take:
                ch.send_error(
                    m.ErrorCode.BUSY,
                    "the destination is receiving another migration: try again when it ends",
                    linger=self.limits.busy_linger_s,
                )
        finally:
            with self._lock:
                self._threads -= 1


def serve(
    root: Any,
    host: str,
    port: int,
    secret: bytes,
    *,
    tls: Any = None,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    on_ready: Callable[[str], None] | None = None,
    debug: bool = False,
    limits: Limits = Limits(),
    bridge: str | None = None,
    encrypt: bool = False,
) -> None:
    """Listen on ``host:port`` and receive migrations into ``root`` until a signal;
    ``encrypt``: accept only sources that seal the channel (``migrate --encrypt``)."""
    from ckpt.migration.incoming import sweep

    if bridge is not None:
        from ckpt.sandbox.wire import netns

        netns.check_bridge_name(bridge)
        netns.check_mount_ns()
        netns.check_bridge(bridge)
    root.ensure()
    for name in sweep(root.path):
        say(f"removed {name}, left by a server that died mid-migration")
    with _signals_raise():
        try:
            with listen(host, port, secret, tls=tls, limits=limits, encrypt=encrypt) as listener:
                bound = "{}:{}".format(*listener.address)
                say(f"listening on {bound} (root {root.path})")
                if on_ready is not None:
                    on_ready(bound)
                Server(root, listener, limits=limits, say=say, debug=debug, bridge=bridge).run()
        except Stopping as sig:
            say(f"stopping on {sig}")


def listen(
    host: str, port: int, secret: bytes, *, tls: Any = None, limits: Limits, encrypt: bool = False
) -> Any:
    """The ``Listener`` a server accepts on, its channels bounded as ``limits`` say."""
    from ckpt.migration.channel import Listener
    from ckpt.migration.outgoing import io_timeout

    return Listener(
        host,
        port,
        secret,
        tls=tls,
        backlog=limits.backlog,
        io_timeout=io_timeout(),
        deadline=SESSION_DEADLINE_S,
        handshake_timeout=limits.handshake_s,
        phase_timeout=limits.phase_s,
        phase_min_rate=limits.phase_min_rate,
        encrypt=encrypt,
    )


def ready_line_writer() -> Callable[[str], None] | None:
    """For ``--detach``: the child tells its parent the bound address on this fd."""
    from ckpt import settings

    fd = settings.current().serve_ready_fd
    os.environ.pop(READY_FD_ENV, None)  # for this process alone, not its children
    if fd is None:
        return None

    def ready(bound: str) -> None:
        with contextlib.suppress(OSError):
            os.write(int(fd), f"{bound}\n".encode())
            os.close(int(fd))

    return ready
