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
@dataclass(eq=False, slots=True)
class TCPEndpoint:
    """Transport state of a TCP endpoint, the fields a netstack keeps per connection."""

    snd_una: int = 0
    snd_nxt: int = 0
    snd_wnd: int = 65535
    snd_wscale: int = 7
    rcv_nxt: int = 0
    rcv_wnd: int = 65535
    rcv_wscale: int = 7
    iss: int = 0
    irs: int = 0
    mss: int = 65483
    cwnd: int = 10
    ssthresh: int = 65535
    srtt_us: int = 0
    rttvar_us: int = 0
    rto_ms: int = 1000
    retransmits: int = 0
    dup_acks: int = 0
    sack_permitted: bool = True
    timestamps: bool = True
    ts_recent: int = 0
    keepalive: bool = False
    keepalive_idle_s: int = 7200
    keepalive_interval_s: int = 75
    keepalive_count: int = 9
    nodelay: bool = False
    cork: bool = False
    linger_s: int = -1
    reuse_addr: bool = False
    reuse_port: bool = False
    send_buffer: int = 16384
    recv_buffer: int = 131072
    congestion: str = "reno"
    segments_sent: int = 0
    segments_received: int = 0


@state.savable
@dataclass(eq=False)
class TCPSocket(Socket):
    """A TCP socket: listening (address, backlog, accept queue) or connected."""

    local: tuple[str, int] | None = None
    remote: tuple[str, int] | None = None
    backlog: int = 0
    accept_queue: list[TCPSocket] = field(default_factory=list)
    endpoint: TCPEndpoint = field(default_factory=TCPEndpoint)

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


@state.savable
@dataclass(eq=False, slots=True)
class StatCounter:
    """One netstack statistic (gVisor keeps each as its own object)."""

    value: int = 0


@state.savable
@dataclass(eq=False)
class NIC:
    """A network interface: addresses, link parameters and per-NIC statistics."""

    id: int
    name: str
    mtu: int
    hw_addr: bytes = b""
    addresses: list[tuple[str, int]] = field(default_factory=list)
    up: bool = True
    stats: dict[str, StatCounter] = field(default_factory=dict)


@state.savable
@dataclass(eq=False, slots=True)
class Route:
    destination: str
    prefix: int
    gateway: str
    nic: int
    metric: int = 0


@state.savable
@dataclass(eq=False, slots=True)
class Neighbor:
    address: str
    link_addr: bytes
    nic: int
    state: int = 2  # reachable


NIC_STATS = [
    f"{direction}.{what}"
    for direction in ("rx", "tx")
    for what in ("packets", "bytes", "errors", "dropped", "multicast", "unknown_l3", "malformed")
]
STACK_STATS = [
    f"{proto}.{what}"
    for proto in ("ip", "icmp", "tcp", "udp", "arp")
    for what in (
        "packets_received",
        "packets_sent",
        "invalid_destination",
        "invalid_source",
        "malformed",
        "dropped",
        "options_received",
        "checksum_errors",
        "segments_sent",
        "retransmits",
        "resets_sent",
        "resets_received",
        "active_opens",
        "passive_opens",
        "listen_overflows",
        "timeouts",
    )
]


@state.savable
@dataclass(eq=False)
class NetStack:
    """The sandbox's network stack: interfaces, routes, neighbours, port reservations."""

    nics: list[NIC] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    neighbors: list[Neighbor] = field(default_factory=list)
    reserved_ports: dict[int, int] = field(default_factory=dict)  # port -> socket id
    stats: dict[str, StatCounter] = field(default_factory=dict)
    forwarding: bool = False
    default_ttl: int = 64

    @staticmethod
    def standard() -> NetStack:
        """Loopback and one ethernet interface with a default route, as runsc sets up."""
        lo = NIC(1, "lo", 65536, b"", [("127.0.0.1", 8), ("::1", 128)])
        eth = NIC(2, "eth0", 1500, bytes.fromhex("02420a000002"), [("10.0.0.2", 24)])
        for nic in (lo, eth):
            nic.stats = {name: StatCounter() for name in NIC_STATS}
        stack = NetStack([lo, eth])
        stack.routes = [
            Route("127.0.0.0", 8, "", 1),
            Route("10.0.0.0", 24, "", 2),
            Route("0.0.0.0", 0, "10.0.0.1", 2),
        ]
        stack.neighbors = [Neighbor("10.0.0.1", bytes.fromhex("02420a000001"), 2)]
        stack.stats = {name: StatCounter() for name in STACK_STATS}
        return stack
