"""Channels over loopback for the migration tests: a listener, a client, and their ends."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ckpt.migration import Channel, Listener, connect

from .migrate_kit import hosts  # noqa: F401  (the two-host fixture)

SECRET = bytes(range(32))


def open_pair(
    secret: bytes = SECRET,
    client_secret: bytes | None = None,
    *,
    server_options: dict | None = None,
    client_options: dict | None = None,
) -> tuple[Channel, Channel]:
    """A connected ``(client, server)`` pair over 127.0.0.1; raises what either side raised."""
    server_options = server_options or {}
    client_options = client_options or {}
    tls = server_options.pop("tls", None)
    with Listener("127.0.0.1", 0, secret, tls=tls, **server_options) as lst:
        result: dict[str, object] = {}

        def serve() -> None:
            try:
                result["server"] = lst.accept(timeout=10)
            except BaseException as exc:  # handed to the test thread
                result["error"] = exc

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            client = connect(*lst.address, client_secret or secret, **client_options)
        finally:
            t.join(15)
        if "error" in result:
            raise result["error"]  # type: ignore[misc]
        return client, result["server"]  # type: ignore[return-value]


@pytest.fixture
def pair(watchdog: None) -> Iterator[tuple[Channel, Channel]]:
    client, server = open_pair()
    try:
        yield client, server
    finally:
        client.close()
        server.close()


@pytest.fixture
def pair_factory(watchdog: None) -> Iterator[Callable[..., tuple[Channel, Channel]]]:
    made: list[Channel] = []

    def make(**kwargs: object) -> tuple[Channel, Channel]:
        client, server = open_pair(**kwargs)  # type: ignore[arg-type]
        made.extend((client, server))
        return client, server

    yield make
    for ch in made:
        ch.close()


def raw_send(ch: Channel, data: bytes) -> None:
    """Write bytes on ``ch``'s socket behind its back, as a hostile peer would."""
    ch._wire.sock.sendall(data)


def seal(ch: Channel, msg) -> bytes:  # type: ignore[no-untyped-def]
    """The frame ``ch`` would send for ``msg`` (its sequence number advances)."""
    from ckpt.migration import messages

    return ch._sealer.seal(msg.KIND, messages.encode(msg))


def key_file(tmp_path: Path, data: bytes = SECRET, mode: int = 0o600) -> str:
    path = tmp_path / "key"
    path.write_bytes(data)
    os.chmod(path, mode)
    return str(path)
