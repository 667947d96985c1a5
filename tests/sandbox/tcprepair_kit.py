"""The half of the TCP repair tests that runs in another process, in the namespace a
connection moves to (started with ``nsenter --net``); bounded in time, one line out
per step."""

from __future__ import annotations

import json
import select
import sys
import time

from ckpt.sandbox.wire import netmove, netns, tcprepair


def restore_and_echo(net_record: dict, state_hex: str, lifetime: float) -> None:
    """Rebuild the connections in ``state_hex`` (the link still cut off), print
    ``restored``; on a line on stdin (the link attached) announce the address, leave
    repair mode and echo what arrives until the peer closes or ``lifetime`` ends;
    print how many bytes were echoed."""
    net = netns.Net(**net_record)
    states = tcprepair.decode(bytes.fromhex(state_hex))
    socks = [tcprepair.restore(s) for s in states]
    print("restored", flush=True)
    ready, _, _ = select.select([sys.stdin], [], [], lifetime)
    assert ready and sys.stdin.readline().strip() == "go"
    netmove.announce(net)
    for sock, state in zip(socks, states, strict=True):
        tcprepair.resume(sock, state)
    sock = socks[0]
    deadline = time.monotonic() + lifetime
    echoed = 0
    while time.monotonic() < deadline:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        data = sock.recv(65536)
        if not data:
            break
        sock.sendall(data)
        echoed += len(data)
    print(json.dumps({"echoed": echoed}), flush=True)
