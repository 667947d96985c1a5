"""Sockets: TCP (listening and connected, loopback inside the kernel) and unix pairs.

Connections made inside the kernel are loopback: ``connect`` creates the server-side
socket and queues it on the listener's accept queue; ``send`` appends to the peer's
receive buffer.  The buffers are plain bytes in the object graph, so in-flight data
survives a checkpoint.  The http workload's listener records the address the sandbox
process really bound on the host (the kernel itself never touches host sockets).
"""

from __future__ import annotations

import enum
import errno
from dataclasses import dataclass, field

from ckpt import state
from ckpt.errors import SyscallError
from ckpt.kernel.vfs import FileDescription, Inode

AF_UNIX = 1
AF_INET = 2
SOCK_STREAM = 1
SOCK_DGRAM = 2
SOCK_BUFFER = 212_992  # Linux's default rmem/wmem


class SocketState(enum.Enum):
    UNBOUND = 0
    BOUND = 1
    LISTENING = 2
    CONNECTED = 3
    SHUTDOWN = 4


@state.savable
@dataclass(eq=False)
class Socket:
    """What every socket has: an id, a state, a receive buffer and a peer."""

    id: int
    state: SocketState = SocketState.UNBOUND
    recv_buf: bytearray = field(default_factory=bytearray)
    peer: Socket | None = None
    options: dict[int, int] = field(default_factory=dict)

    def deliver(self, data: bytes) -> int:
        """Queue ``data`` on the peer's receive buffer (what fits)."""
        if self.state is not SocketState.CONNECTED or self.peer is None:
            raise SyscallError(errno.ENOTCONN, f"socket {self.id} is not connected")
        if self.peer.state is SocketState.SHUTDOWN:
            raise SyscallError(errno.EPIPE, f"socket {self.id}: peer closed")
        room = SOCK_BUFFER - len(self.peer.recv_buf)
        if room <= 0:
            raise SyscallError(errno.EAGAIN, f"socket {self.id}: peer buffer full")
        chunk = data[:room]
        self.peer.recv_buf += chunk
        return len(chunk)

    def receive(self, n: int) -> bytes:
        if not self.recv_buf:
            if self.peer is None or self.peer.state is SocketState.SHUTDOWN:
                return b""
            raise SyscallError(errno.EAGAIN, f"socket {self.id}: nothing to read")
        out = bytes(self.recv_buf[:n])
        del self.recv_buf[:n]
        return out

    def shutdown(self) -> None:
        self.state = SocketState.SHUTDOWN


@state.savable
@dataclass(eq=False)
class TCPSocket(Socket):
    """A TCP socket: listening (address, backlog, accept queue) or connected."""

    local: tuple[str, int] | None = None
    remote: tuple[str, int] | None = None
    backlog: int = 0
    accept_queue: list[TCPSocket] = field(default_factory=list)

    def bind(self, host: str, port: int) -> None:
        if self.state is not SocketState.UNBOUND:
            raise SyscallError(errno.EINVAL, f"socket {self.id} is already bound")
        self.local = (host, port)
        self.state = SocketState.BOUND

    def listen(self, backlog: int) -> None:
        if self.state not in (SocketState.BOUND, SocketState.LISTENING):
            raise SyscallError(errno.EINVAL, f"socket {self.id} is not bound")
        self.backlog = max(1, backlog)
        self.state = SocketState.LISTENING

    def accept(self) -> TCPSocket:
        if self.state is not SocketState.LISTENING:
            raise SyscallError(errno.EINVAL, f"socket {self.id} is not listening")
        if not self.accept_queue:
            raise SyscallError(errno.EAGAIN, f"socket {self.id}: no pending connection")
        return self.accept_queue.pop(0)


@state.savable
@dataclass(eq=False)
class UnixSocket(Socket):
    """A unix stream socket (``socketpair`` or bound to a path)."""

    path: str = ""


@state.savable
@dataclass(eq=False)
class SocketFD(FileDescription):
    """An open socket; ``inode`` is its sockfs inode (what fstat and flock see)."""

    sock: Socket | None = None
    inode: Inode | None = None

    def lock_inode(self) -> Inode | None:
        return self.inode
