"""Moving an established TCP connection to another socket, with the kernel's repair mode.

A socket in repair mode (``TCP_REPAIR``) lets its owner read and write what the
kernel keeps of a connection: the next sequence numbers, both queues, the window and
the options agreed at the handshake.  ``dump`` reads that state into a ``TcpState``;
``restore`` builds a socket from it elsewhere (another process, another network
namespace holding the same address): it binds and "connects" without a handshake,
refills the queues, and leaves repair mode only when told (``resume``), after the
address is announced.  The peer never notices: no segment is sent while the
connection has no owner, and a socket closed while in repair mode ends silently, with
no FIN and no RST (``discard``).

The order of operations follows the kernel's rules (as CRIU's ``soccr`` does):
sequence numbers are set while the socket is still closed, options and window once it
is established, the send queue before the receive queue; sent but unacknowledged
bytes go back in repair mode (the kernel retransmits them), bytes never sent go out as
ordinary writes after repair mode ends.

The caller keeps packets away from a connection while its state is read and until its
new owner is ready (the sandbox's link is down meanwhile): a segment that found the
address with no socket would be answered with a RST.  IPv4 only, as sandboxes are.
Stdlib and msgspec: the sandbox process imports this.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import socket
import struct
from typing import Annotated

import msgspec

from ckpt.errors import SandboxError

# <linux/tcp.h>, <linux/sockios.h>: Python's socket module names none of them
TCP_REPAIR = 19
TCP_REPAIR_QUEUE = 20
TCP_QUEUE_SEQ = 21
TCP_REPAIR_OPTIONS = 22
TCP_TIMESTAMP = 24
TCP_REPAIR_WINDOW = 29
REPAIR_ON, REPAIR_OFF, REPAIR_OFF_NO_PROBE = 1, 0, -1
NO_QUEUE, RECV_QUEUE, SEND_QUEUE = 0, 1, 2
SIOCINQ, SIOCOUTQ, SIOCOUTQNSD = 0x541B, 0x5411, 0x894B
TCPOPT_MSS, TCPOPT_WINDOW, TCPOPT_SACK_PERM, TCPOPT_TIMESTAMP = 2, 3, 4, 8
TCPI_OPT_TIMESTAMPS, TCPI_OPT_SACK, TCPI_OPT_WSCALE = 1, 2, 4
TCP_ESTABLISHED = 1
TCP_MAX_WSCALE = 14
MAX_QUEUE = 64 << 20  # bytes of one queue a peer may state: above any socket buffer
IO_TIMEOUT_S = 5.0  # one queue write; the kernel takes it at once or not at all
_WINDOW = struct.Struct("=5I")
_REPAIR_OPT = struct.Struct("=II")

U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFFFFFF)]
Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]
WScale = Annotated[int, msgspec.Meta(ge=0, le=TCP_MAX_WSCALE)]
Queue = Annotated[bytes, msgspec.Meta(max_length=MAX_QUEUE)]


class RepairError(SandboxError):
    """A connection's state cannot be read or rebuilt (not established, not root)."""


