"""``ckpt migrate --forward``: a TCP relay on the source's old address for a while.

After a migration the sandbox serves at the destination; a client that still connects
to the old address would be refused.  The relay listens there and copies bytes both
ways to the new address, so such a client is served.  It stops accepting after the
given time and lets the connections it relays finish (each bounded by an idle
timeout), so it never runs on without end.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from ckpt.migration.errors import MigrationError

IDLE_S = 30.0  # a relayed connection silent this long is closed
BUF = 1 << 16


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(BUF)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _relay_one(client: socket.socket, new: tuple[str, int]) -> None:
    try:
        upstream = socket.create_connection(new, timeout=IDLE_S)
    except OSError:
        client.close()
        return
    client.settimeout(IDLE_S)
    upstream.settimeout(IDLE_S)
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join(IDLE_S)
    client.close()
    upstream.close()


def relay(old: tuple[str, int], new: tuple[str, int], *, seconds: float, deadline: float) -> int:
    """Relay connections to ``old`` to ``new`` until ``deadline`` (monotonic); returns
    how many were relayed.  ``seconds`` is only for the error message."""
    try:
        lst = socket.create_server(old, reuse_port=False)
    except OSError as exc:
        raise MigrationError(
            f"migrated, but cannot relay {old[0]}:{old[1]} for {seconds:g} s: {exc.strerror or exc}"
        ) from exc
    workers: list[threading.Thread] = []
    with lst:
        while (left := deadline - time.monotonic()) > 0:
            lst.settimeout(min(left, 0.5))
            try:
                client, _ = lst.accept()
            except TimeoutError:
                continue
            t = threading.Thread(target=_relay_one, args=(client, new), daemon=True)
            t.start()
            workers.append(t)
    for t in workers:
        t.join(IDLE_S)
    return len(workers)
