"""Test hosts on one LAN segment, for sandboxes that move with their address.

::

      namespace ...-sw (the LAN): br0
        |            |                |
      h0 (A)       h1 (B)           h2 (client)
      eth0 in sbr  eth0 in sbr      eth0 198.18.0.3
      sbr 198.18.0.1  sbr 198.18.0.2
       |  veths of A's sandboxes
       +- ...

Hosts A and B each have a bridge, ``sbr``, that enslaves their uplink, so a sandbox
whose veth joins ``sbr`` (``ckpt run --bridge sbr``) sits on the LAN's segment with
the client, and keeps its address when it moves from A to B.  A's uplink is shaped to
``rate`` (``tc tbf``).  Built on ``netns.host_network``, which removes every namespace
it made on any exit; the namespaces sandboxes get are named by ckpt and removed by
whoever made them (``ckpt delete``, or the test through ``Lan.sandbox_namespaces``).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

from ckpt.bench.netns import HostNetwork, NetnsHost, _ip, _tbf, host_network

BRIDGE = "sbr"
PREFIX_LEN = 24
SANDBOX_BASE = 100  # sandboxes get 198.18.0.100 and up


@dataclass
class Lan:
    net: HostNetwork
    bridge: str = BRIDGE
    made: list[str] = field(default_factory=list)  # sandbox namespaces to remove at exit

    @property
    def a(self) -> NetnsHost:
        return self.net.hosts[0]

    @property
    def b(self) -> NetnsHost:
        return self.net.hosts[1]

    @property
    def client(self) -> NetnsHost:
        return self.net.hosts[2]

    @property
    def switch(self) -> str:
        return self.net.switch

    def sandbox_ip(self, n: int) -> str:
        return f"198.18.0.{SANDBOX_BASE + n}"

    def nsenter(self, host: NetnsHost | str, argv: list[str], **kw) -> subprocess.Popen:  # type: ignore[no-untyped-def,type-arg]
        """Start ``argv`` in ``host``'s network namespace only (``nsenter --net``: the
        mount namespace stays, so ``/sys`` and cgroups are the real ones)."""
        name = host.netns if isinstance(host, NetnsHost) else host
        proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{name}", *argv], **kw)
        self.net.processes.append(proc)
        return proc

    def fdb_port(self, mac: str) -> str | None:
        """The LAN bridge's port where it last saw ``mac`` (None: not learned)."""
        out = _ip("bridge", "-n", self.switch, "fdb", "show", "br", "br0").stdout
        for line in out.splitlines():
            parts = line.split()
            if parts and parts[0] == mac and "dev" in parts:
                return parts[parts.index("dev") + 1]
        return None


def _enslave_uplink(host: NetnsHost, bridge: str) -> None:
    """The uplink becomes a port of ``bridge``, which takes the host's address and the
    uplink's MAC: set, so that it never changes as sandboxes' veths come and go (a
    bridge otherwise takes its ports' lowest MAC, and the LAN's neighbour caches
    would point at a MAC that left with a sandbox)."""
    ns = ("-n", host.netns)
    mac = json.loads(_ip("ip", *ns, "-j", "link", "show", "dev", host.device).stdout)[0]
    _ip("ip", *ns, "link", "add", bridge, "address", mac["address"], "type", "bridge")
    _ip("ip", *ns, "addr", "flush", "dev", host.device)
    _ip("ip", *ns, "link", "set", host.device, "master", bridge)
    _ip("ip", *ns, "addr", "add", f"{host.address}/{PREFIX_LEN}", "dev", bridge)
    _ip("ip", *ns, "link", "set", bridge, "up")


@contextlib.contextmanager
def lan(rate: str | None = "1gbit", burst: str = "256kb") -> Iterator[Lan]:
    """Hosts A and B (each with bridge ``sbr`` on its uplink) and a client on one LAN;
    every namespace, and every sandbox namespace named in ``made``, removed on exit."""
    with host_network(3) as net:
        bed = Lan(net)
        try:
            for host in (bed.a, bed.b):
                _enslave_uplink(host, bed.bridge)
            if rate is not None:
                _tbf(bed.a.netns, bed.a.device, rate, burst)
            yield bed
        finally:
            for name in bed.made:
                _ip("ip", "netns", "del", name, check=False)
