"""``ckpt migrate --forward``: a TCP relay on the source's old address for a while.

After a migration the sandbox serves at the destination; a client that still connects
to the old address would be refused.  The relay listens there and copies bytes both
ways to the new address, so such a client is served.  It stops accepting after the
given time and lets the connections it relays finish (each bounded by an idle
timeout), so it never runs on without end.

A relay only works toward an address this host reaches that is not its own: it
refuses, in one line, a new address equal to the one it listens on (it would dial
itself, once per connection, without end) and a loopback address reported by another
host (that host's loopback is not ours).  It relays at most ``MAX_CONNECTIONS`` at
once, two threads each; more clients wait in the listen backlog.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time

from ckpt.migration.errors import MigrationError

IDLE_S = 30.0  # a relayed connection silent this long is closed
BUF = 1 << 16
MAX_CONNECTIONS = 64  # relayed at once


def _ips(host: str) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses ``host`` names (an address literal names itself)."""
    try:
        return {ipaddress.ip_address(host.split("%")[0])}
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise MigrationError(f"--forward: cannot resolve {host}: {exc.strerror or exc}") from exc
    return {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}


def _is_local(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """``ip`` is one of this host's addresses: a socket can be bound to it."""
    if ip.is_loopback or ip.is_unspecified:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.bind((str(ip), 0))
        except OSError:
            return False
    return True


def check_target(old: tuple[str, int], new: tuple[str, int], destination: str | None) -> None:
    """Refuse, in one line, a relay from ``old`` to ``new`` that cannot work.
    ``destination`` is the host migrated to (None: not known, not checked)."""
    olds, news = _ips(old[0]), _ips(new[0])
    if new[1] == old[1]:
        wildcard = any(ip.is_unspecified for ip in olds)
        if olds & news or (wildcard and any(_is_local(ip) for ip in news)):
            raise MigrationError(
                f"--forward: the sandbox's new address {new[0]}:{new[1]} is the relay's own "
                f"({old[0]}:{old[1]}), so the relay would connect to itself: migrate with "
                "--port PORT to give it another port"
            )
    remote = destination is not None and not any(_is_local(ip) for ip in _ips(destination))
    if remote and any(ip.is_loopback for ip in news):
        raise MigrationError(
            f"--forward: the sandbox listens on {new[0]}:{new[1]} on {destination}, "
            "a loopback address no other host reaches: no relay from here can"
        )


def check_plan(old: tuple[str, int], destination: str, port: int | None) -> None:
    """Before migrating: refuse a relay bound to take the sandbox's own new address,
    which is so when the destination is this host and ``--port`` names the old port.
    Without ``--port`` the old port is taken there (the sandbox holds it until the
    move ends), so the destination picks another."""
    if port == old[1] and any(_is_local(ip) for ip in _ips(destination)):
        raise MigrationError(
            f"--forward: the destination {destination} is this host and the sandbox would "
            f"keep port {old[1]} there, where the relay listens: migrate with another "
            "--port PORT, or without --port"
        )


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


def _relay_one(
    client: socket.socket, new: tuple[str, int], idle: float, slot: threading.Semaphore
) -> None:
    try:
        try:
            upstream = socket.create_connection(new, timeout=idle)
        except OSError:
            client.close()
            return
        client.settimeout(idle)
        upstream.settimeout(idle)
        back = threading.Thread(target=_pump, args=(upstream, client), name="ckpt-relay")
        back.daemon = True
        back.start()
        _pump(client, upstream)
        back.join(idle)
        client.close()
        upstream.close()
    finally:
        slot.release()


def relay(
    old: tuple[str, int],
    new: tuple[str, int],
    *,
    seconds: float,
    deadline: float,
    destination: str | None = None,
    max_connections: int = MAX_CONNECTIONS,
    idle: float = IDLE_S,
) -> int:
    """Relay connections to ``old`` to ``new`` until ``deadline`` (monotonic); returns
    how many were relayed.  ``seconds`` is only for the error message; ``destination``
    is the host migrated to (see ``check_target``)."""
    try:
        check_target(old, new, destination)
    except MigrationError as exc:
        raise MigrationError(f"migrated, but not relaying {old[0]}:{old[1]}: {exc}") from exc
    try:
        lst = socket.create_server(old, reuse_port=False)
    except OSError as exc:
        raise MigrationError(
            f"migrated, but cannot relay {old[0]}:{old[1]} for {seconds:g} s: {exc.strerror or exc}"
        ) from exc
    slot = threading.BoundedSemaphore(max_connections)
    workers: list[threading.Thread] = []
    relayed = 0
    with lst:
        while (left := deadline - time.monotonic()) > 0:
            # a free slot first: clients past the bound wait in the backlog, not in threads
            if not slot.acquire(timeout=min(left, 0.5)):
                continue
            lst.settimeout(max(0.0, min(deadline - time.monotonic(), 0.5)))
            try:
                client, _ = lst.accept()
            except TimeoutError:
                slot.release()
                continue
            except OSError:  # out of descriptors: do not spin
                slot.release()
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
                continue
            t = threading.Thread(
                target=_relay_one, args=(client, new, idle, slot), name="ckpt-relay"
            )
            t.daemon = True
            t.start()
            workers = [w for w in workers if w.is_alive()] + [t]
            relayed += 1
    until = time.monotonic() + idle
    for t in workers:
        t.join(max(0.0, until - time.monotonic()))
    return relayed
