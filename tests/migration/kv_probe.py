"""Run inside a test host's namespace (``HostNetwork.python``): talk to a ``kv:N``
sandbox on that host's 127.0.0.1 and print one JSON line.  Each call is bounded by the
HTTP client's timeout."""

from __future__ import annotations

import json
import sys

from ckpt.sandbox.host.http import get_json
from tests.sandbox.kv_client import check_values, put_values

HOST = "127.0.0.1"


def put_and_digest(port: int, first: int, count: int) -> None:
    """PUT ``count`` values, then print the acknowledged ones and the memory digest."""
    items = ((f"k{i % 50}", b"%06d-" % i * (1 + i % 200)) for i in range(first, first + count))
    acked = put_values((HOST, port), items)
    digest = get_json(HOST, port, "/memory", timeout=60)[1]["memory_sha256"]
    print(json.dumps({"acked": {k: v.hex() for k, v in acked.items()}, "digest": digest}))


def check_and_digest(port: int, acked_hex: dict[str, str]) -> None:
    """Check every acknowledged value, then print the memory digest."""
    check_values((HOST, port), {k: bytes.fromhex(v) for k, v in acked_hex.items()})
    digest = get_json(HOST, port, "/memory", timeout=60)[1]["memory_sha256"]
    print(json.dumps({"digest": digest}))
    sys.stdout.flush()


def get_at(host: str, port: int) -> None:
    """GET / from a sandbox with an address of its own; print the JSON it answers."""
    status, body = get_json(host, port, timeout=60)
    print(json.dumps({"status": status, **body}))