class Window(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """``struct tcp_repair_window``: what each side last said of its window."""

    snd_wl1: U32
    snd_wnd: U32
    max_window: U32
    rcv_wnd: U32
    rcv_wup: U32


class TcpState(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One established connection, as ``dump`` reads it and ``restore`` needs it.

    ``snd_seq`` follows the last byte queued to send, ``rcv_seq`` the last byte
    received; ``send_queue`` holds the bytes not yet acknowledged, of which the last
    ``unsent`` never left; ``recv_queue`` the bytes received and not yet read."""

    local_ip: str
    local_port: Port
    remote_ip: str
    remote_port: Port
    snd_seq: U32
    rcv_seq: U32
    send_queue: Queue = b""
    unsent: Annotated[int, msgspec.Meta(ge=0, le=MAX_QUEUE)] = 0
    recv_queue: Queue = b""
    mss: Annotated[int, msgspec.Meta(ge=64, le=65535)] = 1460
    wscale: bool = False
    snd_wscale: WScale = 0
    rcv_wscale: WScale = 0
    sack: bool = False
    timestamps: bool = False
    timestamp: U32 = 0
    window: Window | None = None

    @property
    def local(self) -> tuple[str, int]:
        return self.local_ip, self.local_port

    @property
    def remote(self) -> tuple[str, int]:
        return self.remote_ip, self.remote_port

    def check(self) -> None:
        """Refuse a state no kernel could have written (it may come from a peer)."""
        for ip in (self.local_ip, self.remote_ip):
            try:
                ipaddress.IPv4Address(ip)
            except ValueError:
                raise RepairError(
                    f"a connection's state names {ip!r}, not an IPv4 address"
                ) from None
        if self.unsent > len(self.send_queue):
            raise RepairError("a connection's state has more unsent bytes than queued ones")


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[TcpState])


def encode(states: list[TcpState]) -> bytes:
    return _encoder.encode(states)


def decode(data: bytes) -> list[TcpState]:
    """``encode``'s bytes back, every field checked (they may come from a peer)."""
    try:
        states = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise RepairError(f"malformed connection state: {exc}") from None
    for s in states:
        s.check()
    return states


# -- reading ------------------------------------------------------------------------


def repair(sock: socket.socket, on: bool = True, *, probe: bool = True) -> None:
    """Put ``sock`` in repair mode, or take it out (``probe``: with a window probe,
    which tells the peer at once that the connection lives here)."""
    value = REPAIR_ON if on else (REPAIR_OFF if probe else REPAIR_OFF_NO_PROBE)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, value)
    except OSError as exc:
        raise RepairError(f"cannot {'enter' if on else 'leave'} TCP repair mode: {exc}") from exc


def _ioctl_int(sock: socket.socket, request: int) -> int:
    raw = fcntl.ioctl(sock.fileno(), request, b"\0\0\0\0")
    return struct.unpack("=i", raw)[0]


def _queue_seq(sock: socket.socket, queue: int) -> int:
    sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, queue)
    return struct.unpack("=I", sock.getsockopt(socket.IPPROTO_TCP, TCP_QUEUE_SEQ, 4))[0]


def _peek(sock: socket.socket, queue: int, length: int) -> bytes:
    """The whole of one queue (the socket in repair mode, that queue selected)."""
    if length == 0:
        return b""
    sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, queue)
    data = sock.recv(length, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    if len(data) != length:
        raise RepairError(f"read {len(data)} of a queue's {length} bytes")
    return data


def dump(sock: socket.socket) -> TcpState:
    """The state of established ``sock``, which the caller has put in repair mode
    (``repair``) after cutting it off from the network."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
        if info[0] != TCP_ESTABLISHED:
            raise RepairError(f"a connection in TCP state {info[0]} is not established")
        options, scales = info[5], info[6]
        local = sock.getsockname()[:2]
        remote = sock.getpeername()[:2]
        outq = _ioctl_int(sock, SIOCOUTQ)
        unsent = _ioctl_int(sock, SIOCOUTQNSD)
        inq = _ioctl_int(sock, SIOCINQ)
        if not (0 <= unsent <= outq <= MAX_QUEUE and 0 <= inq <= MAX_QUEUE):
            raise RepairError(f"queue lengths out of range: {outq}, {unsent}, {inq}")
        snd_seq = _queue_seq(sock, SEND_QUEUE)
        send_queue = _peek(sock, SEND_QUEUE, outq)
        rcv_seq = _queue_seq(sock, RECV_QUEUE)
        recv_queue = _peek(sock, RECV_QUEUE, inq)
        sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, NO_QUEUE)
        mss = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)  # mss_clamp in repair
        stamp = struct.unpack("=I", sock.getsockopt(socket.IPPROTO_TCP, TCP_TIMESTAMP, 4))[0]
        window = Window(*_WINDOW.unpack(sock.getsockopt(socket.IPPROTO_TCP, TCP_REPAIR_WINDOW,
                                                         _WINDOW.size)))  # fmt: skip
    except OSError as exc:
        raise RepairError(f"cannot read a connection's state (in repair mode?): {exc}") from exc
    return TcpState(
        local_ip=local[0],
        local_port=local[1],
        remote_ip=remote[0],
        remote_port=remote[1],
        snd_seq=snd_seq,
        rcv_seq=rcv_seq,
        send_queue=send_queue,
        unsent=unsent,
        recv_queue=recv_queue,
        mss=mss,
        wscale=bool(options & TCPI_OPT_WSCALE),
        snd_wscale=scales & 0x0F,
        rcv_wscale=scales >> 4,
        sack=bool(options & TCPI_OPT_SACK),
        timestamps=bool(options & TCPI_OPT_TIMESTAMPS),
        timestamp=stamp,
        window=window,
    )


def discard(sock: socket.socket) -> None:
    """Close ``sock`` without a word to its peer: in repair mode the kernel drops the
    connection with no FIN and no RST (other descriptors of it must close too)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, REPAIR_ON)
    sock.close()


