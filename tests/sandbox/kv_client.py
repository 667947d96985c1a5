"""A small client for ``kv:N`` sandboxes in tests: PUT values on one keep-alive
connection and keep the acknowledged ones, then check every one of them is served."""

from __future__ import annotations

import http.client
from collections.abc import Iterable


def put_values(address: tuple[str, int], items: Iterable[tuple[str, bytes]]) -> dict[str, bytes]:
    """PUT each ``(key, value)`` in order; returns what was acknowledged (the last
    acknowledged value of each key)."""
    conn = http.client.HTTPConnection(*address, timeout=60)
    acked = {}
    try:
        for key, data in items:
            conn.request("PUT", f"/kv/{key}", body=data)
            reply = conn.getresponse()
            reply.read()
            if reply.status == 200:
                acked[key] = data
    finally:
        conn.close()
    return acked


def check_values(address: tuple[str, int], acked: dict[str, bytes]) -> None:
    """Every acknowledged value is served back exactly."""
    conn = http.client.HTTPConnection(*address, timeout=60)
    try:
        for key, data in acked.items():
            conn.request("GET", f"/kv/{key}")
            reply = conn.getresponse()
            assert (reply.status, reply.read()) == (200, data), key
    finally:
        conn.close()
