"""Handing a sandbox's address from one host to another: cut off, announce, run there.

A sandbox with its own address (``netns.Net``) moves with its connections when its
link is cut before their state is read (``detach``: the sandbox end of its veth goes
down, so a segment for the address is dropped at the bridge and retransmitted later,
never answered with a RST), and when its new host announces the address before the
connections resume (``announce``: a gratuitous ARP from the same MAC, which every
bridge on the way learns, so the peers' next segments go to the new port).  A move that
fails before the destination resumes undoes the cut (``attach``): the connections were
never reset, and the peers' retransmissions reach the source again.

``in_netns`` runs a function in a short thread that entered a namespace: a socket
keeps the namespace it was made in, and no other thread of the process ever changes
its own.  Stdlib only: the sandbox process imports this.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import TypeVar

from ckpt.errors import SandboxError
from ckpt.sandbox.wire import netns as netns_mod
from ckpt.sandbox.wire import nsthread

T = TypeVar("T")
ETH_P_ARP = 0x0806
ETH_P_IP = 0x0800
BROADCAST = b"\xff" * 6
ANNOUNCEMENTS = 2  # a request and a reply, as arping -U and arping -A send
THREAD_TIMEOUT_S = 15.0
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = struct.Struct("16sH22x")  # struct ifreq: the name, then ifr_flags in the union


class MoveError(SandboxError):
    """The address cannot be cut off, announced or given back."""


def in_netns(
    path: str,
    func: Callable[[], T],
    timeout: float = THREAD_TIMEOUT_S,
    after: Callable[[T], object] | None = None,
) -> T:
    """``func()`` run in network namespace ``path`` (a ``/run/netns`` file or a
    ``/proc/PID/ns/net``), in a thread of its own; raises what it raised.  ``after``
    (given what ``func`` returned) runs in that thread once the caller has the result,
    for a slow cleanup the caller need not wait for."""
    out: list[object] = []
    done = threading.Event()

    def enter_and_run() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                nsthread.enter_net_namespace(fd)
            finally:
                os.close(fd)
            out.append((True, func()))
        except BaseException as exc:
            out.append((False, exc))
        finally:
            done.set()
        ok, value = out[0]  # type: ignore[misc]
        if ok and after is not None:
            after(value)

    worker = threading.Thread(target=enter_and_run, name="netns-run", daemon=True)
    worker.start()
    done.wait(timeout)
    if not out:
        raise MoveError(f"work in namespace {path} did not finish within {timeout:g} s")
    ok, value = out[0]  # type: ignore[misc]
    if not ok:
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]


def netns_path(name: str) -> str:
    return os.path.join(netns_mod.RUN_NETNS, name)


def _link(net: netns_mod.Net, up: bool) -> None:
    """The host end of the sandbox's veth, in the namespace where ckpt runs: while it
    is down the bridge forwards nothing to the sandbox and the sandbox's frames go
    nowhere, but its own link keeps its routes, so its sockets can still be read and
    rebuilt (a repair ``connect`` needs a route)."""
    try:
        set_up(net.veth, up)
    except OSError as exc:
        raise MoveError(f"cannot set {net.ip}'s link {'up' if up else 'down'}: {exc}") from exc


def set_up(ifname: str, up: bool) -> None:
    """``ip link set dev IFNAME up|down`` done by two ioctls in this thread's namespace:
    the same flag change, without a process of its own, which under load cost 5 to
    40 ms on the path where the address is silent (the cut, the commit)."""
    name = ifname.encode()
    if not 0 < len(name) < 16:
        raise OSError(22, f"not an interface name: {ifname!r}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = IFREQ.unpack(fcntl.ioctl(s, SIOCGIFFLAGS, IFREQ.pack(name, 0)))[1]
        wanted = flags | IFF_UP if up else flags & ~IFF_UP
        if wanted != flags:
            fcntl.ioctl(s, SIOCSIFFLAGS, IFREQ.pack(name, wanted))


def detach(net: netns_mod.Net) -> None:
    """Cut the sandbox off its bridge: its address stops answering, silently."""
    _link(net, False)


def attach(net: netns_mod.Net) -> None:
    """Undo ``detach``: the address answers here again (a failed move's way back)."""
    _link(net, True)


def arp_frame(mac: str, ip: str, reply: bool) -> bytes:
    """A gratuitous ARP for ``ip`` at ``mac``, broadcast: sender and target are both
    ``ip`` (RFC 5227's announcement)."""
    hw = bytes.fromhex(mac.replace(":", ""))
    addr = socket.inet_aton(ip)
    eth = BROADCAST + hw + struct.pack("!H", ETH_P_ARP)
    arp = struct.pack("!HHBBH", 1, ETH_P_IP, 6, 4, 2 if reply else 1)
    target_hw = hw if reply else bytes(6)
    return eth + arp + hw + addr + target_hw + addr


def announce(net: netns_mod.Net, count: int = ANNOUNCEMENTS) -> int:
    """Send gratuitous ARPs for the sandbox's address from its namespace: the bridges
    learn its MAC's new port, the peers keep (or refresh) their entry.  Returns the
    frames sent."""
    frames = [arp_frame(net.mac, net.ip, reply=bool(i % 2)) for i in range(count)]

    def send() -> socket.socket:
        # Protocol 0 and sendto: a packet socket that is bound, or has a protocol,
        # registers a receive hook whose removal waits for an RCU grace period (8-23 ms
        # under load); closing one waits for another, so that is left to the thread.
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            for frame in frames:
                s.sendto(frame, (netns_mod.SANDBOX_IFNAME, ETH_P_ARP))
        except BaseException:
            s.close()
            raise
        return s

    try:
        in_netns(netns_path(net.netns), send, after=socket.socket.close)
        return len(frames)
    except OSError as exc:
        raise MoveError(f"cannot announce {net.ip} from {net.netns}: {exc}") from exc
