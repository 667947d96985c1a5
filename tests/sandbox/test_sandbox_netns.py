"""A sandbox with an address of its own (``run --bridge BR --ip ADDR/PREFIX``): reached
on that address, kept across checkpoint and restore (same address, same MAC, state
continued), and removed by ``delete``; refused requests leave nothing behind.

Every ckpt command runs inside a test-made "host" namespace holding the bridge, so the
machine's own network never gains an interface; everything is removed on the way out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ckpt.errors import SandboxError
from ckpt.sandbox.host.http import bind
from ckpt.sandbox.wire import netns
from ckpt.sandbox.wire.paths import Root

from .conftest import sandbox_processes

BRIDGE = "br0"
GATEWAY = "198.18.9.1/24"
ADDR = "198.18.9.10"
PORT = 8080


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=15, check=check)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        return "needs ip (iproute2) and nsenter"
    return None


@dataclass
class NetHost:
    name: str
    root: Path

    @property
    def enter(self) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.name}"]

    def ckpt(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
        for key in ("CKPT_FAULT", "CKPT_TEMPLATE"):
            env.pop(key, None)
        return subprocess.run(
            [*self.enter, sys.executable, "-m", "ckpt", "--root", str(self.root), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )

    def get(self, host: str, port: int) -> dict:
        """GET / from the host namespace, as a client beside the bridge would."""
        code = f"import json; from ckpt.sandbox.host.http import get_json; print(json.dumps(get_json({host!r}, {port})))"
        done = subprocess.run(
            [*self.enter, sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        status, body = json.loads(done.stdout)
        assert status == 200
        return body

    def links(self) -> str:
        return _ip("-n", self.name, "-o", "link").stdout

    def ours(self) -> list[str]:
        """The namespaces ckpt made for this root."""
        mine = netns.PREFIX + netns.root_hash(Root(self.root).cgroup_parent())
        listed = _ip("netns", "list").stdout.split("\n")
        return [line.split()[0] for line in listed if line.startswith(mine + "-")]


@pytest.fixture
def host(tmp_path: Path, watchdog: None) -> Iterator[NetHost]:
    if why := _why_not():
        pytest.skip(why)
    th = NetHost(f"cktest-{os.getpid()}-host", tmp_path / "root")
    _ip("netns", "del", th.name, check=False)
    try:
        _ip("netns", "add", th.name)
        inside = ("-n", th.name)
        _ip(*inside, "link", "set", "dev", "lo", "up")
        _ip(*inside, "link", "add", BRIDGE, "type", "bridge")
        _ip(*inside, "addr", "add", GATEWAY, "dev", BRIDGE)
        _ip(*inside, "link", "set", "dev", BRIDGE, "up")
        yield th
    finally:
        r = Root(th.root)
        for sandbox_id in r.ids() if th.root.is_dir() else []:
            th.ckpt("delete", "--force", sandbox_id)
        th.ckpt("template", "stop")
        left = th.ours() if th.root.exists() else []
        for name in left:
            _ip("netns", "del", name, check=False)
        _ip("netns", "del", th.name, check=False)
        assert left == [], f"namespaces left behind: {left}"
        assert sandbox_processes(th.root) == []


@pytest.mark.slow
def test_address_and_mac_survive_checkpoint_and_restore(host: NetHost, tmp_path: Path) -> None:
    done = host.ckpt(
        "run", "s1", "-w", "http", "--bridge", BRIDGE, "--ip", f"{ADDR}/24", "--port", str(PORT)
    )
    assert done.returncode == 0, done.stderr
    st = json.loads(host.ckpt("state", "s1").stdout)
    assert st["address"] == f"{ADDR}:{PORT}"
    net = st["extra"]["net"]
    assert (net["bridge"], net["ip"], net["prefix"]) == (BRIDGE, ADDR, 24)
    first = int(net["mac"].split(":")[0], 16)
    assert first & 0x02 and not first & 0x01  # locally administered, unicast
    assert host.ours() == [net["netns"]]
    eth0 = _ip("-n", net["netns"], "-j", "addr", "show", "dev", "eth0").stdout
    shown = json.loads(eth0)[0]
    assert shown["address"] == net["mac"]
    v4 = [(a["local"], a["prefixlen"]) for a in shown["addr_info"] if a["family"] == "inet"]
    assert v4 == [(ADDR, 24)]
    assert f"{net['veth']}@" in host.links() and f"master {BRIDGE}" in host.links()

    before = host.get(ADDR, PORT)
    assert before["restores"] == 0
    done = host.ckpt("run", "s2", "-w", "http", "--bridge", BRIDGE, "--ip", f"{ADDR}/25")
    assert done.returncode != 0 and f"{ADDR} is sandbox s1's address" in done.stderr
    assert not (host.root / "s2").exists() and host.ours() == [net["netns"]]

    image = tmp_path / "img"
    done = host.ckpt("checkpoint", "s1", "--image-path", str(image))
    assert done.returncode == 0, done.stderr
    assert host.ours() == [net["netns"]]  # the namespace waits for the restore

    done = host.ckpt("restore", "s1", "--image-path", str(image))
    assert done.returncode == 0, done.stderr
    after = json.loads(host.ckpt("state", "s1").stdout)
    assert after["address"] == f"{ADDR}:{PORT}"
    assert after["extra"]["net"] == net
    body = host.get(ADDR, PORT)
    assert (body["id"], body["restores"]) == (before["id"], 1)
    assert body["requests"] == before["requests"] + 1  # the state went on
    shown = json.loads(_ip("-n", net["netns"], "-j", "link", "show", "dev", "eth0").stdout)
    assert shown[0]["address"] == net["mac"]

    # Its namespace removed behind its back between checkpoint and restore: the restore
    # makes it again from the record, and listens in the new one, not on a held socket
    # of the old (which nothing reaches).
    done = host.ckpt("checkpoint", "s1", "--image-path", str(image), "--force")
    assert done.returncode == 0, done.stderr
    _ip("netns", "del", net["netns"])
    done = host.ckpt("restore", "s1", "--image-path", str(image))
    assert done.returncode == 0, done.stderr
    assert "listener handed over" not in done.stdout + done.stderr
    body = host.get(ADDR, PORT)
    assert (body["id"], body["restores"]) == (before["id"], 2)
    shown = json.loads(_ip("-n", net["netns"], "-j", "link", "show", "dev", "eth0").stdout)
    assert shown[0]["address"] == net["mac"]

    done = host.ckpt("delete", "--force", "s1")
    assert done.returncode == 0, done.stderr
    assert host.ours() == []
    assert net["veth"] not in host.links()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--bridge", "nosuchbr", "--ip", f"{ADDR}/24"], "no bridge nosuchbr"),
        (["--bridge", "lo", "--ip", f"{ADDR}/24"], "lo is not a bridge"),
        (["--bridge", BRIDGE, "--ip", ADDR], "bad --ip"),
        (["--bridge", BRIDGE, "--ip", "198.18.9.0/24"], "bad --ip"),
        (["--bridge", BRIDGE, "--ip", "300.1.1.1/24"], "bad --ip"),
        (["--ip", f"{ADDR}/24"], "--ip needs --bridge"),
        (["--bridge", BRIDGE], "needs --ip"),
        (["-w", "nosuch:1", "--bridge", BRIDGE, "--ip", f"{ADDR}/24"], ""),  # fails in boot
    ],
)
def test_refused_run_is_one_line_and_leaves_nothing(
    host: NetHost, args: list[str], says: str
) -> None:
    workload = [] if "-w" in args else ["-w", "http"]
    done = host.ckpt("run", "s2", *workload, *args)
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert not (host.root / "s2").exists()
    assert host.ours() == []
    assert "ckv" not in host.links()


# -- without root ----------------------------------------------------------------------


def test_parse_ip_takes_a_host_address_with_its_prefix() -> None:
    assert netns.parse_ip("198.18.0.10/24") == ("198.18.0.10", 24)
    assert netns.parse_ip("198.18.0.1/31") == ("198.18.0.1", 31)
    for bad in ("198.18.0.10", "198.18.0.0/24", "198.18.0.255/24", "127.0.0.5/8", "x/24"):
        with pytest.raises(SandboxError):
            netns.parse_ip(bad)


def test_new_mac_is_unicast_and_locally_administered() -> None:
    for _ in range(64):
        mac = netns.new_mac()
        first = int(mac[:2], 16)
        assert first & 0x02 and not first & 0x01, mac
        assert len(bytes.fromhex(mac.replace(":", ""))) == 6


def test_a_record_naming_another_namespace_is_not_trusted() -> None:
    hash_ = "0123456789ab"
    ns_name, veth = netns.names(hash_, "s1")
    good = {
        "bridge": BRIDGE,
        "ip": ADDR,
        "prefix": 24,
        "mac": "02:00:00:00:00:01",
        "netns": ns_name,
        "veth": veth,
    }
    assert netns.from_record(good, hash_, "s1") == netns.Net(**good)
    assert netns.from_record(None, hash_, "s1") is None
    for change in (
        {"netns": "someone-else"},
        {"veth": "eth0"},
        {"bridge": "-rf"},
        {"mac": "not a mac"},
        {"ip": "127.0.0.1"},
        {"prefix": "24"},
        {"extra": 1},
    ):
        with pytest.raises(SandboxError):
            netns.from_record({**good, **change}, hash_, "s1")
    with pytest.raises(SandboxError):  # the same record under another sandbox's ID
        netns.from_record(good, hash_, "s2")


def test_listen_refuses_a_namespace_ckpt_did_not_name() -> None:
    for name in ("../../proc/1/ns/net", "other", netns.PREFIX + "x/../../y"):
        with pytest.raises(OSError):
            netns.listen(name, "127.0.0.1", 0, bind)


def test_a_copied_run_netns_is_refused(tmp_path: Path) -> None:
    """Under ``ip netns exec`` /run/netns only receives mounts: a namespace named there
    would be gone for the next command, so naming one is refused in one line."""
    shared = "45 27 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw\n"
    slave = "68 48 254:0 /run/netns /run/netns rw,relatime master:1 - ext4 /dev/vda rw\n"
    info = tmp_path / "mountinfo"
    for text in (shared, "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n", ""):
        info.write_text(text)
        netns.check_mount_ns(str(info))
    info.write_text(slave)
    with pytest.raises(SandboxError, match="nsenter --net"):
        netns.check_mount_ns(str(info))


def test_an_offer_with_a_malformed_address_is_refused() -> None:
    from ckpt.migration import messages as m
    from ckpt.migration.errors import FrameError
    from ckpt.migration.session import check_offer

    good = {"sandbox_id": "s1", "workload": "http", "engine": "", "pages": 8, "nonce": b"n" * 32}
    check_offer(m.Offer(**good))
    check_offer(m.Offer(**good, ip=ADDR, prefix=24, mac="02:00:00:00:00:01"))
    for bad in (
        {"ip": ADDR},
        {"ip": ADDR, "prefix": 24, "mac": "03:00:00:00:00:01"},  # multicast
        {"ip": ADDR, "prefix": 24, "mac": "02:00:00:00:00:01; rm"},
        {"ip": "127.0.0.1", "prefix": 8, "mac": "02:00:00:00:00:01"},
        {"ip": ADDR, "prefix": 33, "mac": "02:00:00:00:00:01"},
        {"ip": "198.18.9.0", "prefix": 24, "mac": "02:00:00:00:00:01"},
    ):
        with pytest.raises(FrameError):
            check_offer(m.Offer(**good, **bad))
