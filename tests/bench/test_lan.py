"""The LAN test hosts: A and B with a bridge on their uplink, a client, one segment;
A's uplink shaped; everything removed on the way out, also when the body fails.
Root-only: skipped with the reason otherwise."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from ckpt.bench.lan import lan
from ckpt.bench.netns import list_namespaces, unavailable_reason
from ckpt.sandbox.wire.netmove import in_netns
from ckpt.sandbox.wire.netmove import netns_path as _path

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"skipped: {unavailable_reason()}"
)


def _ip_json(netns: str, *args: str) -> list[dict]:
    done = subprocess.run(["ip", "-n", netns, "-j", *args], capture_output=True, text=True,
                          timeout=15, check=True)  # fmt: skip
    return json.loads(done.stdout)


class Boom(Exception):
    pass


def test_hosts_share_one_segment_and_are_removed_even_on_failure() -> None:
    names: list[str] = []
    with pytest.raises(Boom), lan() as bed:
        names = [h.netns for h in bed.net.hosts] + [bed.switch]
        bed.made.append("ckpt-sb-lantest-gone")
        subprocess.run(["ip", "netns", "add", "ckpt-sb-lantest-gone"], check=True, timeout=15)
        for host in (bed.a, bed.b):
            (eth,) = _ip_json(host.netns, "link", "show", "dev", host.device)
            assert eth.get("master") == bed.bridge  # the uplink is a port of the bridge
            (br_link,) = _ip_json(host.netns, "link", "show", "dev", bed.bridge)
            assert br_link["address"] == eth["address"]  # set: veths joining never change it
            (br,) = _ip_json(host.netns, "addr", "show", "dev", bed.bridge)
            assert [a["local"] for a in br["addr_info"] if a["family"] == "inet"] == [host.address]
        a_mac = _ip_json(bed.a.netns, "link", "show", "dev", bed.bridge)[0]["address"]
        ns = ("ip", "-n", bed.a.netns, "link")
        subprocess.run([*ns, "add", "lowmac", "address", "02:00:00:00:00:01", "type", "veth",
                        "peer", "name", "lowmac1"], check=True, timeout=15)  # fmt: skip
        subprocess.run([*ns, "set", "lowmac", "master", bed.bridge], check=True, timeout=15)
        # a sandbox's veth with a lower MAC joining does not change the bridge's
        assert _ip_json(bed.a.netns, "link", "show", "dev", bed.bridge)[0]["address"] == a_mac
        assert "tbf" in bed.net.qdisc(bed.a) and "tbf" not in bed.net.qdisc(bed.b)
        server = in_netns(_path(bed.a.netns), lambda: socket.create_server((bed.a.address, 0)))
        with server:
            port = server.getsockname()[1]
            addr = (bed.a.address, port)
            conn = in_netns(_path(bed.client.netns), lambda: socket.create_connection(addr, 10))
            conn.close()  # the client reaches A across the LAN and A's bridge
        raise Boom
    assert names and not {*names, "ckpt-sb-lantest-gone"} & set(list_namespaces())
