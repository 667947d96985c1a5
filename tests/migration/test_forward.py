"""``migrate --forward``'s relay: refused in one line where it cannot work (toward its
own address, toward another host's loopback), and bounded in connections and threads
however many clients come."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt.migration import MigrationError
from ckpt.migration.forward import relay
from ckpt.sandbox.wire.paths import STOPPED, Root, SandboxState
from tests.sandbox.waiting import wait_for

from .conftest import key_file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _relay_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "ckpt-relay")


def _refused(old: tuple[str, int], new: tuple[str, int], **kw: object) -> str:
    """Run the relay; it must refuse at once, bind nothing and start no thread."""
    before = _relay_threads()
    with pytest.raises(MigrationError) as info:
        relay(old, new, seconds=5, deadline=time.monotonic() + 5, **kw)  # type: ignore[arg-type]
    assert _relay_threads() == before
    with pytest.raises(ConnectionRefusedError), socket.create_connection(old, timeout=5):
        pass  # nothing listens on the old address
    line = str(info.value)
    assert "\n" not in line and line.startswith("migrated, but not relaying")
    return line


def test_a_relay_to_its_own_address_is_refused_in_one_line(watchdog) -> None:
    port = _free_port()
    line = _refused(("127.0.0.1", port), ("127.0.0.1", port))
    assert "connect to itself" in line and "--port" in line


def test_a_relay_toward_a_name_of_its_own_address_is_refused(watchdog) -> None:
    port = _free_port()
    assert "connect to itself" in _refused(("127.0.0.1", port), ("localhost", port))


def test_a_relay_on_every_address_is_refused_toward_a_local_one_on_its_port(watchdog) -> None:
    port = _free_port()
    assert "connect to itself" in _refused(("0.0.0.0", port), ("127.0.0.2", port))


def test_a_relay_to_another_hosts_loopback_is_refused(watchdog) -> None:
    # 198.18.0.2 is no address of this host: the sandbox's 127.0.0.1 is that host's
    line = _refused(
        ("127.0.0.1", _free_port()), ("127.0.0.1", _free_port()), destination="198.18.0.2"
    )
    assert "loopback" in line


@contextlib.contextmanager
def holding_upstream() -> Iterator[tuple[tuple[str, int], list[socket.socket]]]:
    """A server that accepts and holds every connection, answering nothing."""
    held: list[socket.socket] = []
    stop = threading.Event()
    with socket.create_server(("127.0.0.1", 0), backlog=128) as srv:
        srv.settimeout(0.2)

        def accept() -> None:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    held.append(srv.accept()[0])

        t = threading.Thread(target=accept)
        t.start()
        try:
            yield srv.getsockname()[:2], held
        finally:
            stop.set()
            t.join(10)
            for s in held:
                s.close()


def test_many_clients_keep_the_relays_threads_bounded(watchdog) -> None:
    bound = 3
    old = ("127.0.0.1", _free_port())
    with holding_upstream() as (new, held):
        done: list[int] = []
        runner = threading.Thread(
            target=lambda: done.append(
                relay(
                    old,
                    new,
                    seconds=6,
                    deadline=time.monotonic() + 6,
                    max_connections=bound,
                    idle=2.0,
                )
            )
        )
        runner.start()
        clients: list[socket.socket] = []
        try:
            wait_for(lambda: _listening(old), "the relay to listen", 10)
            for _ in range(20):
                c = socket.create_connection(old, timeout=10)  # the backlog takes them
                c.sendall(b"x")
                clients.append(c)
            wait_for(lambda: len(held) >= bound, "the relay to connect upstream", 10)
            time.sleep(0.5)  # room for more to go through, were they not bounded
            assert len(held) == bound
            assert _relay_threads() <= 2 * bound
        finally:
            for c in clients:
                c.close()
            runner.join(30)
    assert not runner.is_alive() and done and done[0] <= 20


def _listening(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=1).close()
    except OSError:
        return False
    return True


def test_migrate_refuses_forward_before_moving_when_it_would_relay_to_itself(
    tmp_path: Path,
) -> None:
    """To this same host with its own port asked for, the sandbox would come back on
    the relay's own address: refused in one line before anything is sent."""
    root = Root(tmp_path / "root")
    root.ensure()
    root.write(SandboxState("fw1", 0, STOPPED, "kv:1", None, "now", address="127.0.0.1:7999"))
    key = key_file(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt", "--root", str(root.path), "migrate", "fw1",
         "--to", "127.0.0.1:1", "--key-file", key, "--forward", "5", "--port", "7999"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "--forward" in lines[0] and "--port PORT" in lines[0]


def test_forward_to_this_host_is_planned_when_the_port_may_change() -> None:
    """Without --port the sandbox cannot keep its port on this host (the source holds
    it), so it serves on another and the relay on the old one is useful; naming the
    old port with --port is refused before anything moves."""
    from ckpt.migration.forward import check_plan

    check_plan(("127.0.0.1", 8090), "127.0.0.1", None)
    check_plan(("127.0.0.1", 8090), "127.0.0.1", 9000)
    with pytest.raises(MigrationError, match="--port"):
        check_plan(("127.0.0.1", 8090), "127.0.0.1", 8090)