# -- rebuilding ---------------------------------------------------------------------


def _fill(sock: socket.socket, queue: int, data: bytes) -> None:
    """Write ``data`` into ``queue`` (repair mode): the kernel may take it in parts."""
    sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, queue)
    view = memoryview(data)
    while view:
        sent = sock.send(view)
        if sent <= 0:
            raise RepairError("the kernel took no more of a restored queue")
        view = view[sent:]


def _options(state: TcpState) -> bytes:
    opts = [(TCPOPT_MSS, state.mss)]
    if state.wscale:
        opts.append((TCPOPT_WINDOW, state.snd_wscale | (state.rcv_wscale << 16)))
    if state.sack:
        opts.append((TCPOPT_SACK_PERM, 0))
    if state.timestamps:
        opts.append((TCPOPT_TIMESTAMP, 0))
    return b"".join(_REPAIR_OPT.pack(code, value) for code, value in opts)


def _u32(value: int) -> bytes:
    """A sequence number or clock as the kernel's ``u32`` (``setsockopt`` would take an
    int as a signed C int)."""
    return struct.pack("=I", value & 0xFFFFFFFF)


def restore(state: TcpState) -> socket.socket:
    """A socket carrying ``state``'s connection, still in repair mode: nothing has
    been sent.  Made in the calling thread's network namespace, which must hold
    ``state.local_ip``; ``resume`` hands it to the network."""
    state.check()
    sent = len(state.send_queue) - state.unsent
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(IO_TIMEOUT_S)
        repair(sock, True)  # also lets it share the port with the listener
        sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, RECV_QUEUE)
        sock.setsockopt(
            socket.IPPROTO_TCP, TCP_QUEUE_SEQ, _u32(state.rcv_seq - len(state.recv_queue))
        )
        sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, SEND_QUEUE)
        sock.setsockopt(
            socket.IPPROTO_TCP, TCP_QUEUE_SEQ, _u32(state.snd_seq - len(state.send_queue))
        )
        sock.bind(state.local)
        sock.connect(state.remote)  # in repair mode: established, no SYN
        sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_OPTIONS, _options(state))
        if state.timestamps:
            sock.setsockopt(socket.IPPROTO_TCP, TCP_TIMESTAMP, _u32(state.timestamp))
        _fill(sock, SEND_QUEUE, state.send_queue[:sent])
        _fill(sock, RECV_QUEUE, state.recv_queue)
        # after the queues: the kernel refuses a window beyond the sequence it has
        if state.window is not None:
            sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_WINDOW,
                            _WINDOW.pack(*msgspec.structs.astuple(state.window)))  # fmt: skip
        sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, NO_QUEUE)
    except (OSError, RepairError) as exc:
        discard(sock)
        if isinstance(exc, RepairError):
            raise
        raise RepairError(
            f"cannot rebuild the connection {state.local_ip}:{state.local_port} -> "
            f"{state.remote_ip}:{state.remote_port}: {exc}"
        ) from exc
    return sock


def resume(sock: socket.socket, state: TcpState) -> None:
    """Leave repair mode (a window probe tells the peer), then send the bytes the old
    socket had queued but never sent.  The socket is left blocking."""
    repair(sock, False)
    sock.settimeout(IO_TIMEOUT_S)
    try:
        if state.unsent:
            sock.sendall(state.send_queue[len(state.send_queue) - state.unsent :])
    except OSError as exc:
        raise RepairError(f"cannot send a restored connection's queued bytes: {exc}") from exc
    finally:
        sock.settimeout(None)
