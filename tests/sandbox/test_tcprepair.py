"""TCP repair: an established connection's state read on one host, the socket closed
in repair mode, the connection rebuilt by another process on another host that holds
the same address and MAC, and the conversation goes on: what each side had queued,
and what the client sent while no one owned the address, arrives; no RST.

The network is ``ckpt.bench.lan``'s (a LAN with hosts A and B and a client, made and
removed by a module fixture); the sandbox namespaces are made with ``sandbox.netns``
inside host A and B.  Root-only: the namespace tests skip with the reason otherwise."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import struct
import subprocess
import time
from collections.abc import Iterator

import msgspec
import pytest

from ckpt.bench.lan import Lan, lan
from ckpt.bench.netns import list_namespaces, python_argv, unavailable_reason
from ckpt.sandbox.host.http import bind
from ckpt.sandbox.wire import netmove, netns, tcprepair
from ckpt.sandbox.wire.tcprepair import RepairError, TcpState
from tests.migration.netns_kit import read_line
from tests.sandbox.waiting import wait_for

from . import tcprepair_kit

PORT = 8080
WAIT_S = 30.0
ROOT_TAG = "tcprep"

needs_netns = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"skipped: {unavailable_reason()}"
)


@pytest.fixture(scope="module")
def bed() -> Iterator[Lan]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"skipped: {reason}")
    names: list[str] = []
    with lan() as made:
        names = [h.netns for h in made.net.hosts] + [made.switch]
        yield made
        names += made.made
    assert not set(names) & set(list_namespaces())


def _host_path(name: str) -> str:
    return netmove.netns_path(name)


def _on(bed: Lan, host: str) -> str:
    return _host_path((bed.a if host == "a" else bed.b).netns)


def _sandbox_net(
    bed: Lan, host: str, tag: str, ip: str, mac: str, *, attached: bool = True
) -> netns.Net:
    """A sandbox namespace with ``ip`` and ``mac``, its veth on ``host``'s bridge."""
    ns_name, veth = netns.names(ROOT_TAG, tag)
    net = netns.Net(bed.bridge, ip, 24, mac, ns_name, veth)
    bed.made.append(ns_name)
    netmove.in_netns(_on(bed, host), lambda: netns.create(net, attached=attached))
    return net


def _detach(bed: Lan, host: str, net: netns.Net) -> None:
    netmove.in_netns(_on(bed, host), lambda: netmove.detach(net))


def _attach(bed: Lan, host: str, net: netns.Net) -> None:
    netmove.in_netns(_on(bed, host), lambda: netmove.attach(net))


def _remove_net(bed: Lan, host: str, net: netns.Net) -> None:
    netmove.in_netns(_on(bed, host), lambda: netns.remove(net))


def _client(bed: Lan, ip: str) -> socket.socket:
    path = _host_path(bed.client.netns)
    return netmove.in_netns(path, lambda: socket.create_connection((ip, PORT), timeout=WAIT_S))


def _inq(sock: socket.socket) -> int:
    return struct.unpack("=i", fcntl.ioctl(sock.fileno(), tcprepair.SIOCINQ, b"\0" * 4))[0]


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    sock.settimeout(WAIT_S)
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        assert chunk, f"the connection closed after {got!r}"
        got += chunk
    return got


def _connected(bed: Lan, net: netns.Net) -> tuple[socket.socket, socket.socket, socket.socket]:
    """(listener, server side, client side) of one conversation that has begun."""
    srv = netns.listen(net.netns, net.ip, PORT, bind)
    srv.settimeout(WAIT_S)
    client = _client(bed, net.ip)
    conn, _ = srv.accept()
    client.sendall(b"hello")
    assert _recv_exactly(conn, 5) == b"hello"
    conn.sendall(b"hi")
    assert _recv_exactly(client, 2) == b"hi"
    return srv, conn, client


