"""Strangers and key holders against the migration server's accept path, in process:
idle floods, slowloris openings, connections past the caps, a key holder that trickles
valid frames to keep the one slot, a second key holder while a session runs.

Each adversary speaks the real protocol through the project's classes (``Wire``,
``connect``, the messages) against a ``Server`` on 127.0.0.1 whose limits are given
here, small, so that no case waits on a default deadline.  Flood connections come from
other loopback addresses (127.0.0.2 ...), each an address of its own to the server."""

from __future__ import annotations

import contextlib
import select
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt.migration import (
    Ack,
    DeadlineExceeded,
    ErrorCode,
    MigrationError,
    Offer,
    PeerClosed,
    PeerError,
    ServerTLS,
    connect,
    pack_pages,
)
from ckpt.migration.framing import Deadline, Wire
from ckpt.migration.handshake import MAGIC, OPENING
from ckpt.migration.serve import Limits, Server, listen
from ckpt.sandbox.wire.paths import Root
from tests.sandbox.conftest import sandbox_processes
from tests.sandbox.waiting import wait_for

from .conftest import SECRET
from .test_tls import _cert_with_openssl

PAGE = b"\x02" * 4096


@pytest.fixture(autouse=True)
def no_template(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """An accepted offer warms the root's template: none here, none left running."""
    monkeypatch.setenv("CKPT_TEMPLATE", "0")
    yield
    assert sandbox_processes(tmp_path / "root") == []


@contextlib.contextmanager
def running(
    tmp_path: Path, limits: Limits, tls: ServerTLS | None = None
) -> Iterator[tuple[Server, tuple[str, int], list]]:
    """A ``Server`` on 127.0.0.1 in a thread; yields it, its address, its log lines."""
    root = Root(tmp_path / "root")
    root.ensure()
    lines: list[str] = []
    with listen("127.0.0.1", 0, SECRET, tls=tls, limits=limits) as lst:
        server = Server(root, lst, limits=limits, say=lines.append)
        t = threading.Thread(target=server.run, daemon=True)
        t.start()
        try:
            yield server, lst.address, lines
        finally:
            server.stop()
            t.join(30)
    assert not t.is_alive(), "the server did not stop"


def stranger(address: tuple[str, int], source: str) -> socket.socket:
    """A TCP connection from ``source`` (a loopback address) that sends nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(address)
    return sock


def answer(sock: socket.socket, seconds: float = 10.0) -> str:
    """What the server does with a connection: "opening" (it started the handshake),
    "closed" (refused) or "silent" (nothing within ``seconds``)."""
    try:
        Wire(sock).read_exact(OPENING.size, Deadline(seconds), "the server's opening")
    except PeerClosed:
        return "closed"
    except DeadlineExceeded:
        return "silent"
    return "opening"


def slowloris(address: tuple[str, int], source: str, stop: threading.Event) -> None:
    """A valid opening, one byte every 0.2 s, until ``stop`` or the server cuts it."""
    opening = OPENING.pack(MAGIC, 1, bytes(32))
    with contextlib.suppress(OSError), stranger(address, source) as sock:
        for b in opening:
            if stop.wait(0.2):
                return
            sock.sendall(bytes([b]))


def offer(sid: str = "adv1") -> Offer:
    return Offer(sandbox_id=sid, workload="kv:1", engine="", pages=1 << 20, nonce=bytes(32))


def refused_offer(address: tuple[str, int]) -> PeerError:
    """A key holder's handshake and a bad offer: proof that it got the session slot
    (the session itself refuses the offer) without starting a sandbox."""
    with connect(*address, SECRET, connect_timeout=10, io_timeout=20) as ch:
        ch.send(offer("../escape"))
        with pytest.raises(PeerError) as info:
            ch.recv()
    return info.value


def test_a_flood_of_idle_and_slowloris_connections_does_not_stop_a_key_holder(
    tmp_path: Path, watchdog
) -> None:
    limits = Limits(handshake_s=30.0, per_address=3, pending=8)
    stop = threading.Event()
    with running(tmp_path, limits) as (server, address, lines):
        baseline = threading.active_count()
        # 6 addresses x 5 idle connections: past the backlog, each address's cap, the total
        flood = [stranger(address, f"127.0.0.{2 + i // 5}") for i in range(30)]
        lorises = [
            threading.Thread(target=slowloris, args=(address, f"127.0.0.{8 + i}", stop))
            for i in range(2)
        ]
        try:
            for t in lorises:
                t.start()
            # each is answered at once: a handshake begins or the caps close it (none
            # waits behind another's handshake); some that began are cut for newcomers
            assert "silent" not in [answer(s) for s in flood]
            got = refused_offer(address)
            assert got.code == ErrorCode.REFUSED and "refused the offer" in str(got)
            assert server.pending() <= limits.pending
            assert threading.active_count() <= baseline + 2 * limits.pending + len(lorises)
            # a flood of refusals is not a flood of log lines: ten, then a count
            assert sum("refused a peer" in line for line in lines) <= 10
        finally:
            stop.set()
            for t in lorises:
                t.join(10)
            for s in flood:
                s.close()


def test_connections_past_the_per_address_cap_are_closed_at_once(tmp_path: Path, watchdog) -> None:
    # the handshake deadline is far away: only the cap can close a connection here
    limits = Limits(handshake_s=60.0, per_address=3, pending=16)
    with running(tmp_path, limits) as (_server, address, lines):
        conns = [stranger(address, "127.0.0.2") for _ in range(6)]
        try:
            assert [answer(s) for s in conns] == ["opening"] * 3 + ["closed"] * 3
            # another address is not held to 127.0.0.2's count
            with stranger(address, "127.0.0.3") as other:
                assert answer(other) == "opening"
        finally:
            for s in conns:
                s.close()
    assert any("more than 3 unauthenticated connections" in line for line in lines)


def test_a_key_holder_trickling_valid_frames_is_cut_off_by_the_step_deadline(
    tmp_path: Path, watchdog
) -> None:
    """Each page frame comes well within the frame deadline, but the step (round 0)
    brings too little: the server ends the session, says why, and is free again."""
    limits = Limits(phase_s=1.0, phase_min_rate=float(1 << 20))
    with running(tmp_path, limits) as (_server, address, lines):
        stop = threading.Event()
        with connect(*address, SECRET, connect_timeout=10, io_timeout=30) as ch:
            ch.send(offer())
            assert isinstance(ch.recv(), Ack)

            def trickle() -> None:  # at most 60 frames, one every 0.25 s
                with contextlib.suppress(MigrationError):
                    for i in range(60):
                        if stop.wait(0.25):
                            return
                        ch.send(pack_pages(0, [(i, PAGE)]))

            t = threading.Thread(target=trickle)
            t.start()
            try:
                with pytest.raises(PeerError) as info:
                    ch.recv()
            finally:
                stop.set()
                t.join(30)
        assert "a step of the migration may take 1 s" in str(info.value)
        assert refused_offer(address).code == ErrorCode.REFUSED  # the slot is free
    assert any(line.startswith("migration failed") for line in lines)


def test_a_second_key_holder_is_told_the_server_is_busy(tmp_path: Path, watchdog) -> None:
    with (
        running(tmp_path, Limits(phase_s=60.0, slot_wait_s=0.5)) as (_server, address, _lines),
        connect(*address, SECRET, connect_timeout=10, io_timeout=30) as first,
    ):
        first.send(offer())
        assert isinstance(first.recv(), Ack)  # it holds the slot, silent
        got = refused_offer(address)
        assert got.code == ErrorCode.BUSY and "another migration" in str(got)


def test_a_tls_handshake_trickled_a_byte_at_a_time_is_cut_at_the_deadline(
    tmp_path: Path, watchdog
) -> None:
    """A byte every 0.3 s keeps each read of the TLS handshake short; the handshake
    deadline (``handshake_s``) covers TLS as a whole and cuts it."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    _cert_with_openssl(cert, key)
    with (
        running(tmp_path, Limits(handshake_s=1.0), tls=ServerTLS(cert, key)) as (
            _server,
            address,
            _lines,
        ),
        stranger(address, "127.0.0.2") as sock,
    ):
        hello = _client_hello()  # a real one, sent but for its last byte
        cut = False
        for i in range(min(100, len(hello) - 1)):  # 30 s at most
            try:
                sock.sendall(hello[i : i + 1])
            except OSError:
                cut = True  # reset
                break
            # anything to read (an alert, the end of the connection) means it was cut
            if select.select([sock], [], [], 0.3)[0]:
                cut = True
                break
        assert cut, "a trickled TLS handshake kept its connection past the deadline"


def _client_hello() -> bytes:
    """The first flight of a TLS client, made by ``ssl`` in memory."""
    import ssl

    ctx = ssl.create_default_context()
    tls = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="ckpt")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return out.read()


