"""A sandbox with its own address migrates from host A to host B on one LAN
(``ckpt.bench.lan``) and its clients do not notice: a keep-alive connection opened on
A goes on being answered from B, the same TCP connection, with no reset and no
request lost; a migration that fails leaves the source serving on its address with
the same connection alive.  Root-only: skipped with the reason otherwise."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ckpt.bench.lan import Lan, lan
from ckpt.bench.netns import child_env, list_namespaces, unavailable_reason
from ckpt.sandbox.client import lifecycle
from ckpt.sandbox.wire import netmove
from ckpt.sandbox.wire.paths import Root
from tests.sandbox.conftest import sandbox_processes, stop_template
from tests.sandbox.waiting import wait_for

from .migrate_kit import make_key, stopped

pytestmark = [
    pytest.mark.slow,
    pytest.mark.watchdog_s(300),
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"skipped: {unavailable_reason()}"),
]
SERVE_PORT = 7070
HTTP_PORT = 8080
WAIT_S = 60.0


@pytest.fixture(scope="module")
def net() -> Iterator[Lan]:
    names: list[str] = []
    with lan() as made:
        names = [h.netns for h in made.net.hosts] + [made.switch]
        yield made
    assert not set(names) & set(list_namespaces())


@dataclass
class Bed:
    lan: Lan
    tmp: Path
    key: Path
    roots: dict[str, Path] = field(default_factory=dict)
    serving: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def ckpt(self, host: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        where = self.lan.a if host == "a" else self.lan.b
        argv = ["nsenter", f"--net=/run/netns/{where.netns}", sys.executable, "-P", "-m",
                "ckpt", "--root", str(self.roots[host]), *args]  # fmt: skip
        env = {**child_env(), "CKPT_MIGRATE_IO_TIMEOUT_S": "10"}
        proc = subprocess.run(argv, timeout=180, capture_output=True, text=True, env=env)
        if check:
            assert proc.returncode == 0, proc.stderr
        return proc

    def serve(self, *, bridge: bool = True, pause_at: str | None = None) -> None:
        """``ckpt serve`` on B; without ``bridge``, on the bridge named as the source's;
        ``pause_at``: a step where it stops itself (``CKPT_FAULT=pause:STEP``)."""
        log = open(self.tmp / "serve.log", "wb")  # noqa: SIM115  (the child holds it)
        argv = [sys.executable, "-P", "-m", "ckpt", "--root", str(self.roots["b"]), "serve",
                "--listen", f"{self.lan.b.address}:{SERVE_PORT}", "--key-file", str(self.key),
                *(("--bridge", self.lan.bridge) if bridge else ())]  # fmt: skip
        env = {**child_env(), "CKPT_MIGRATE_IO_TIMEOUT_S": "10"}
        if pause_at is not None:
            env["CKPT_FAULT"] = f"pause:{pause_at}"
        proc = self.lan.nsenter(self.lan.b, argv, stdout=log, stderr=log, env=env)
        log.close()
        self.serving.append(proc)
        wait_for(
            lambda: (
                "listening on" in (self.tmp / "serve.log").read_text() or proc.poll() is not None
            ),
            "ckpt serve to listen",
            WAIT_S,
        )
        assert proc.poll() is None, (self.tmp / "serve.log").read_text()


@pytest.fixture
def bed(net: Lan, tmp_path: Path) -> Iterator[Bed]:
    b = Bed(net, tmp_path, make_key(tmp_path / "key"), {"a": tmp_path / "a", "b": tmp_path / "b"})
    try:
        yield b
    finally:
        for proc in b.serving:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        for root in b.roots.values():
            if root.is_dir():
                for sid in Root(root).ids():
                    lifecycle.delete(Root(root), sid, force=True)
            stop_template(root)
            wait_for(lambda r=root: not sandbox_processes(r), "sandboxes to go", 30)


class _Asker:
    """Calls ``ask`` in a loop from a thread until ``finish``; every error kept."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def ask(self) -> object:
        raise NotImplementedError

    def _loop(self) -> None:
        try:
            while not self.stop.is_set():
                self.ask()
        except BaseException as exc:
            self.errors.append(exc)

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the client hangs"


class KeepAlive(_Asker):
    """One keep-alive HTTP connection from the client host, asking GET / in a loop
    from a thread; every answer and every error kept."""

    def __init__(self, lan_: Lan, ip: str) -> None:
        path = netmove.netns_path(lan_.client.netns)
        self.sock = netmove.in_netns(
            path, lambda: socket.create_connection((ip, HTTP_PORT), timeout=WAIT_S)
        )
        self.ip = ip
        self.answers: list[dict] = []
        super().__init__()

    def ask(self) -> dict:
        req = f"GET / HTTP/1.1\r\nHost: {self.ip}\r\nConnection: keep-alive\r\n\r\n"
        self.sock.sendall(req.encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection"
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))  # fmt: skip
        while len(body) < length:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection mid-answer"
            body += chunk
        answer = json.loads(body)
        self.answers.append(answer)
        return answer