@needs_netns
def test_a_connection_moves_to_another_host_and_goes_on(bed: Lan) -> None:
    mac = netns.new_mac()
    ip = bed.sandbox_ip(1)
    src = _sandbox_net(bed, "a", "move-src", ip, mac)
    srv, conn, client = _connected(bed, src)
    client.sendall(b"unread-")  # the server has not read it: its receive queue
    wait_for(lambda: _inq(conn) == 7, "the bytes to reach the server's queue", WAIT_S)
    bed.net.set_link(bed.client, False)
    conn.sendall(b"pending")  # sent, never acknowledged: its send queue
    _detach(bed, "a", src)
    tcprepair.repair(conn)
    state = tcprepair.dump(conn)
    assert (state.recv_queue, state.send_queue, state.unsent) == (b"unread-", b"pending", 0)
    assert state.local == (ip, PORT) and state.remote == client.getsockname()[:2]
    blob = tcprepair.encode([state])
    tcprepair.discard(conn)
    srv.close()
    _remove_net(bed, "a", src)  # the source's copy is gone before the client speaks
    bed.net.set_link(bed.client, True)
    client.sendall(b"during-")  # no one owns the address: dropped, then retransmitted

    dst = _sandbox_net(bed, "b", "move-dst", ip, mac, attached=False)
    argv = python_argv(tcprepair_kit.restore_and_echo, dst.record(), blob.hex(), WAIT_S)
    proc = bed.nsenter(dst.netns, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       env=_child_env())  # fmt: skip
    assert read_line(proc, WAIT_S).strip() == "restored"
    assert proc.stdin is not None
    _attach(bed, "b", dst)  # only once the connection has its socket: never a RST
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    client.sendall(b"after")
    expected = b"pending" + b"unread-during-after"
    assert _recv_exactly(client, len(expected)) == expected  # no reset, nothing lost
    client.close()
    out, _ = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0
    assert json.loads(out.decode().splitlines()[-1]) == {"echoed": len(b"unread-during-after")}
    _remove_net(bed, "b", dst)


@needs_netns
def test_dump_reads_each_sides_window_scale_and_options(bed: Lan) -> None:
    """The client asks for a small window (a small scale), the server has its default:
    the state says which scale is whose, as the client's own view of them does."""
    src = _sandbox_net(bed, "a", "scales", bed.sandbox_ip(8), netns.new_mac())
    srv = netns.listen(src.netns, src.ip, PORT, bind)
    srv.settimeout(WAIT_S)

    def small_window_client() -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        s.settimeout(WAIT_S)
        s.connect((src.ip, PORT))
        return s

    client = netmove.in_netns(_host_path(bed.client.netns), small_window_client)
    conn, _ = srv.accept()
    tcprepair.repair(conn)
    state = tcprepair.dump(conn)
    tcprepair.repair(conn, False)
    scales = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[6]
    client_snd, client_rcv = scales & 0x0F, scales >> 4
    assert client_snd != client_rcv  # else the check below could not tell them apart
    assert (state.snd_wscale, state.rcv_wscale) == (client_rcv, client_snd)
    assert state.wscale and state.sack and state.timestamps  # Linux's defaults, both ends
    for s in (client, conn, srv):
        s.close()
    _remove_net(bed, "a", src)


@needs_netns
def test_a_connection_its_client_closed_is_not_dumped(bed: Lan) -> None:
    src = _sandbox_net(bed, "a", "closing", bed.sandbox_ip(7), netns.new_mac())
    srv, conn, client = _connected(bed, src)
    client.shutdown(socket.SHUT_WR)
    conn.settimeout(WAIT_S)
    assert conn.recv(1) == b""  # its FIN arrived: the server's end is closing
    tcprepair.repair(conn)
    with pytest.raises(RepairError, match="not established"):
        tcprepair.dump(conn)
    tcprepair.repair(conn, False)
    for s in (client, conn, srv):
        s.close()
    _remove_net(bed, "a", src)


