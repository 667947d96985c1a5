"""Test hosts in network namespaces: reachable over the link, shaped by tbf, always removed.

Root-only (they skip with the reason otherwise); traffic stays inside the namespaces
made here.  The relay tests run on 127.0.0.1 and need nothing special.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from ckpt.bench.netns import (
    DelayRelay,
    host_network,
    list_namespaces,
    python_argv,
    unavailable_reason,
)

from . import netns_kit
from .netns_kit import read_line

needs_netns = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"skipped: {unavailable_reason()}"
)
PORT = 7400


@needs_netns
def test_hosts_reach_each_other_over_the_link(watchdog) -> None:
    with host_network(2) as bed:
        a, b = bed.hosts
        server = bed.python(a, netns_kit.tcp_echo, a.address, PORT, 20.0, stdout=subprocess.PIPE)
        assert read_line(server, 20) == "ready\n"
        done = bed.run(
            b,
            python_argv(netns_kit.tcp_client, a.address, PORT, 300_000, True, 20.0),
            timeout=30,
            capture_output=True,
            check=True,
        )
        out = json.loads(done.stdout)
        assert out["back"] == 300_000 and out["back_sha"] == out["sent"]
        names = [a.netns, b.netns, bed.switch]
        assert set(names) <= set(list_namespaces())
    assert not set(names) & set(list_namespaces())


@needs_netns
def test_tbf_shapes_the_link(watchdog) -> None:
    """The shaper's effect, measured on the kernel, in the one direction load cannot
    break: a busier machine only makes the transfer slower, never faster."""
    rate_bytes = 2_000_000  # 16 Mbit/s
    nbytes = 3_000_000
    with host_network(2, rate="16mbit", burst="64kb") as bed:
        a, b = bed.hosts
        for host in bed.hosts:
            shown = bed.qdisc(host)
            assert "tbf" in shown and "rate 16Mbit" in shown
        sink = bed.python(a, netns_kit.tcp_sink, a.address, PORT, 30.0, stdout=subprocess.PIPE)
        assert read_line(sink, 20) == "ready\n"
        bed.run(
            b,
            python_argv(netns_kit.tcp_client, a.address, PORT, nbytes, False, 30.0),
            timeout=60,
            capture_output=True,
            check=True,
        )
        result = json.loads(read_line(sink, 30))
    assert result["bytes"] == nbytes
    measured = nbytes / result["seconds"]
    print(f"tbf 16mbit: measured {measured / 1e6:.2f} MB/s")
    assert measured < 2 * rate_bytes


@needs_netns
def test_namespaces_are_removed_after_an_exception(watchdog) -> None:
    names: list[str] = []
    with pytest.raises(RuntimeError, match="boom"), host_network(2, rate="100mbit") as bed:
        names = [h.netns for h in bed.hosts] + [bed.switch]
        bed.python(bed.hosts[0], time.sleep, 30)  # a process inside: stopped at exit
        raise RuntimeError("boom")
    assert names and not set(names) & set(list_namespaces())
    assert all(p.poll() is not None for p in bed.processes)


HOLDER = """
import sys, time
from ckpt.bench.netns import host_network
with host_network(2) as bed:
    print(" ".join([h.netns for h in bed.hosts] + [bed.switch]), flush=True)
    time.sleep(60)
"""


@needs_netns
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_namespaces_are_removed_when_the_holder_is_signalled(watchdog, signum) -> None:
    from ckpt.bench.netns import child_env

    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, env=child_env())
    names: list[str] = []
    try:
        names = read_line(proc, 30).split()
        assert len(names) == 3 and set(names) <= set(list_namespaces())
        proc.send_signal(signum)
        proc.wait(30)
        left = set(names) & set(list_namespaces())
        assert not left, f"{signal.Signals(signum).name} left {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for name in set(names) & set(list_namespaces()):  # only what the holder made
            subprocess.run(["ip", "netns", "del", name], timeout=15, check=False)


def _echo_server(srv: socket.socket) -> None:
    conn, _ = srv.accept()
    with conn:
        conn.settimeout(20)
        while data := conn.recv(65536):
            conn.sendall(data)


def test_relay_forwards_intact_with_delay(watchdog) -> None:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        srv.settimeout(20)
        t = threading.Thread(target=_echo_server, args=(srv,))
        t.start()
        with DelayRelay(("127.0.0.1", 0), srv.getsockname()[:2], 25.0, lifetime=30) as relay:
            with socket.create_connection(relay.address, timeout=20) as c:
                start = time.monotonic()
                c.sendall(b"ping")
                assert c.recv(4) == b"ping"
                rtt = time.monotonic() - start
                payload = os.urandom(2_000_000)
                sender = threading.Thread(target=c.sendall, args=(payload,))
                sender.start()
                back = bytearray()
                while len(back) < len(payload) and (data := c.recv(65536)):
                    back += data
                sender.join(20)
            t.join(20)
    print(f"relay 25 ms each way: round trip {rtt * 1000:.1f} ms")
    assert hashlib.sha256(back).digest() == hashlib.sha256(payload).digest()
    assert relay.connections == 1


def test_relay_bounds_its_connections(watchdog) -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as srv,
        DelayRelay(
            ("127.0.0.1", 0), srv.getsockname()[:2], 1.0, max_connections=1, lifetime=30
        ) as relay,
    ):
        srv.settimeout(20)
        first = socket.create_connection(relay.address, timeout=20)
        upstream, _ = srv.accept()  # the first connection is forwarded
        second = socket.create_connection(relay.address, timeout=20)
        assert second.recv(1) == b""  # the second is closed at once
        first.close()
        second.close()
        upstream.close()
    assert relay.refused == 1


def test_relay_stops_at_its_lifetime(watchdog) -> None:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        relay = DelayRelay(("127.0.0.1", 0), srv.getsockname()[:2], 1.0, lifetime=0.2)
        with relay:
            relay._thread.join(20)
            assert not relay._thread.is_alive()
            with pytest.raises(OSError):
                socket.create_connection(relay.address, timeout=2).close()


@needs_netns
def test_what_a_killed_holder_left_is_found_and_removed(watchdog) -> None:
    """SIGKILL skips every ``finally``: the pid in the names lets a later run clean up."""
    from ckpt.bench.netns import child_env, remove_stale, stale_namespaces

    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, env=child_env())
    names: list[str] = []
    try:
        names = read_line(proc, 30).split()
        assert not set(names) & set(stale_namespaces())  # its holder is alive
        proc.kill()
        proc.wait(10)
        assert set(names) <= set(stale_namespaces())
        assert set(names) <= set(remove_stale())
        assert not set(names) & set(list_namespaces())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for name in set(names) & set(list_namespaces()):
            subprocess.run(["ip", "netns", "del", name], timeout=15, check=False)
