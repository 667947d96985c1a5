"""Two hosts for migration tests: a source root and a destination root with its
``ckpt serve``, real processes on loopback; and the checks that a migration, failed or
not, left exactly one sandbox running and nothing else behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from ckpt.sandbox.client import lifecycle
from ckpt.sandbox.host.http import get_json
from ckpt.sandbox.wire.paths import Root
from tests.sandbox.conftest import Cli, cgroup_dirs, sandbox_processes, stop_template
from tests.sandbox.waiting import wait_for

SERVE_START_S = 60.0


@dataclass
class Serve:
    """A ``ckpt serve`` process and the address it bound."""

    proc: subprocess.Popen[bytes]
    log: Path
    address: str = ""

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def stop(self) -> int:
        """SIGTERM, then wait for it (bounded); returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError("ckpt serve did not stop on SIGTERM within 30 s") from None


@dataclass
class Hosts:
    """A source and a destination: two roots, one key file, the destination's server."""

    src: Cli
    dst: Cli
    key: Path
    tmp: Path
    serves: list[Serve] = field(default_factory=list)

    def serve(self, key: Path | None = None, *argv: str) -> Serve:
        """Start ``ckpt serve`` on the destination's root and wait until it listens."""
        log = self.tmp / f"serve-{len(self.serves)}.log"
        cmd = [sys.executable, "-m", "ckpt", "--root", str(self.dst.root), "serve"]
        cmd += ["--listen", "127.0.0.1:0", "--key-file", str(key or self.key), *argv]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=out,
                env=self.dst.env,
            )
        s = Serve(proc, log)
        self.serves.append(s)

        def listening() -> str | None:
            for line in s.lines():
                if line.startswith("listening on "):
                    return line.split()[2]
            assert proc.poll() is None, f"ckpt serve exited: {s.lines()}"
            return None

        s.address = wait_for(listening, "ckpt serve to listen", SERVE_START_S)
        return s

    def migrate(
        self, sid: str, serve: Serve, *argv: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.src(
            "migrate", sid, "--to", serve.address, "--key-file", str(self.key), "--port", "0",
            *argv, check=False, env=env, timeout=180,
        )  # fmt: skip

    def migrate_popen(
        self, sid: str, serve: Serve, env: dict[str, str], argv: tuple[str, ...] = ()
    ) -> subprocess.Popen[str]:
        return self.src.popen(
            "migrate", sid, "--to", serve.address, "--key-file", str(self.key), "--port", "0",
            *argv, env=env,
        )  # fmt: skip


def address(cli: Cli, sid: str) -> tuple[str, int]:
    host, _, port = cli.state(sid)["address"].rpartition(":")
    return host, int(port)


def digest(cli: Cli, sid: str) -> str:
    return get_json(*address(cli, sid), "/memory", timeout=60)[1]["memory_sha256"]


def running(cli: Cli) -> list[str]:
    """The IDs of the root's sandboxes that are running and answer HTTP."""
    root = Root(cli.root)
    out = []
    for st in lifecycle.list_sandboxes(root):
        if st.status == "running" and st.address:
            host, _, port = st.address.rpartition(":")
            status, _ = get_json(host, int(port), "/", timeout=30)
            if status == 200:
                out.append(st.id)
    return out


def leftovers(hosts: Hosts) -> list[str]:
    """What a migration may leave behind that it must not: the destination's received
    images and any sandbox there that does not run (one made for a restore that did
    not happen), the source's working directories."""
    found = []
    incoming = hosts.dst.root / ".incoming"
    if incoming.is_dir():
        found += [f"dst/.incoming/{n}" for n in os.listdir(incoming)]
    if hosts.dst.root.is_dir():
        found += [
            f"dst/{st.id} ({st.status})"
            for st in lifecycle.list_sandboxes(Root(hosts.dst.root))
            if st.status != "running"
        ]
    if hosts.src.root.is_dir():
        found += [f"src/{n}" for n in os.listdir(hosts.src.root) if n.startswith(".migrate-")]
    return found


def stopped(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> bool:
    """The process stopped itself at a ``CKPT_FAULT=pause:VERB:STEP`` point."""
    try:
        return psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        raise AssertionError(f"process {proc.pid} exited before its pause point") from None


def make_key(path: Path, data: bytes | None = None) -> Path:
    path.write_bytes(data or os.urandom(32))
    os.chmod(path, 0o600)
    return path


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    for k in ("CKPT_FAULT",):
        env.pop(k, None)
    h = Hosts(
        Cli(tmp_path / "src", dict(env), set()),
        Cli(tmp_path / "dst", dict(env), set()),
        make_key(tmp_path / "key"),
        tmp_path,
    )
    try:
        yield h
    finally:
        for s in h.serves:
            if s.proc.poll() is None:
                s.stop()
        ids: set[str] = set()
        for cli in (h.src, h.dst):
            r = Root(cli.root)
            if cli.root.is_dir():
                for sid in r.ids():
                    ids.add(sid)
                    lifecycle.delete(r, sid, force=True)
            stop_template(cli.root)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
            sandbox_processes(c.root) for c in (h.src, h.dst)
        ):
            time.sleep(0.1)
        for cli in (h.src, h.dst):
            assert sandbox_processes(cli.root) == []
        for sid in ids | h.src.ids:
            assert cgroup_dirs(sid) == [], f"cgroup left behind for {sid}"