class NewConnections(_Asker):
    """A connection per request from the client host, one after another, from a
    thread: a refusal or reset is kept, as is each answer."""

    def __init__(self, lan_: Lan, ip: str) -> None:
        self.path = netmove.netns_path(lan_.client.netns)
        self.ip = ip
        self.answers = 0
        super().__init__()

    def ask(self) -> None:
        sock = netmove.in_netns(
            self.path, lambda: socket.create_connection((self.ip, HTTP_PORT), timeout=WAIT_S)
        )
        with sock:
            sock.sendall(f"GET / HTTP/1.1\r\nHost: {self.ip}\r\nConnection: close\r\n\r\n".encode())
            buf = b""
            while chunk := sock.recv(65536):
                buf += chunk
        assert buf.startswith(b"HTTP/1.1 200"), buf[:80]
        self.answers += 1


def _run_sandbox(bed: Bed, sid: str, ip: str, bridge: str | None = None) -> None:
    bed.ckpt("a", "run", sid, "-w", "http", "--bridge", bridge or bed.lan.bridge,
             "--ip", f"{ip}/24", "--port", str(HTTP_PORT))  # fmt: skip


def test_a_keep_alive_connection_follows_the_sandbox_to_another_host(bed: Bed) -> None:
    sid, ip = f"conn-{os.getpid()}", bed.lan.sandbox_ip(10)
    _run_sandbox(bed, sid, ip)
    client = KeepAlive(bed.lan, ip)
    first = client.ask()
    client.start()  # asking throughout the migration, on the one connection
    newcomers = NewConnections(bed.lan, ip)
    newcomers.start()  # and on a new connection each time
    bed.serve(bridge=False)  # B's bridge of the same name as A's
    out = bed.ckpt("a", "migrate", sid, "--to", f"{bed.lan.b.address}:{SERVE_PORT}",
                   "--key-file", str(bed.key), "--json", "--forward", "30")  # fmt: skip
    assert json.loads(out.stdout)["address"] == f"{ip}:{HTTP_PORT}"
    assert "no relay is needed" in out.stderr  # its address moved: nothing to relay
    during = len(client.answers)
    wait_for(lambda: len(client.answers) > during + 3 or client.errors, "answers from B", WAIT_S)
    wait_for(lambda: newcomers.answers > 3 or newcomers.errors, "answers to newcomers", WAIT_S)
    client.finish()
    newcomers.finish()
    assert client.errors == []  # no reset, no close, no lost answer
    assert newcomers.errors == []  # none refused: delayed until B answers
    assert not Root(bed.roots["a"]).exists(sid)
    assert lifecycle.state(Root(bed.roots["b"]), sid).status == "running"
    counts = [a["requests"] for a in client.answers]  # the first one included
    assert counts == sorted(counts) and len(set(counts)) == len(counts)  # none lost or twice
    after = client.ask()  # the same connection, answered by B's sandbox
    assert after["id"] == first["id"] and after["requests"] > counts[-1]
    client.sock.close()


PHASE_IP = {"round": 14, "frozen": 11, "restored": 12}


@pytest.mark.parametrize("phase", ["round", "frozen", "restored"])
def test_a_migration_failing_before_the_commit_leaves_the_connection_with_the_source(
    bed: Bed, phase: str
) -> None:
    """The destination dies before the connections are touched (round: pre-copy, the
    sandbox running), with them cut off and read but not sent (frozen), or rebuilt on
    the destination (restored): the source takes them back, reattaches its address and
    serves on, on the same connection, with no reset."""
    sid, ip = f"back-{os.getpid()}", bed.lan.sandbox_ip(PHASE_IP[phase])
    if phase == "round":  # a first round long enough to stop in: kv:8, not http
        bed.ckpt("a", "run", sid, "-w", "kv:8", "--bridge", bed.lan.bridge,
                 "--ip", f"{ip}/24", "--port", str(HTTP_PORT))  # fmt: skip
    else:
        _run_sandbox(bed, sid, ip)
    client = KeepAlive(bed.lan, ip)
    first = client.ask()
    client.start()
    bed.serve()
    argv = ["nsenter", f"--net=/run/netns/{bed.lan.a.netns}", sys.executable, "-P", "-m",
            "ckpt", "--root", str(bed.roots["a"]), "migrate", sid, "--to",
            f"{bed.lan.b.address}:{SERVE_PORT}", "--key-file", str(bed.key)]  # fmt: skip
    env = {**child_env(), "CKPT_MIGRATE_IO_TIMEOUT_S": "10"}
    env["CKPT_FAULT"] = f"pause:migrate:{phase}"
    cli = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env)  # fmt: skip
    try:
        wait_for(lambda: stopped(cli), f"the migrate CLI to stop at {phase}", 2 * WAIT_S)
        bed.serving[0].kill()  # the destination dies
        bed.serving[0].wait(WAIT_S)
        cli.send_signal(signal.SIGCONT)
        _, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode != 0 and len(err.strip().splitlines()) == 1, err
    _one_copy_on_a_serving_on(bed, sid, ip, client, first)


