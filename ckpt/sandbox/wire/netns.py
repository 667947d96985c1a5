"""A sandbox's own place on the network: a named network namespace, one veth pair
whose host end joins a bridge, an address and a MAC, as runsc and podman give a
container.

``ckpt run --bridge BR --ip ADDR/PREFIX`` plans the names (derived from the root and
the ID, so two roots never share one), records them in the sandbox's record before
anything exists, then makes them with ``ip`` (iproute2, argument lists, each call with
a deadline).  The namespace is named (``/run/netns/ckpt-sb-<root hash>-<ID>``) so that
it outlives the sandbox process between a checkpoint and its restore: the restored
process listens on the same address, behind the same MAC.  ``ckpt delete`` (or a failed
``run``/``restore``) removes exactly the recorded, derived names; a bridge is never
made or removed, only used.

Only the workload's listening socket is made inside the namespace (``listen``: a short
thread enters it, binds, and ends).  A socket keeps its namespace for life, so the
connections it accepts are the namespace's, and the template can hold it across a
checkpoint like any other.  The sandbox process itself stays in the host's namespace,
where its control socket and its image store are.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import secrets
import socket
import subprocess
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ckpt.errors import SandboxError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ckpt.sandbox.wire.paths import Root, SandboxState

KEY = "net"  # the record's ``extra`` entry
RUN_NETNS = "/run/netns"
PREFIX = "ckpt-sb-"
IP_TIMEOUT_S = 15.0
SANDBOX_IFNAME = "eth0"
_IFNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}")  # IFNAMSIZ - 1, no option look
_MAC = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")


@dataclass(frozen=True)
class Net:
    """What a sandbox's record keeps of its network (``extra["net"]``)."""

    bridge: str
    ip: str
    prefix: int
    mac: str
    netns: str
    veth: str

    def record(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def peer(self) -> str:
        """The sandbox end's name while it is still in the host's namespace."""
        return "ckp" + self.veth[3:]


def names(root_hash: str, sandbox_id: str) -> tuple[str, str]:
    """(namespace, host veth) for a sandbox: derived, so that only they are removed."""
    digest = hashlib.sha256(f"{root_hash}/{sandbox_id}".encode()).hexdigest()
    return f"{PREFIX}{root_hash}-{sandbox_id}", f"ckv{digest[:10]}"


def root_hash(cgroup_parent: str) -> str:
    """The 12 hex digits that name the root (``Root.cgroup_parent`` is ``ckpt/HASH``)."""
    return cgroup_parent.rsplit("/", 1)[-1]


def parse_ip(text: str) -> tuple[str, int]:
    """``ADDR/PREFIX`` as an IPv4 host address on its network."""
    if "/" not in text:
        raise SandboxError(f"bad --ip {text!r}: give ADDR/PREFIX, e.g. 198.18.0.10/24")
    try:
        iface = ipaddress.IPv4Interface(text)
    except ValueError as exc:
        raise SandboxError(f"bad --ip {text!r}: {exc}; give ADDR/PREFIX") from None
    ip, net = iface.ip, iface.network
    if ip.is_loopback or ip.is_multicast or ip.is_unspecified or ip.is_link_local:
        raise SandboxError(f"bad --ip {text!r}: not a host address for a sandbox")
    if net.prefixlen < 31 and ip in (net.network_address, net.broadcast_address):
        raise SandboxError(f"bad --ip {text!r}: that is its network's own address, not a host's")
    return str(ip), net.prefixlen


def new_mac() -> str:
    """A random unicast, locally administered MAC (bit 1 of the first octet set)."""
    raw = bytearray(secrets.token_bytes(6))
    raw[0] = (raw[0] & 0xFC) | 0x02
    return ":".join(f"{b:02x}" for b in raw)


def plan(root_hash_: str, sandbox_id: str, bridge: str | None, ip: str | None) -> Net | None:
    """The network a ``run`` asked for, checked before anything is made; None without
    ``--bridge``.  A missing bridge is refused: ckpt uses a bridge, never makes one."""
    if bridge is None and ip is None:
        return None
    if bridge is None:
        raise SandboxError("--ip needs --bridge BR: the bridge the sandbox's veth joins")
    if ip is None:
        raise SandboxError(f"--bridge {bridge} needs --ip ADDR/PREFIX, e.g. 198.18.0.10/24")
    check_bridge_name(bridge)
    addr, prefix = parse_ip(ip)
    check_mount_ns()
    check_bridge(bridge)
    netns, veth = names(root_hash_, sandbox_id)
    if os.path.lexists(os.path.join(RUN_NETNS, netns)) or _link_kind(veth) is not None:
        raise SandboxError(
            f"namespace {netns} or link {veth} already exists (not recorded by any sandbox "
            "here): remove it with `ip netns del` / `ip link del` if nothing uses it"
        )
    return Net(bridge, addr, prefix, new_mac(), netns, veth)


def check_bridge_name(bridge: str) -> None:
    if not _IFNAME.fullmatch(bridge):
        raise SandboxError(f"bad --bridge {bridge!r}: an interface name of 1-15 characters")


def from_record(data: Any, root_hash_: str, sandbox_id: str) -> Net | None:
    """The recorded network, if its names are the ones ckpt derives for this sandbox
    (a record is not trusted to name anything else); None when there is none."""
    if data is None:
        return None
    try:
        net = Net(**data)
        if parse_ip(f"{net.ip}/{net.prefix}") != (net.ip, net.prefix):
            raise SandboxError(f"{net.ip}/{net.prefix} is not written as ckpt writes it")
    except (TypeError, SandboxError) as exc:
        raise SandboxError(
            f"sandbox {sandbox_id}'s record has a malformed network ({exc}); "
            f"`ckpt delete --force {sandbox_id}`"
        ) from None
    if (net.netns, net.veth) != names(root_hash_, sandbox_id) or (
        not _IFNAME.fullmatch(str(net.bridge)) or not _MAC.fullmatch(str(net.mac))
    ):
        raise SandboxError(
            f"sandbox {sandbox_id}'s record names a network ckpt did not make for it; "
            f"`ckpt delete --force {sandbox_id}`"
        )
    return net


def offered_ok(ip: Any, prefix: Any, mac: Any) -> bool:
    """Are a migration peer's address, prefix and MAC well formed (all three given)?"""
    if not (isinstance(ip, str) and isinstance(prefix, int) and isinstance(mac, str)):
        return False
    if not _MAC.fullmatch(mac) or int(mac[:2], 16) & 0x01:
        return False
    try:
        return parse_ip(f"{ip}/{prefix}") == (ip, prefix)
    except SandboxError:
        return False


# -- ip(8) -----------------------------------------------------------------------------


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    argv = ["ip", *args]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except FileNotFoundError:
        raise SandboxError("a sandbox on a bridge needs the ip command (iproute2)") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(f"{' '.join(argv)} failed: {exc}") from exc


def _must(*args: str) -> None:
    done = _ip(*args)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise SandboxError(f"ip {' '.join(args)} failed: {why}")


def _link_kind(name: str, netns: str | None = None) -> str | None:
    """The kind of link ``name`` (``bridge``, ``veth``, "" for a plain one), None if absent."""
    where = ("-n", netns) if netns else ()
    done = _ip(*where, "-d", "-j", "link", "show", "dev", name)
    if done.returncode != 0:
        return None
    try:
        return str(json.loads(done.stdout)[0].get("linkinfo", {}).get("info_kind", ""))
    except (ValueError, IndexError, AttributeError):
        return ""


def check_bridge(bridge: str) -> None:
    kind = _link_kind(bridge)
    if kind is None:
        raise SandboxError(
            f"no bridge {bridge} in this network namespace: make it with `ip link add "
            f"{bridge} type bridge && ip link set {bridge} up`, or name another"
        )
    if kind != "bridge":
        raise SandboxError(f"{bridge} is not a bridge (it is a {kind or 'plain'} link)")


def netns_exists(name: str) -> bool:
    """Is ``name`` a namespace (mounted), not merely a file that names one?"""
    return os.path.ismount(os.path.join(RUN_NETNS, name))


def check_mount_ns(mountinfo: str = "/proc/self/mountinfo") -> None:
    """Refuse to name a namespace from a mount namespace whose ``/run/netns`` only
    receives mounts (``master:`` in mountinfo: under ``ip netns exec``): the namespace
    it names there would not be seen by the next command, nor outlive this one."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return  # not told: go on, as ``ip`` itself does
    for line in lines:
        fields = line.split(" - ", 1)[0].split()
        copy = any(tag.startswith("master:") for tag in fields[6:])
        if len(fields) > 6 and fields[4] == RUN_NETNS and copy:
            raise SandboxError(
                f"ckpt runs where {RUN_NETNS} is a copy (under `ip netns exec`?), so a "
                "sandbox's network namespace would not outlive this command: enter the "
                "network namespace with `nsenter --net=/run/netns/NAME` instead"
            )


def exists(net: Net) -> bool:
    """Is the whole of it there: the namespace, the host end, the sandbox end?"""
    return (
        netns_exists(net.netns)
        and _link_kind(net.veth) == "veth"
        and _link_kind(SANDBOX_IFNAME, net.netns) == "veth"
    )


def create(net: Net, *, attached: bool = True) -> None:
    """Make the namespace and the veth pair, address and MAC; on any failure remove what
    was made and raise.  The names were found free by ``plan`` (a run) or are this
    sandbox's own (a restore, after ``remove``).  Not ``attached``: the host end stays
    down, so nothing reaches the address until ``netmove.attach`` (a migration's
    connections are rebuilt first)."""
    check_bridge(net.bridge)
    try:
        _must("netns", "add", net.netns)
        _must("link", "add", net.veth, "type", "veth", "peer", "name", net.peer)
        _must("link", "set", "dev", net.peer, "netns", net.netns)
        _must("link", "set", "dev", net.veth, "master", net.bridge, *(("up",) if attached else ()))
        inside = ("-n", net.netns)
        _must(*inside, "link", "set", "dev", "lo", "up")
        _must(*inside, "link", "set", "dev", net.peer, "name", SANDBOX_IFNAME)
        _must(*inside, "link", "set", "dev", SANDBOX_IFNAME, "address", net.mac)
        _must(*inside, "addr", "add", f"{net.ip}/{net.prefix}", "dev", SANDBOX_IFNAME)
        _must(*inside, "link", "set", "dev", SANDBOX_IFNAME, "up")
    except BaseException:
        remove(net)
        raise


def ensure(net: Net, *, attached: bool = True) -> bool:
    """For a restore: use the namespace if all of it is still there (the address and MAC
    survive), else make it again from the record (a leftover part is removed first).
    Returns whether it was made anew: a listener held for the sandbox is then in the
    old namespace, which nothing reaches any more."""
    check_mount_ns()
    if exists(net):
        return False
    remove(net)
    create(net, attached=attached)
    return True


def remove(net: Net) -> None:
    """Remove the host veth (its peer goes with it) and the namespace, if present.
    Only these two names, which are derived from the sandbox and recorded."""
    if _link_kind(net.veth) == "veth":
        _must("link", "del", "dev", net.veth)
    if os.path.lexists(os.path.join(RUN_NETNS, net.netns)):  # a stale file named so too
        _must("netns", "del", net.netns)


# -- in the sandbox process ------------------------------------------------------------


def listen(
    netns: str, host: str, port: int, bind: Callable[[str, int], socket.socket]
) -> socket.socket:
    """A listening socket on ``host:port`` inside namespace ``netns``, made by ``bind``
    (the host's, passed in: this module serves every process and imports none).  A
    namespace is per thread: this process's thread in it (``nsthread.py``) binds, so no
    other thread of this process ever changes namespace."""
    from ckpt.sandbox.wire import nsthread

    check_netns_name(netns)
    try:
        return nsthread.run_in(os.path.join(RUN_NETNS, netns), lambda: bind(host, port))
    except SandboxError:  # it did not finish
        raise OSError(110, f"binding in namespace {netns} did not finish") from None


def check_netns_name(netns: str) -> None:
    """Refuse a name that is not a sandbox namespace's (it comes in a request)."""
    if "/" in netns or not netns.startswith(PREFIX):
        raise OSError(22, f"not a sandbox namespace: {netns!r}")


# -- for the lifecycle -----------------------------------------------------------------


def of(root: Root, st: SandboxState) -> Net | None:
    """The network the sandbox's record keeps, checked against the names derived for
    it; None for a sandbox on the host's loopback."""
    kept = st.extra.get(KEY)
    if kept is None:
        return None
    return from_record(kept, root_hash(root.cgroup_parent()), st.id)


def check_unused(root: Root, net: Net) -> None:
    """Refuse an address another sandbox of this root keeps on the same bridge (running
    or waiting for its restore): two would answer ARP for it."""
    from ckpt.errors import CkptError

    for other in root.ids():
        try:
            kept = root.read(other).extra.get(KEY)
        except CkptError:
            continue
        if isinstance(kept, dict) and (kept.get("bridge"), kept.get("ip")) == (
            net.bridge,
            net.ip,
        ):
            raise SandboxError(
                f"{net.ip} is sandbox {other}'s address on {net.bridge}; give another "
                f"--ip, or `ckpt delete {other}` first"
            )


def request_fields(net: Net | None) -> dict[str, str]:
    """What a boot or restore request carries so the listener is made on the address."""
    return {"host": net.ip, "netns": net.netns} if net is not None else {}


def remove_recorded(root: Root, st: SandboxState, *, strict: bool = True) -> None:
    """Remove the recorded namespace and veth of a sandbox being deleted or discarded.
    Not ``strict`` (``delete --force``, a failed start): a record naming something else
    leaves it alone, and a failure to remove is not raised."""
    try:
        net = of(root, st)
        if net is not None:
            remove(net)
    except SandboxError:
        if strict:
            raise
