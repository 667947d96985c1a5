"""Inside the sandbox: its HTTP connections leave with its address, and arrive.

A migration of a sandbox with its own address (``netns.py``) moves its established
connections with TCP repair (``tcprepair.py``), in steps the migration drives through
the ``connections`` verb:

source        park     drain the server (requests being answered finish, each
                       connection waits between two requests), freeze the kernel
              cut      (the address cut off its bridge) take the listen queue's
                       connections too, read every connection's state into a file; the
                       sockets stay in repair mode, so closing them later says nothing
              back     (a migration that failed) leave repair mode and serve them
                       again; their peers retransmit what was dropped meanwhile
destination   rebuild  make each connection again from the file, in the sandbox's
                       namespace, left in repair mode: nothing is sent yet
              live     (committed; the address attached and announced) leave repair
                       mode and serve them

The link is cut, attached and announced by the migration (``migration/connections.py``),
in the network namespace where the sandbox's veth was made; this process never
changes a link.

What a client sent while no side owned the address is dropped at the bridge and sent
again by its TCP, never refused; a connection attempt then is retried the same way.
A handshake caught half-way by the cut (the sandbox's kernel answered the SYN, the
client's ACK is still on its way) is not moved: only established connections are, so
that client's next segment meets the destination's listener, which resets it.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

from ckpt.errors import SandboxError
from ckpt.sandbox.wire import netmove, netns, nsthread, tcprepair

MAX_CONNECTIONS = 4096
MAX_STATES_BYTES = 256 << 20  # a states file larger than this is refused
BACKLOG_TAKE_MAX = MAX_CONNECTIONS


class Moving:
    """The connections of one move, kept between its steps."""

    def __init__(self) -> None:
        self.socks: list[socket.socket] = []
        self.states: list[tcprepair.TcpState] = []
        self.cut = False


def _net(record: Any) -> netns.Net:
    try:
        return netns.Net(**record)
    except TypeError as exc:
        raise SandboxError(f"a connections request names a malformed network: {exc}") from None


def handle(host: Any, request: Any) -> int:
    """One ``connections`` request for ``host`` (a ``process.Host``); returns how many
    connections the step concerned."""
    steps = {"park": park, "cut": cut, "back": back, "rebuild": rebuild, "live": live}
    return steps[request.op.value](host, request)


def park(host: Any, request: Any) -> int:
    from ckpt.sandbox.host.http import DrainTimeout

    timeout = request.drain_timeout if request.drain_timeout is not None else 10.0
    parked = 0
    try:
        if host.http is not None:
            parked = host.http.drain(timeout)
    except DrainTimeout as exc:
        raise SandboxError(f"connections not parked: {exc}; the sandbox goes on serving") from None
    with host.cond:
        if not host.frozen:
            host._freeze()
    host.moving = Moving()
    return parked


def _take_backlog(listener: socket.socket) -> list[socket.socket]:
    taken: list[socket.socket] = []
    listener.setblocking(False)
    with contextlib.suppress(BlockingIOError, InterruptedError):
        while len(taken) < BACKLOG_TAKE_MAX:
            taken.append(listener.accept()[0])
    return taken


def cut(host: Any, request: Any) -> int:
    """After ``park``: cut the address off, read every connection's state into the
    file ``request.path`` (made here, new)."""
    moving: Moving | None = getattr(host, "moving", None)
    if moving is None:
        raise SandboxError("connections cut before they were parked")
    socks: list[socket.socket] = []
    if host.http is not None:
        socks = host.http.parked()  # still the server's until the move commits or fails
    moving.cut = True
    if host.http is not None:
        socks += _take_backlog(host.http.sock)
    if len(socks) > MAX_CONNECTIONS:
        raise SandboxError(f"{len(socks)} connections: at most {MAX_CONNECTIONS} move")
    moving.socks = socks
    states = []
    for sock in socks:
        tcprepair.repair(sock)
        try:
            states.append(tcprepair.dump(sock))
        except tcprepair.RepairError:
            # closing (its client sent FIN meanwhile): not moved, it ends here silently
            continue
    moving.states = states
    host.handed_over = True  # they end in repair mode, silently, when the source exits
    _write_new(str(request.path), tcprepair.encode(states))
    return len(states)


def back(host: Any, request: Any) -> int:
    """Undo ``park`` and ``cut``: the connections are served here again (the kernel is
    thawed by ``resume``)."""
    moving: Moving | None = getattr(host, "moving", None)
    if moving is None:
        if host.http is not None:
            host.http.undrain()
        _thaw(host)
        return 0
    for sock in moving.socks:
        with contextlib.suppress(tcprepair.RepairError):
            tcprepair.repair(sock, False)
    host.handed_over = False
    if host.http is not None:
        parked = set(map(id, host.http.parked()))
        extra = [s for s in moving.socks if id(s) not in parked]  # the listen queue's
        host.http.undrain()
        host.http.serve_more(extra)
    host.moving = None
    _thaw(host)
    return len(moving.socks)


def _thaw(host: Any) -> None:
    """The kernel ``park`` froze runs again (the cgroup is the caller's to thaw)."""
    with host.cond:
        if host.frozen:
            host._thaw()


def rebuild(host: Any, request: Any) -> int:
    """On the destination, once restored: the connections in file ``request.path``,
    rebuilt in the sandbox's namespace (its link still cut off), in repair mode."""
    net = _net(request.net)
    states = tcprepair.decode(_read_bounded(str(request.path)))
    if len(states) > MAX_CONNECTIONS:
        raise SandboxError(f"{len(states)} connections: at most {MAX_CONNECTIONS} move")
    if host.http is None:
        if states:
            raise SandboxError("connections moved to a sandbox that serves none")
        return 0
    listen_ip, listen_port = host.http.address
    for s in states:
        if s.local != (net.ip, listen_port) or listen_ip != net.ip:
            raise SandboxError(f"a moved connection is on {s.local_ip}:{s.local_port}, "
                               f"not this sandbox's {net.ip}:{listen_port}")  # fmt: skip
    moving = Moving()
    moving.states = states

    def make() -> list[socket.socket]:
        made: list[socket.socket] = []
        try:
            for s in states:
                made.append(tcprepair.restore(s))
        except BaseException:
            for sock in made:
                tcprepair.discard(sock)
            raise
        return made

    moving.socks = nsthread.run_in(netmove.netns_path(net.netns), make)
    host.moving = moving
    return len(states)


def live(host: Any, request: Any) -> int:
    """The move committed and the address is announced: hand the rebuilt connections
    to the network and serve them."""
    moving: Moving | None = getattr(host, "moving", None)
    if moving is None or host.http is None:
        return 0
    live_socks = []
    for sock, state in zip(moving.socks, moving.states, strict=True):
        try:
            tcprepair.resume(sock, state)
            live_socks.append(sock)
        except tcprepair.RepairError:
            sock.close()
    host.http.serve_more(live_socks)
    host.moving = None
    return len(live_socks)


def _write_new(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _read_bounded(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_STATES_BYTES + 1)
    if len(data) > MAX_STATES_BYTES:
        raise SandboxError(f"{path}: connection states over {MAX_STATES_BYTES} bytes")
    return data