def _one_copy_on_a_serving_on(bed: Bed, sid: str, ip: str, client: KeepAlive, first: dict) -> None:
    """Exactly one copy runs, A's; it serves its address to a newcomer, and the
    client's connection lives on: answered again, none lost, no reset."""
    assert lifecycle.state(Root(bed.roots["a"]), sid).status == "running"
    wait_for(lambda: not Root(bed.roots["b"]).ids(), "B to remove what it restored", WAIT_S)
    during = len(client.answers)
    wait_for(lambda: len(client.answers) > during + 3 or client.errors, "answers", WAIT_S)
    client.finish()
    assert client.errors == []
    assert client.answers[-1]["id"] == first["id"]
    counts = [a["requests"] for a in client.answers]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)
    newcomer = NewConnections(bed.lan, ip)
    newcomer.ask()  # a new connection to its address is answered, by A
    assert newcomer.answers == 1
    assert client.ask()["id"] == first["id"]
    client.sock.close()


def test_a_destination_dying_with_the_connections_rebuilt_before_restored_gives_them_back(
    bed: Bed,
) -> None:
    """B has rebuilt the connections (in repair mode, silent) and stops before it says
    Restored; it is killed there.  The source hears the channel close, takes its
    connections back and serves on; B's guard removes what B restored."""
    sid, ip = f"rebuilt-{os.getpid()}", bed.lan.sandbox_ip(15)
    _run_sandbox(bed, sid, ip)
    client = KeepAlive(bed.lan, ip)
    first = client.ask()
    client.start()
    bed.serve(pause_at="serve:rebuilt")
    argv = ["nsenter", f"--net=/run/netns/{bed.lan.a.netns}", sys.executable, "-P", "-m",
            "ckpt", "--root", str(bed.roots["a"]), "migrate", sid, "--to",
            f"{bed.lan.b.address}:{SERVE_PORT}", "--key-file", str(bed.key)]  # fmt: skip
    env = {**child_env(), "CKPT_MIGRATE_IO_TIMEOUT_S": "10"}
    cli = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env)  # fmt: skip
    try:
        wait_for(lambda: stopped(bed.serving[0]), "ckpt serve to stop after the rebuild",
                 2 * WAIT_S)  # fmt: skip
        bed.serving[0].kill()
        bed.serving[0].wait(WAIT_S)
        _, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode != 0 and len(err.strip().splitlines()) == 1, err
    _one_copy_on_a_serving_on(bed, sid, ip, client, first)


def test_a_destination_without_the_sources_bridge_refuses_and_the_source_serves_on(
    bed: Bed,
) -> None:
    """A's sandbox is on bridge ``sbr2``, which B has not: B refuses the offer before
    anything moves (no address of its own to give), and the source never stops."""
    a = bed.lan.a.netns
    subprocess.run(["ip", "-n", a, "link", "add", "sbr2", "type", "bridge"], check=True,
                   timeout=15)  # fmt: skip
    try:
        subprocess.run(["ip", "-n", a, "link", "set", "sbr2", "up"], check=True, timeout=15)
        sid, ip = f"nobr-{os.getpid()}", bed.lan.sandbox_ip(13)
        _run_sandbox(bed, sid, ip, bridge="sbr2")
        bed.serve(bridge=False)
        out = bed.ckpt("a", "migrate", sid, "--to", f"{bed.lan.b.address}:{SERVE_PORT}",
                       "--key-file", str(bed.key), check=False)  # fmt: skip
        assert out.returncode != 0 and "no bridge sbr2" in out.stderr, out.stderr
        assert lifecycle.state(Root(bed.roots["a"]), sid).status == "running"
        assert Root(bed.roots["b"]).ids() == []
        bed.ckpt("a", "delete", "--force", sid)
    finally:
        subprocess.run(["ip", "-n", a, "link", "del", "sbr2"], timeout=15)