@needs_netns
def test_a_move_given_up_leaves_the_connection_where_it_was(bed: Lan) -> None:
    """Cut off, in repair mode, its state read: then the move fails, and the source
    takes the connection back; what the client sent meanwhile arrives, nothing reset."""
    src = _sandbox_net(bed, "a", "back-src", bed.sandbox_ip(2), netns.new_mac())
    srv, conn, client = _connected(bed, src)
    _detach(bed, "a", src)
    tcprepair.repair(conn)
    tcprepair.dump(conn)
    client.sendall(b"meanwhile")  # dropped at the bridge: the link is down
    tcprepair.repair(conn, False)
    _attach(bed, "a", src)
    assert _recv_exactly(conn, len(b"meanwhile")) == b"meanwhile"
    conn.sendall(b"still-here")
    assert _recv_exactly(client, len(b"still-here")) == b"still-here"
    for s in (client, conn, srv):
        s.close()
    _remove_net(bed, "a", src)


@needs_netns
def test_announce_tells_the_lan_the_address_is_at_its_mac(bed: Lan) -> None:
    net = _sandbox_net(bed, "b", "garp", bed.sandbox_ip(3), netns.new_mac())

    def listen_arp() -> socket.socket:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(netmove.ETH_P_ARP))
        s.bind(("eth0", 0))
        s.settimeout(WAIT_S)
        return s

    sniffer = netmove.in_netns(_host_path(bed.client.netns), listen_arp)
    try:
        assert netmove.announce(net) == netmove.ANNOUNCEMENTS
        mac = bytes.fromhex(net.mac.replace(":", ""))
        addr = socket.inet_aton(net.ip)
        deadline = time.monotonic() + WAIT_S
        seen = []
        while len(seen) < netmove.ANNOUNCEMENTS and time.monotonic() < deadline:
            frame = sniffer.recv(128)
            # sender hardware and protocol address, target protocol address
            if frame[22:28] == mac and frame[28:32] == addr and frame[38:42] == addr:
                seen.append(struct.unpack("!H", frame[20:22])[0])
        assert sorted(seen) == [1, 2]  # a request and a reply, both for itself
    finally:
        sniffer.close()
        _remove_net(bed, "b", net)


def _child_env() -> dict[str, str]:
    from ckpt.bench.netns import child_env

    return child_env()


# -- the state as it travels: checked, whatever a peer sends ----------------------------


def _state(**kw: object) -> TcpState:
    base: dict[str, object] = dict(local_ip="198.18.0.101", local_port=PORT,
                                   remote_ip="198.18.0.3", remote_port=40000,
                                   snd_seq=1, rcv_seq=2)  # fmt: skip
    base.update(kw)
    return TcpState(**base)  # type: ignore[arg-type]


def test_state_round_trips() -> None:
    state = _state(send_queue=b"abc", unsent=1, recv_queue=b"xyz", wscale=True, snd_wscale=7,
                   rcv_wscale=9, timestamps=True, timestamp=0xFFFFFFFF,
                   window=tcprepair.Window(1, 2, 3, 4, 5))  # fmt: skip
    assert tcprepair.decode(tcprepair.encode([state])) == [state]


@pytest.mark.parametrize(
    "bad",
    [
        {"unsent": 4, "send_queue": b"abc"},
        {"local_ip": "::1"},
        {"remote_ip": "a.b.c.d"},
    ],
)
def test_a_state_no_kernel_wrote_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(RepairError):
        tcprepair.decode(tcprepair.encode([_state(**bad)]))


@pytest.mark.parametrize(
    "field,value",
    [("snd_seq", 1 << 32), ("local_port", 0), ("snd_wscale", 15), ("mss", 10)],
)
def test_a_value_out_of_range_is_refused(field: str, value: int) -> None:
    raw = msgspec.to_builtins(_state())
    raw[field] = value
    with pytest.raises(RepairError):
        tcprepair.decode(msgspec.msgpack.encode([raw]))


def test_garbage_is_refused() -> None:
    with pytest.raises(RepairError):
        tcprepair.decode(b"\xc1not msgpack")


