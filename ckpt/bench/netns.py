"""Test hosts in network namespaces, and a delaying TCP relay (this kernel has no netem).

::

          namespace ckpt-PID-N-h0          namespace ckpt-PID-N-sw          namespace ckpt-PID-N-h1
        +----------------------+      +-----------------------------+      +----------------------+
        | lo, eth0 198.18.0.1  |=veth=| h0 -- br0 (bridge) -- h1    |=veth=| lo, eth0 198.18.0.2  |
        |   [tbf on eth0]      |      |  [tbf on h0, h1]            |      |   [tbf on eth0]      |
        +----------------------+      +-----------------------------+      +----------------------+

Every interface lives inside a namespace this module made, so deleting the namespaces
removes everything: the root namespace never gains an interface, an address or a route.
Addresses come from 198.18.0.0/15, the range RFC 2544 sets aside for network benchmarks.
``tbf`` on both ends of each veth shapes each direction of each link to ``rate``.

``host_network()`` removes its namespaces (and stops the processes it started in them) on
every exit: normal, exception, SIGINT (``KeyboardInterrupt``), and SIGTERM, which it turns
into ``SystemExit`` while it is active (main thread only) so that ``finally`` runs.
Only SIGKILL escapes; the names carry the pid, so ``stale_namespaces()`` finds what a
killed run left.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpt import pycommand
from ckpt.errors import CkptError

PREFIX = "ckpt-"
SUBNET = "198.18.0.{}/24"
STOP_TIMEOUT = 5.0
IP_TIMEOUT = 15.0
_counter = itertools.count()
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-\d+-(?:h\d+|sw)")  # what host_network() names


class NetnsError(CkptError):
    """The test network cannot be set up or torn down (needs root and iproute2)."""


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here, or ``None`` if they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"network namespaces need the {tool} command (iproute2)"
    return None


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=IP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"{' '.join(argv)} failed: {exc}") from exc
    if check and done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise NetnsError(f"{' '.join(argv)} failed: {reason[0]}")
    return done


def list_namespaces() -> list[str]:
    """The names ``ip netns list`` shows (without their ids)."""
    out = _ip("ip", "netns", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def stale_namespaces() -> list[str]:
    """Namespaces named by this module whose creating process is gone (a SIGKILLed run)."""
    stale = []
    for name in list_namespaces():
        match = _NAME.fullmatch(name)
        if match is not None and not Path(f"/proc/{match[1]}").exists():
            stale.append(name)
    return stale


def remove_stale() -> list[str]:
    """Delete ``stale_namespaces()`` (what a SIGKILLed run left); returns their names."""
    stale = stale_namespaces()
    for name in stale:
        _ip("ip", "netns", "del", name)
    return stale


def child_env() -> dict[str, str]:
    """This process's ``sys.path`` in PYTHONPATH, so a child imports what we import."""
    import ckpt

    here = str(Path(ckpt.__file__).resolve().parent.parent)
    entries = [here, *(p for p in sys.path if p and os.path.isdir(p))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(entries))}


_BOOT = (
    "import importlib, json, sys\n"
    "f = importlib.import_module(sys.argv[1])\n"
    "for part in sys.argv[2].split('.'):\n"
    "    f = getattr(f, part)\n"
    "f(*json.loads(sys.argv[3]))\n"
)


def python_argv(func: Callable[..., Any], *args: Any) -> list[str]:
    """A command running ``func(*args)`` in a fresh interpreter (module-level, JSON args)."""
    if "<locals>" in func.__qualname__:
        raise ValueError(f"{func.__qualname__} is not importable: use a module-level function")
    return pycommand.python_argv("-c", _BOOT, func.__module__, func.__qualname__, json.dumps(args))


@dataclass(frozen=True)
class NetnsHost:
    """One test host: a namespace and its address on the shared link."""

    netns: str
    address: str
    device: str = "eth0"
    switch_port: str = ""