def test_serve_help_states_the_limits_it_enforces() -> None:
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "ckpt", "serve", "--help"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    text = " ".join(proc.stdout.split())
    lim = Limits()
    for said in (
        f"a connection has {lim.handshake_s:g} s",
        f"at most {lim.per_address} such connections come from one address",
        f"and {lim.pending} in all",
        f"{lim.phase_s:g} s plus 1 s per {int(lim.phase_min_rate) >> 10} KiB",
        f"waits up to {lim.slot_wait_s:g} s",
    ):
        assert said in text, f"ckpt serve --help does not say {said!r}"


class Flood:
    """Idle connections from ``sources`` (``per`` each) to a real ``ckpt serve``, each
    reopened as soon as the server closes it, until ``stop``; plus slowloris openings."""

    def __init__(self, address: tuple[str, int], sources: list[str], per: int) -> None:
        self.address, self.sources, self.per = address, sources, per
        self.stop = threading.Event()
        self.reopened = 0
        self.threads = [threading.Thread(target=self._idle)] + [
            threading.Thread(target=slowloris, args=(address, f"127.0.1.{i}", self.stop))
            for i in range(1, 3)
        ]

    def _idle(self) -> None:
        conns = {stranger(self.address, src): src for src in self.sources for _ in range(self.per)}
        try:
            for _ in range(1000):  # 0.2 s each: bounded however long the migration is
                if self.stop.is_set():
                    return
                readable = select.select(list(conns), [], [], 0.2)[0]
                for sock in readable:
                    with contextlib.suppress(OSError):
                        if sock.recv(4096):
                            continue  # the server's opening: it waits for ours
                    src = conns.pop(sock)
                    sock.close()
                    with contextlib.suppress(OSError):
                        conns[stranger(self.address, src)] = src
                        self.reopened += 1
        finally:
            for sock in conns:
                sock.close()

    def __enter__(self) -> Flood:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


@pytest.mark.slow
def test_a_migration_completes_through_a_flood_on_a_real_server(hosts) -> None:  # type: ignore[no-untyped-def]
    """Twelve addresses, five idle connections each, reopened as soon as they are cut,
    and two slowloris openings: past the backlog, the per-address cap and the total.
    A real migration into the same ``ckpt serve`` still goes through."""
    from .migrate_kit import running as running_ids

    sid = "flooded"
    hosts.src("run", sid, "--workload", "kv:8", "--port", "0", timeout=120)
    serve = hosts.serve()
    host, _, port = serve.address.rpartition(":")
    sources = [f"127.0.0.{i}" for i in range(2, 14)]
    with Flood((host, int(port)), sources, per=5) as flood:
        wait_for(lambda: flood.reopened > 0, "the server to cut a flood connection", 60)
        proc = hosts.migrate(sid, serve)
    assert proc.returncode == 0, proc.stderr
    assert running_ids(hosts.dst) == [sid] and running_ids(hosts.src) == []
    assert any(line.startswith(f"received {sid}") for line in serve.lines())