@needs_netns
def test_a_socket_discarded_in_repair_mode_says_nothing_to_its_peer(bed: Lan) -> None:
    """The link stays up: a close outside repair mode would send a FIN (or a RST, with
    bytes unread) that the client would see before the next round trip ends."""
    src = _sandbox_net(bed, "a", "quiet", bed.sandbox_ip(4), netns.new_mac())
    srv, conn, client = _connected(bed, src)
    client.sendall(b"unread")
    wait_for(lambda: _inq(conn) == 6, "the bytes to reach the server's queue", WAIT_S)
    tcprepair.discard(conn)
    other = _client(bed, src.ip)  # a round trip on the same path, after the close
    srv.accept()[0].close()
    info = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    assert info[0] == tcprepair.TCP_ESTABLISHED  # neither FIN nor RST arrived
    for s in (other, client, srv):
        s.close()
    _remove_net(bed, "a", src)


@needs_netns
@pytest.mark.parametrize("how", ["detached", "made detached"])
def test_a_detached_address_drops_what_arrives_and_refuses_nothing(bed: Lan, how: str) -> None:
    """Cut off (a source at the switch-over) or made so (a destination before its
    connections are rebuilt), the address answers nothing: no RST, no refusal."""
    made_detached = how == "made detached"
    src = _sandbox_net(bed, "a", "cut", bed.sandbox_ip(6 if made_detached else 5), netns.new_mac(),
                       attached=not made_detached)  # fmt: skip
    srv = netns.listen(src.netns, src.ip, PORT, bind)
    try:
        if not made_detached:
            _client(bed, src.ip).close()  # reachable: the client knows its MAC now
            _detach(bed, "a", src)

        def attempt() -> None:
            with socket.socket() as s:
                s.settimeout(1.0)
                s.connect((src.ip, PORT + 1))  # no listener there: a RST if it arrived

        with pytest.raises(TimeoutError):
            netmove.in_netns(_host_path(bed.client.netns), attempt)
    finally:
        srv.close()
        _remove_net(bed, "a", src)


@needs_netns
def test_bytes_queued_but_never_sent_go_out_after_the_rebuild(bed: Lan) -> None:
    """The server writes more than its congestion window into a cut link: its queue
    holds bytes in flight (sent, never acknowledged) and bytes never sent; both
    arrive, in order, from the rebuilt socket.  The link is cut before the write, so
    no acknowledgement can empty the in-flight part, however slow the machine."""
    src = _sandbox_net(bed, "a", "unsent", bed.sandbox_ip(9), netns.new_mac())
    srv, conn, client = _connected(bed, src)
    _detach(bed, "a", src)
    # Until the kernel has taken the sandbox end's carrier down (its link watch, run
    # apart), a segment is refused at the veth and stays unsent; after, it is "sent"
    # into the down link and stays in flight, which this test needs.
    wait_for(lambda: _operstate(src) != "UP", "the sandbox end to see its link down", WAIT_S)
    payload = os.urandom(1 << 20)
    conn.setblocking(False)
    sent = 0
    with contextlib.suppress(BlockingIOError):
        while sent < len(payload):
            sent += conn.send(payload[sent:])
    wait_for(lambda: _unsent(conn) > 0, "bytes the congestion window holds back", WAIT_S)
    tcprepair.repair(conn)
    state = tcprepair.dump(conn)
    assert 0 < state.unsent < len(state.send_queue)
    tcprepair.discard(conn)
    rebuilt = netmove.in_netns(_host_path(src.netns), lambda: tcprepair.restore(state))
    _attach(bed, "a", src)
    tcprepair.resume(rebuilt, state)
    assert _recv_exactly(client, sent) == payload[:sent]
    for s in (client, rebuilt, srv):
        s.close()
    _remove_net(bed, "a", src)


def _operstate(net: netns.Net) -> str:
    """The sandbox end's operational state, as its namespace sees it."""
    out = subprocess.run(["ip", "-n", net.netns, "-j", "link", "show", "dev",
                          netns.SANDBOX_IFNAME], capture_output=True, text=True,
                         timeout=15, check=True).stdout  # fmt: skip
    return str(json.loads(out)[0].get("operstate", ""))


def _unsent(sock: socket.socket) -> int:
    return struct.unpack("=i", fcntl.ioctl(sock.fileno(), tcprepair.SIOCOUTQNSD, b"\0" * 4))[0]
