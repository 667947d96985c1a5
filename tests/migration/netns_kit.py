"""Programs the namespace tests run inside a namespace (through ``HostNetwork.python``).

Each is bounded in time and prints one JSON line (or ``ready``) on stdout.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import socket
import subprocess
import time


def tcp_echo(host: str, port: int, lifetime: float) -> None:
    """Echo one connection back, then exit."""
    with socket.create_server((host, port)) as srv:
        srv.settimeout(lifetime)
        print("ready", flush=True)
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(lifetime)
            while data := conn.recv(65536):
                conn.sendall(data)


def tcp_sink(host: str, port: int, lifetime: float) -> None:
    """Count one connection's bytes and the seconds from first byte to EOF."""
    with socket.create_server((host, port)) as srv:
        srv.settimeout(lifetime)
        print("ready", flush=True)
        conn, _ = srv.accept()
        total, first = 0, None
        with conn:
            conn.settimeout(lifetime)
            while data := conn.recv(65536):
                first = first or time.monotonic()
                total += len(data)
        print(json.dumps({"bytes": total, "seconds": time.monotonic() - (first or 0)}))


def tcp_client(host: str, port: int, nbytes: int, echo: bool, timeout: float) -> None:
    """Send ``nbytes`` (retrying the connect until ``timeout``); print what came back."""
    deadline = time.monotonic() + timeout
    payload = os.urandom(nbytes)
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        back = bytearray()
        while echo and (data := sock.recv(65536)):
            back += data
    print(json.dumps({"sent": hashlib.sha256(payload).hexdigest(), "back": len(back),
                      "back_sha": hashlib.sha256(back).hexdigest()}))  # fmt: skip


def read_line(proc: subprocess.Popen, timeout: float) -> str:
    """One line of ``proc``'s stdout, or AssertionError after ``timeout`` seconds."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no output from {proc.args[-3:]} within {timeout} s"
    return proc.stdout.readline().decode()