@dataclass
class HostNetwork:
    """The namespaces of one ``host_network()`` and the processes started in them."""

    hosts: list[NetnsHost]
    switch: str
    rate: str | None
    namespaces: list[str] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def argv(self, host: NetnsHost, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", host.netns, *argv]

    def run(
        self, host: NetnsHost, argv: list[str], *, timeout: float, **kwargs: Any
    ) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` inside ``host`` to completion (killed at ``timeout``)."""
        kwargs.setdefault("env", child_env())
        return subprocess.run(self.argv(host, argv), timeout=timeout, **kwargs)

    def popen(self, host: NetnsHost, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``host``; it is stopped when the host network closes."""
        kwargs.setdefault("env", child_env())
        proc = subprocess.Popen(self.argv(host, argv), **kwargs)
        self.processes.append(proc)
        return proc

    def python(
        self, host: NetnsHost, func: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> subprocess.Popen[Any]:
        """Start ``func(*args)`` in a new interpreter inside ``host`` (see ``python_argv``)."""
        return self.popen(host, python_argv(func, *args), **kwargs)

    def set_link(self, host: NetnsHost, up: bool) -> None:
        """Bring ``host``'s link up or down (a cut cable, for fault tests)."""
        _ip("ip", "-n", host.netns, "link", "set", host.device, "up" if up else "down")

    def qdisc(self, host: NetnsHost) -> str:
        """``tc qdisc show`` for ``host``'s device."""
        return _ip("tc", "-n", host.netns, "qdisc", "show", "dev", host.device).stdout


def _tbf(netns: str, device: str, rate: str, burst: str) -> None:
    _ip("tc", "-n", netns, "qdisc", "add", "dev", device, "root", "tbf",
        "rate", rate, "burst", burst, "latency", "50ms")  # fmt: skip


def _build(bed: HostNetwork, n: int, rate: str | None, burst: str) -> None:
    _ip("ip", "netns", "add", bed.switch)
    bed.namespaces.append(bed.switch)
    _ip("ip", "-n", bed.switch, "link", "add", "br0", "type", "bridge")
    _ip("ip", "-n", bed.switch, "link", "set", "br0", "up")
    for host in bed.hosts:
        _ip("ip", "netns", "add", host.netns)
        bed.namespaces.append(host.netns)
        _ip("ip", "-n", bed.switch, "link", "add", host.switch_port, "type", "veth",
            "peer", "name", host.device, "netns", host.netns)  # fmt: skip
        _ip("ip", "-n", bed.switch, "link", "set", host.switch_port, "master", "br0", "up")
        _ip("ip", "-n", host.netns, "link", "set", "lo", "up")
        _ip("ip", "-n", host.netns, "addr", "add", f"{host.address}/24", "dev", host.device)
        _ip("ip", "-n", host.netns, "link", "set", host.device, "up")
        if rate is not None:
            _tbf(host.netns, host.device, rate, burst)
            _tbf(bed.switch, host.switch_port, rate, burst)


def _teardown(bed: HostNetwork) -> list[str]:
    """Stop our processes, delete our namespaces; returns what could not be removed."""
    for proc in bed.processes:
        if proc.poll() is None:
            proc.terminate()
    for proc in bed.processes:
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
    failed = []
    for name in reversed(bed.namespaces):
        if _ip("ip", "netns", "del", name, check=False).returncode != 0:
            failed.append(name)
    return failed


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While active, SIGTERM raises ``SystemExit`` (so ``finally`` runs) in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def host_network(
    n: int = 2, *, rate: str | None = None, burst: str = "256kb"
) -> Iterator[HostNetwork]:
    """``n`` hosts on one bridge, each link shaped to ``rate`` (a tc rate such as "1gbit").

    ``burst`` must hold at least rate/HZ bytes: 256kb suits up to about 1 Gbit/s.
    """
    reason = unavailable_reason()
    if reason is not None:
        raise NetnsError(f"cannot make test hosts: {reason}")
    if not 1 <= n <= 200:
        raise ValueError(f"n must be between 1 and 200, not {n}")
    tag = f"{PREFIX}{os.getpid()}-{next(_counter)}"
    hosts = [
        NetnsHost(f"{tag}-h{i}", SUBNET.format(i + 1).split("/")[0], switch_port=f"h{i}")
        for i in range(n)
    ]
    bed = HostNetwork(hosts=hosts, switch=f"{tag}-sw", rate=rate)
    with _sigterm_raises():
        try:
            _build(bed, n, rate, burst)
            yield bed
        finally:
            # A second SIGTERM waits until the teardown is done, then arrives.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
            try:
                failed = _teardown(bed)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
            if failed:
                raise NetnsError(f"cannot remove namespaces {', '.join(failed)}: ip netns del")


# --- a delaying TCP relay ---------------------------------------------------------------


CHUNK = 65536
QUEUE_CHUNKS = 64  # at most 4 MiB in flight per direction and connection


class DelayRelay:
    """Accepts on ``listen`` and forwards each connection to ``target``, ``delay_ms`` late.

    Each chunk is held until ``delay_ms`` after it arrived, in each direction, so the
    relay adds latency without cutting throughput (up to QUEUE_CHUNKS in flight).  At most
    ``max_connections`` at once (more are closed at once); everything stops after
    ``lifetime`` seconds or at ``close()``.  Runs its own event loop in a thread.
    """

    def __init__(
        self,
        listen: tuple[str, int],
        target: tuple[str, int],
        delay_ms: float,
        *,
        max_connections: int = 16,
        lifetime: float = 120.0,
    ) -> None:
        self.listen = listen
        self.target = target
        self.delay = delay_ms / 1000.0
        self.max_connections = max_connections
        self.lifetime = lifetime
        self.address: tuple[str, int] = listen
        self.connections = 0
        self.refused = 0
        self.bytes_forwarded = 0
        self._active = 0
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="delay-relay", daemon=True)

    def __enter__(self) -> DelayRelay:
        self._thread.start()
        if not self._ready.wait(STOP_TIMEOUT) or self._error is not None:
            self.close()
            raise NetnsError(f"the relay cannot listen on {self.listen}: {self._error}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(STOP_TIMEOUT)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            tasks.add(task)
            try:
                await self._serve(reader, writer)
            finally:
                tasks.discard(task)

        server = await asyncio.start_server(on_connect, *self.listen)
        self.address = server.sockets[0].getsockname()[:2]
        self._ready.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), self.lifetime)
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._active >= self.max_connections:
            self.refused += 1
            writer.close()
            return
        self._active += 1
        self.connections += 1
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.target), STOP_TIMEOUT
            )
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        except (OSError, TimeoutError):
            pass
        finally:
            self._active -= 1
            for w in (writer, up_writer):
                if w is not None:
                    w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE_CHUNKS)

        async def read_side() -> None:
            while data := await reader.read(CHUNK):
                await queue.put((loop.time() + self.delay, data))
            await queue.put((loop.time() + self.delay, b""))

        async def write_side() -> None:
            while True:
                due, data = await queue.get()
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
                self.bytes_forwarded += len(data)

        await asyncio.gather(read_side(), write_side())


def run_relay(
    listen_host: str, listen_port: int, target_host: str, target_port: int, delay_ms: float,
    lifetime: float = 120.0,
) -> None:  # fmt: skip
    """Run a ``DelayRelay`` until ``lifetime`` or SIGTERM: for ``HostNetwork.python``."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with DelayRelay((listen_host, listen_port), (target_host, target_port), delay_ms,
                    lifetime=lifetime):  # fmt: skip
        print("ready", flush=True)
        stop.wait(lifetime)
