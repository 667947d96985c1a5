"""``ckpt migrate`` between two hosts, each in its own network namespace made here
(198.18.0.0/15, a bridge), each with its own root and template; the namespaces are
removed whatever happens.  A migration moves memory and values to the other host, at
the same port; a link cut (veth down) in a round or while frozen leaves the source
running and nothing behind.  Root-only: they skip with the reason otherwise."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ckpt.bench.netns import HostNetwork, host_network, list_namespaces, unavailable_reason
from ckpt.sandbox.client import lifecycle
from ckpt.sandbox.wire.paths import Root
from tests.sandbox.conftest import sandbox_processes, stop_template
from tests.sandbox.waiting import wait_for

from . import kv_probe
from .migrate_kit import make_key, stopped

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"skipped: {unavailable_reason()}"),
]
SID = f"mign-{os.getpid()}"
SERVE_PORT = 7070
IO_TIMEOUT = "5"  # seconds: how soon a cut link is noticed


@dataclass
class Bed:
    net: HostNetwork
    src_root: Path
    dst_root: Path
    key: Path
    tmp: Path

    def ckpt(self, host: int, root: Path, *args: str, check: bool = True, **kw):  # type: ignore[no-untyped-def]
        argv = [sys.executable, "-m", "ckpt", "--root", str(root), *args]
        proc = self.net.run(
            self.net.hosts[host], argv, timeout=180, capture_output=True, text=True, **kw
        )
        if check:
            assert proc.returncode == 0, proc.stderr
        return proc

    def nsenter(self, host: int, root: Path, *args: str, check: bool = True):  # type: ignore[no-untyped-def]
        """``ckpt`` in ``host``'s network namespace but the test's mount namespace, where
        the namespaces a sandbox on a bridge gets outlive the command (not so under
        ``ip netns exec``, which ``ckpt`` refuses for them)."""
        argv = ["nsenter", f"--net=/run/netns/{self.net.hosts[host].netns}", sys.executable,
                "-m", "ckpt", "--root", str(root), *args]  # fmt: skip
        proc = subprocess.run(argv, timeout=180, capture_output=True, text=True,
                              env=self.net_env())  # fmt: skip
        if check:
            assert proc.returncode == 0, proc.stderr
        return proc

    def net_env(self) -> dict[str, str]:
        from ckpt.bench.netns import child_env

        return child_env()

    def port(self, root: Path) -> int:
        return int(lifecycle.state(Root(root), SID).address.rpartition(":")[2])

    def probe(self, host: int, func, *args):  # type: ignore[no-untyped-def]
        proc = self.net.python(self.net.hosts[host], func, *args, stdout=subprocess.PIPE)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        return json.loads(out)


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[Bed]:
    names: list[str] = []
    with host_network(2) as net:
        names = [h.netns for h in net.hosts] + [net.switch]
        b = Bed(net, tmp_path / "src", tmp_path / "dst", make_key(tmp_path / "key"), tmp_path)
        try:
            yield b
        finally:
            for proc in net.processes:  # serve: stop it before what it restored
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(30)
            for root in (b.src_root, b.dst_root):
                if root.is_dir():
                    for sid in Root(root).ids():
                        lifecycle.delete(Root(root), sid, force=True)
                stop_template(root)
                wait_for(lambda r=root: not sandbox_processes(r), "sandboxes to go", 30)
    assert not set(names) & set(list_namespaces())


def _serve(bed: Bed, *extra: str, nsenter: bool = False) -> subprocess.Popen[bytes]:
    log = open(bed.tmp / "serve.log", "wb")  # noqa: SIM115  (the child holds it)
    dst = bed.net.hosts[1]
    enter = ["nsenter", f"--net=/run/netns/{dst.netns}"] if nsenter else []
    argv = [*enter, sys.executable, "-m", "ckpt", "--root", str(bed.dst_root), "serve",
            "--listen", f"{dst.address}:{SERVE_PORT}", "--key-file", str(bed.key), *extra]  # fmt: skip
    env = {**bed.net_env(), "CKPT_MIGRATE_IO_TIMEOUT_S": IO_TIMEOUT}
    if nsenter:
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env)
        bed.net.processes.append(proc)  # stopped by the fixture, before the roots are emptied
    else:
        proc = bed.net.popen(dst, argv, stdout=log, stderr=log, env=env)
    log.close()
    wait_for(
        lambda: "listening on" in (bed.tmp / "serve.log").read_text() or proc.poll() is not None,
        "ckpt serve to listen",
        60,
    )
    assert proc.poll() is None, (bed.tmp / "serve.log").read_text()
    return proc


def _leftovers(bed: Bed) -> list[str]:
    incoming = bed.dst_root / ".incoming"
    found = [f"dst/{n}" for n in os.listdir(incoming)] if incoming.is_dir() else []
    return found + [f"src/{n}" for n in os.listdir(bed.src_root) if n.startswith(".migrate-")]


def test_migration_to_another_host_keeps_memory_values_and_port(bed: Bed) -> None:
    bed.ckpt(0, bed.src_root, "run", SID, "--workload", "kv:8", "--port", "0")
    port = bed.port(bed.src_root)
    before = bed.probe(0, kv_probe.put_and_digest, port, 0, 200)
    _serve(bed)
    dst = bed.net.hosts[1]
    proc = bed.ckpt(0, bed.src_root, "migrate", SID, "--to", f"{dst.address}:{SERVE_PORT}",
                    "--key-file", str(bed.key), "--json")  # fmt: skip
    report = json.loads(proc.stdout)
    assert report["address"].endswith(f":{port}")  # the same port, on the other host
    assert not Root(bed.src_root).exists(SID)
    assert bed.port(bed.dst_root) == port
    after = bed.probe(1, kv_probe.check_and_digest, port, before["acked"])
    assert after["digest"] == before["digest"]
    assert _leftovers(bed) == []


@pytest.mark.parametrize("phase", ["round", "frozen"])
def test_link_cut_leaves_the_source_running(bed: Bed, phase: str) -> None:
    bed.ckpt(0, bed.src_root, "run", SID, "--workload", "kv:8", "--port", "0")
    port = bed.port(bed.src_root)
    before = bed.probe(0, kv_probe.put_and_digest, port, 0, 100)
    _serve(bed)
    src, dst = bed.net.hosts
    argv = [sys.executable, "-m", "ckpt", "--root", str(bed.src_root), "migrate", SID,
            "--to", f"{dst.address}:{SERVE_PORT}", "--key-file", str(bed.key)]  # fmt: skip
    env = {**bed.net_env(), "CKPT_MIGRATE_IO_TIMEOUT_S": IO_TIMEOUT}
    env["CKPT_FAULT"] = f"pause:migrate:{phase}"
    cli = bed.net.popen(src, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        env=env)  # fmt: skip
    try:
        wait_for(lambda: stopped(cli), f"the migrate CLI to stop at {phase}", 120)
        bed.net.set_link(src, False)
        cli.send_signal(signal.SIGCONT)
        _, err = cli.communicate(timeout=120)
    finally:
        bed.net.set_link(src, True)
        if cli.poll() is None:
            cli.kill()
    # a failure, or a deadline passed (exit 124) when the cut link is noticed by one
    assert cli.returncode in (1, 124) and len(err.strip().splitlines()) == 1, err
    wait_for(lambda: _leftovers(bed) == [], "both sides to clean up", 60)
    wait_for(
        lambda: "migration failed" in (bed.tmp / "serve.log").read_text(),
        "the destination to give up",
        60,
    )
    assert Root(bed.dst_root).ids() == []
    assert lifecycle.state(Root(bed.src_root), SID).status == "running"
    after = bed.probe(0, kv_probe.check_and_digest, port, before["acked"])
    assert after["digest"] == before["digest"]


def test_serve_bridge_gives_an_arriving_sandbox_its_address_and_mac(bed: Bed) -> None:
    """Each host has a bridge of its own (two L2 segments); the sandbox leaves one and
    arrives on the other with the same address, MAC and state; the source's namespace
    goes with its copy."""
    addr, port = "198.18.40.10", 8080
    for h in bed.net.hosts:
        for argv in (["link", "add", "sbr", "type", "bridge"],
                     ["addr", "add", "198.18.40.1/24", "dev", "sbr"],
                     ["link", "set", "dev", "sbr", "up"]):  # fmt: skip
            subprocess.run(["ip", "-n", h.netns, *argv], check=True, timeout=15)
    under_exec = bed.ckpt(0, bed.src_root, "run", SID, "-w", "http", "--bridge", "sbr",
                          "--ip", f"{addr}/24", check=False)  # fmt: skip
    assert under_exec.returncode != 0 and "nsenter --net" in under_exec.stderr
    bed.nsenter(0, bed.src_root, "run", SID, "-w", "http", "--bridge", "sbr",
                "--ip", f"{addr}/24", "--port", str(port))  # fmt: skip
    src_net = lifecycle.state(Root(bed.src_root), SID).extra["net"]
    before = bed.probe(0, kv_probe.get_at, addr, port)
    refused = bed.nsenter(1, bed.dst_root, "serve", "--listen", "127.0.0.1:0", "--key-file",
                          str(bed.key), "--bridge", "nosuch", check=False)  # fmt: skip
    assert refused.returncode != 0 and "no bridge nosuch" in refused.stderr
    _serve(bed, "--bridge", "sbr", nsenter=True)
    dst = bed.net.hosts[1]
    proc = bed.nsenter(0, bed.src_root, "migrate", SID, "--to", f"{dst.address}:{SERVE_PORT}",
                       "--key-file", str(bed.key), "--json")  # fmt: skip
    assert json.loads(proc.stdout)["address"] == f"{addr}:{port}"
    st = lifecycle.state(Root(bed.dst_root), SID)
    net = st.extra["net"]
    assert st.address == f"{addr}:{port}"
    assert (net["ip"], net["prefix"], net["mac"], net["bridge"]) == (
        addr,
        24,
        src_net["mac"],
        "sbr",
    )
    after = bed.probe(1, kv_probe.get_at, addr, port)
    assert (after["id"], after["requests"]) == (before["id"], before["requests"] + 1)
    shown = subprocess.run(["ip", "-n", net["netns"], "-j", "link", "show", "dev", "eth0"],
                           capture_output=True, text=True, timeout=15, check=True)  # fmt: skip
    assert json.loads(shown.stdout)[0]["address"] == src_net["mac"]
    assert src_net["netns"] not in list_namespaces()  # the source's went with its copy
    bed.nsenter(1, bed.dst_root, "delete", "--force", SID)
    assert net["netns"] not in list_namespaces()
