"""Hostile and malformed requests on the template's socket are refused, nothing starts,
and the template keeps serving.

"Nothing started" is checked three ways after each request: the template's ``spawned``
count is unchanged (and ``refused`` went up), no process of the root exists but the
template, and the ready pipe we passed reaches end-of-file without a ``ready`` line
(every copy of its write end is closed: no forked child holds one).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from ckpt.sandbox.client import template_client
from ckpt.sandbox.template import server as template
from ckpt.sandbox.wire import template_proto as proto
from ckpt.sandbox.wire.paths import Root

from .conftest import Cli, sandbox_processes
from .waiting import gone, wait_for

pytestmark = pytest.mark.slow

WAIT_S = 90.0
SID = f"tplreq-{os.getpid()}"
CGROUP_ROOT = Path("/sys/fs/cgroup")


# -- a template of our own, shared by the module --------------------------------------


@dataclass
class Tpl:
    root: Path
    pid: int = 0
    sock: str = ""

    def status(self) -> dict[str, Any]:
        info = template_client.status(self.root)
        assert info is not None, "the template stopped answering"
        return info

    def ensure(self) -> Tpl:
        """Serving, restarted if an earlier test brought it down."""
        info = template_client.status(self.root)
        if info is None:
            template_client.start(self.root, wait=True)
            info = self.status()
        self.pid, self.sock = info["pid"], info["socket"]
        return self


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("tplreq") / "root"
    yield root
    template_client.stop(root)
    assert sandbox_processes(root) == []


@pytest.fixture
def tpl(shared_root: Path) -> Tpl:
    return Tpl(shared_root).ensure()


def send(
    path: str, payload: bytes, fds: list[int] = (), timeout: float = 30.0
) -> dict[str, Any] | None:
    """One raw request; the parsed reply, or None if the template hung up without one."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        try:
            if fds:
                socket.send_fds(sock, [payload], list(fds))
            else:
                sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)  # a request cut short ends here
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = b""
        try:
            while not buf.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
        except ConnectionResetError:
            return None
    finally:
        sock.close()
    return json.loads(buf) if buf.strip() else None


def read_to_eof(fd: int, timeout: float = WAIT_S) -> bytes:
    """Everything written to the pipe until every write end is closed."""
    out = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"the ready pipe stayed open: a process still holds it ({out!r})"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                return out
            out += chunk


class Spawn:
    """The pieces of a spawn request: a log file, a ready pipe, and the JSON."""

    def __init__(self, root: Path, tmp: Path, sandbox_id: str = SID) -> None:
        self.root = root
        self.id = sandbox_id
        self.log_path = tmp / "sandbox.log"
        self.log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.r, self.w = os.pipe()
        self.extra: list[int] = []

    def request(self, **over: Any) -> dict[str, Any]:
        req = {
            "op": "spawn",
            "version": proto.version(),
            "id": self.id,
            "socket": str(Root(self.root).socket_path(self.id)),
            "cgroup_fds": 0,
            "env": {},
        }
        req.update(over)
        return req

    def fds(self) -> list[int]:
        return [self.log, self.w]

    def open(self, path: str | Path, flags: int = os.O_RDONLY) -> int:
        fd = os.open(path, flags)
        self.extra.append(fd)
        return fd

    def close(self) -> None:
        for fd in (self.log, self.w, self.r, *self.extra):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def spawn(tpl: Tpl, tmp_path: Path) -> Iterator[Spawn]:
    s = Spawn(tpl.root, tmp_path)
    yield s
    s.close()


def line(req: Any) -> bytes:
    return json.dumps(req).encode() + b"\n"


def refused(
    tpl: Tpl, spawn: Spawn | None, payload: bytes, fds: list[int] = (), *, expect: str
) -> dict[str, Any] | None:
    """Send ``payload``; assert it was refused with ``expect`` in the error, that
    nothing was started, and that the template serves on."""
    before = tpl.status()
    reply = send(tpl.sock, payload, fds)
    if expect:
        assert reply is not None and reply["ok"] is False, reply
        assert expect in reply["error"], reply["error"]
    nothing_started(tpl, spawn, before, refused=1 if expect else None)
    return reply


def nothing_started(
    tpl: Tpl, spawn: Spawn | None, before: dict[str, Any], *, refused: int | None
) -> None:
    if spawn is not None:  # our copy closed: EOF means no one else holds the write end
        os.close(spawn.w)
        spawn.w = os.open(os.devnull, os.O_RDONLY)  # keep close() simple
        assert read_to_eof(spawn.r) == b""
        assert not Path(spawn.request()["socket"]).exists()
        assert spawn.log_path.read_bytes() == b""
    after = tpl.status()
    assert after["pid"] == before["pid"]
    assert after["spawned"] == before["spawned"]
    if refused is not None:
        assert after["refused"] == before["refused"] + refused
    assert [p.pid for p in sandbox_processes(tpl.root)] == [tpl.pid]
    assert after.get("held", {}) == before.get("held", {})


# -- the control: a well-formed request does start a sandbox ---------------------------


def test_a_well_formed_request_starts_a_detached_sandbox(tpl: Tpl, spawn: Spawn) -> None:
    """Shows the checks below can see a started sandbox: this one must be seen."""
    (tpl.root / SID).mkdir(mode=0o700)
    before = tpl.status()
    pid = 0
    try:
        reply = send(tpl.sock, line(spawn.request()), spawn.fds())
        assert reply is not None and reply["ok"] is True, reply
        pid = reply["result"]["pid"]
        os.close(spawn.w)
        spawn.w = os.open(os.devnull, os.O_RDONLY)
        assert read_to_eof(spawn.r) == f"ready {pid}\n".encode()
        assert tpl.status()["spawned"] == before["spawned"] + 1
        assert os.getsid(pid) not in (os.getsid(tpl.pid), os.getsid(0))  # a session of its own
        assert psutil.Process(pid).ppid() == tpl.pid  # one fork: the template reaps it
        assert Path(spawn.request()["socket"]).exists()
        assert spawn.log_path.read_text().splitlines()[0].endswith("forked from the warm template")
        assert sorted(p.pid for p in sandbox_processes(tpl.root)) == sorted([tpl.pid, pid])
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: gone(pid), "the sandbox to exit")
        shutil.rmtree(tpl.root / SID, ignore_errors=True)


# -- malformed ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "expect"),
    [
        (b"hello\n", "not JSON"),
        (b"\n", "not JSON"),
        (b'{"op": "spawn"', "not JSON"),  # cut short, then EOF
        (b"\xff\xfe\n", "not JSON"),
        (b"[1, 2]\n", "not a JSON object"),
        (b'"spawn"\n', "not a JSON object"),
        (b"null\n", "not a JSON object"),
    ],
)
def test_not_a_json_object_is_refused(tpl: Tpl, spawn: Spawn, payload: bytes, expect: str) -> None:
    refused(tpl, spawn, payload, spawn.fds(), expect=expect)


@pytest.mark.parametrize("op", ["exec", "", None, 7, ["spawn"], "SPAWN"])
def test_unknown_op_is_refused(tpl: Tpl, spawn: Spawn, op: Any) -> None:
    refused(tpl, spawn, line(spawn.request(op=op)), spawn.fds(), expect="unknown op")


@pytest.mark.parametrize(
    "bad", ["../x", "..", ".", "", "a/b", "-x", "x" * 65, "a\0b", "é", 5, None, ["a"]]
)
def test_bad_sandbox_id_is_refused(tpl: Tpl, spawn: Spawn, bad: Any) -> None:
    refused(tpl, spawn, line(spawn.request(id=bad)), spawn.fds(), expect="id")


def _bad_sockets(root: Path) -> list[str]:
    own = Root(root).socket_path(SID)
    return [
        "/tmp/evil.sock",
        "ctl.sock",  # relative
        str(root / "other" / "ctl.sock"),
        str(root / SID / ".." / "other" / "ctl.sock"),
        str(root / "ctl.sock"),
        str(root / proto.SOCKET_FILE),  # the template's own socket
        str(Path(tempfile.gettempdir()) / "sub" / "ckpt-x.sock"),
        str(own) + "\0",
        "/" + "a" * 120 + "/ctl.sock",
    ]


@pytest.mark.parametrize("index", range(len(_bad_sockets(Path("/r")))))
def test_socket_outside_the_sandbox_directory_is_refused(
    tpl: Tpl, spawn: Spawn, index: int
) -> None:
    bad = _bad_sockets(tpl.root)[index]
    refused(tpl, spawn, line(spawn.request(socket=bad)), spawn.fds(), expect="socket")


def refused_with_a_home(
    tpl: Tpl, spawn: Spawn, payload: bytes, fds: list[int], *, expect: str
) -> None:
    """``refused``, with the sandbox's directory made so that a wrongly started
    sandbox could bind its socket and run; any such stray is killed afterwards."""
    (tpl.root / SID).mkdir(mode=0o700)
    try:
        refused(tpl, spawn, payload, fds, expect=expect)
    finally:
        for p in sandbox_processes(tpl.root):
            if p.pid != tpl.pid:
                p.kill()
                wait_for(lambda p=p: gone(p.pid), "a stray sandbox to exit")
        shutil.rmtree(tpl.root / SID, ignore_errors=True)


def test_socket_in_the_temp_dir_must_be_the_sandbox_own(tpl: Tpl, spawn: Spawn) -> None:
    """A deep root puts a sandbox's socket in the temp dir under a name hashed from
    its directory; any other ``ckpt-*`` name there is not this sandbox's to bind."""
    own = Root(tpl.root).socket_path(SID)
    evil = Path(tempfile.gettempdir()) / f"ckpt-not-{SID}.sock"
    assert evil != own
    try:
        refused_with_a_home(
            tpl, spawn, line(spawn.request(socket=str(evil))), spawn.fds(), expect="socket"
        )
    finally:
        evil.unlink(missing_ok=True)


@pytest.mark.parametrize(
    ("over", "expect"),
    [
        ({"cgroup_fds": -1}, "cgroup_fds"),
        ({"cgroup_fds": True}, "cgroup_fds"),
        ({"cgroup_fds": "0"}, "cgroup_fds"),
        ({"cgroup_fds": 0.0}, "cgroup_fds"),
        ({"cgroup_fds": None}, "cgroup_fds"),
        ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "environment"),
        ({"env": {"PYTHONPATH": "/tmp"}}, "environment"),
        ({"env": {"CKPT_FAULT": 1}}, "environment"),
        ({"env": {"CKPT_FAULT": "x" * 5000}}, "environment"),
        ({"env": ["CKPT_FAULT=x"]}, "env"),
        ({"env": {f"CKPT_{i}": "" for i in range(65)}}, "env"),
    ],
)
def test_bad_fields_are_refused(tpl: Tpl, spawn: Spawn, over: dict, expect: str) -> None:
    refused(tpl, spawn, line(spawn.request(**over)), spawn.fds(), expect=expect)


# -- descriptors ---------------------------------------------------------------------------


def test_wrong_number_of_descriptors_is_refused(tpl: Tpl, spawn: Spawn) -> None:
    refused(tpl, spawn, line(spawn.request()), [], expect="descriptors")
    refused(tpl, None, line(spawn.request()), [spawn.log], expect="descriptors")
    extra = spawn.open(os.devnull)
    refused(tpl, spawn, line(spawn.request()), [*spawn.fds(), extra], expect="descriptors")
    refused(tpl, spawn, line(spawn.request(cgroup_fds=1)), spawn.fds(), expect="descriptors")


SCM_MAX_FD = 253  # the kernel's limit on descriptors in one message


@pytest.mark.skipif(proto.MAX_FDS + 1 > SCM_MAX_FD, reason="the kernel's limit comes first")
def test_more_descriptors_than_the_template_takes_are_refused(tpl: Tpl, spawn: Spawn) -> None:
    """Past MAX_FDS the kernel truncates the control message; the template sees that
    and refuses, and the descriptors that did arrive are closed (the ready pipe sees EOF)."""
    many = [spawn.open(os.devnull, os.O_WRONLY) for _ in range(proto.MAX_FDS - 1)]
    req = spawn.request(cgroup_fds=len(many))
    refused(tpl, spawn, line(req), [*spawn.fds(), *many], expect="too many descriptors")


def test_descriptors_of_the_wrong_kind_are_refused(tpl: Tpl, spawn: Spawn, tmp_path: Path) -> None:
    regular = tmp_path / "regular"
    regular.write_bytes(b"")
    reg_w = spawn.open(regular, os.O_WRONLY)
    reg_r = spawn.open(regular, os.O_RDONLY)
    devnull = spawn.open(os.devnull, os.O_WRONLY)
    pipe_r, pipe_w = os.pipe()
    spawn.extra += [pipe_r, pipe_w]
    a, b = socket.socketpair()
    tpl_dir = spawn.open(tmp_path, os.O_RDONLY)
    cases = [
        ([spawn.log, reg_w], 0, "ready descriptor"),  # a file where the pipe should be
        ([spawn.log, spawn.r], 0, "ready descriptor"),  # the read end
        ([spawn.log, a.fileno()], 0, "ready descriptor"),
        ([pipe_w, spawn.w], 0, "log descriptor"),  # a pipe where the log should be
        ([reg_r, spawn.w], 0, "log descriptor"),  # read-only
        ([tpl_dir, spawn.w], 0, "log descriptor"),
        ([devnull, spawn.w], 0, "log descriptor"),
        ([spawn.log, spawn.w, devnull], 1, "cgroup"),  # /dev/null as cgroup.procs
        ([spawn.log, spawn.w, reg_w], 1, "cgroup"),
        ([spawn.log, spawn.w, pipe_w], 1, "cgroup"),
        ([spawn.log, spawn.w, tpl_dir], 1, "cgroup"),
    ]
    try:
        for fds, n, expect in cases[:-1]:
            refused(tpl, None, line(spawn.request(cgroup_fds=n)), fds, expect=expect)
        fds, n, expect = cases[-1]
        refused(tpl, spawn, line(spawn.request(cgroup_fds=n)), fds, expect=expect)
    finally:
        a.close()
        b.close()


def _cgroup_parent() -> Path | None:
    for name in ("unified", "cpu", "pids"):
        d = CGROUP_ROOT / name
        if (d / "cgroup.procs").is_file() and os.access(d, os.W_OK):
            return d
    return None


def test_a_file_named_cgroup_procs_outside_cgroupfs_is_refused(
    tpl: Tpl, spawn: Spawn, tmp_path: Path
) -> None:
    """The name is not enough: only a real cgroup file puts the child in a group."""
    fake = tmp_path / "ckpt" / "x" / "cgroup.procs"
    fake.parent.mkdir(parents=True)
    fake.write_bytes(b"")
    fd = spawn.open(fake, os.O_WRONLY)
    req = line(spawn.request(cgroup_fds=1))
    refused_with_a_home(tpl, spawn, req, [*spawn.fds(), fd], expect="cgroup")


def test_a_child_that_cannot_join_its_cgroup_runs_nothing(tpl: Tpl, spawn: Spawn) -> None:
    """Joining comes first: with a group removed under it, the forked child exits
    before any sandbox code (no log line, no socket, no ready), and the request fails."""
    parent = _cgroup_parent()
    if parent is None:
        pytest.skip("no writable cgroup hierarchy")
    group = parent / f"ckpt-tplreq-{os.getpid()}"
    group.mkdir()
    try:
        fd = spawn.open(group / "cgroup.procs", os.O_WRONLY)
    finally:
        group.rmdir()  # the descriptor stays open on a group that is gone
    req = line(spawn.request(cgroup_fds=1))
    refused_with_a_home(tpl, spawn, req, [*spawn.fds(), fd], expect="could not join its cgroup")


# -- holding sockets for a restore ----------------------------------------------------


def _hold(tpl: Tpl, fds: list[int], **over: Any) -> dict[str, Any] | None:
    req = {"op": "hold", "version": proto.version(), "id": SID, "kinds": ["listen"]}
    req.update(over)
    return send(tpl.sock, line(req), fds)


def test_hold_adopt_release_round_trip(tpl: Tpl) -> None:
    """The control for the refusals below: a listening socket is held, lent, let go."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        reply = _hold(tpl, [listener.fileno()])
        assert reply == {"ok": True, "result": {"held": 1}}, reply
        assert tpl.status()["held"][SID]["sockets"] == 1
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30)
        sock.connect(tpl.sock)
        sock.sendall(line({"op": "adopt", "version": proto.version(), "id": SID}))
        data, fds, _, _ = socket.recv_fds(sock, 65536, 4)
        sock.close()
        assert json.loads(data)["result"]["kinds"] == ["listen"] and len(fds) == 1
        with socket.socket(fileno=fds[0]) as lent:
            assert lent.getsockname()[1] == port
        reply = send(tpl.sock, line({"op": "release", "version": proto.version(), "id": SID}))
        assert reply == {"ok": True, "result": {"released": True}}
        assert tpl.status()["held"] == {}
        reply = send(tpl.sock, line({"op": "adopt", "version": proto.version(), "id": SID}))
        assert reply == {"ok": True, "result": {"kinds": []}}
    finally:
        listener.close()
        send(tpl.sock, line({"op": "release", "version": proto.version(), "id": SID}))


def test_hold_refuses_what_is_not_a_listening_socket(tpl: Tpl, spawn: Spawn) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    dgram = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        cases = [
            ([spawn.w], {}, "sockets only"),  # a pipe
            ([spawn.log], {}, "sockets only"),  # a file
            ([client.fileno()], {}, "listening"),
            ([dgram.fileno()], {}, "listening"),
            ([], {}, "kinds"),
            ([listener.fileno()], {"kinds": ["conn"]}, "kinds"),
            ([listener.fileno()], {"kinds": ["listen", "conn"]}, "kinds"),
            ([listener.fileno(), client.fileno()], {"kinds": ["listen", "listen"]}, "kinds"),
            ([listener.fileno()], {"kinds": "listen"}, "kinds"),
            ([listener.fileno()], {"id": "../x"}, "ID"),
            ([listener.fileno()], {"id": None}, "id"),
        ]
        for fds, over, expect in cases:
            before = tpl.status()
            reply = _hold(tpl, fds, **over)
            assert reply is not None and reply["ok"] is False, (over, reply)
            assert expect in reply["error"], (expect, reply["error"])
            nothing_started(tpl, None, before, refused=1)
        before = tpl.status()
        _hold(tpl, [spawn.w], id="../x")
        nothing_started(tpl, spawn, before, refused=1)  # the pipe it got was closed
    finally:
        for s in (listener, client, dgram):
            s.close()


# -- size, silence, slowness -------------------------------------------------------------


def test_oversized_request_is_refused(tpl: Tpl, spawn: Spawn) -> None:
    pad = "x" * (proto.MAX_REQUEST + 4096)
    payload = line(spawn.request(pad=pad))
    # The template may hang up before reading it all: a refusal or a reset, never a fork.
    before = tpl.status()
    reply = send(tpl.sock, payload, spawn.fds())
    if reply is not None:
        assert reply["ok"] is False and "too large" in reply["error"], reply
    nothing_started(tpl, spawn, before, refused=1)


def test_oversized_line_without_newline_is_refused(tpl: Tpl) -> None:
    before = tpl.status()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(tpl.sock)
    try:
        sent = 0
        try:
            while sent <= proto.MAX_REQUEST + 65536:
                sent += sock.send(b"x" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            pass
    finally:
        sock.close()
    wait_for(lambda: tpl.status()["refused"] == before["refused"] + 1, "the refusal")
    nothing_started(tpl, None, before, refused=1)


def test_a_silent_connection_does_not_stop_the_template_serving(tpl: Tpl) -> None:
    before = tpl.status()
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(tpl.sock)
    try:
        silent.sendall(b'{"op": "sta')  # half a request, then nothing
        reply = template_client._request(tpl.root, {"op": "status"}, timeout=WAIT_S)
        assert reply["ok"] is True and reply["result"]["pid"] == before["pid"]
        # Answered beside the silent one, not after giving up on it: that one has had
        # no refusal yet (its deadline has not passed).
        silent.setblocking(False)
        with pytest.raises(BlockingIOError):
            silent.recv(65536)
        silent.setblocking(True)
        silent.settimeout(WAIT_S)
        last = silent.recv(65536)  # the template gave up on it: hung up, or refused
        assert last == b"" or json.loads(last)["ok"] is False, last
    finally:
        silent.close()
    nothing_started(tpl, None, before, refused=None)


def test_a_flood_of_silent_connections_cannot_lock_out_a_real_request(tpl: Tpl) -> None:
    """More half-sent requests than the template reads at once: the oldest are refused
    to make room, so a real request is still answered while the flood hangs."""
    before = tpl.status()
    extra = 8
    socks = []
    try:
        for _ in range(template.MAX_INCOMING + extra):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(tpl.sock)
            s.sendall(b'{"op": ')
            socks.append(s)
        reply = template_client._request(tpl.root, {"op": "status"}, timeout=WAIT_S)
        assert reply["ok"] is True and reply["result"]["pid"] == before["pid"]
        for s in socks[:extra]:  # accepted first, so made room first
            s.settimeout(WAIT_S)
            got = json.loads(s.recv(65536))
            assert got["ok"] is False and "arriving at once" in got["error"], got
    finally:
        for s in socks:
            s.close()
    nothing_started(tpl, None, before, refused=None)


def test_a_trickling_client_cannot_wedge_the_template(cli: Cli) -> None:
    """A client that sends a byte now and then must not hold the template past its
    request timeout: otherwise every real command waiting behind it decides the
    template is wedged and kills it."""
    cli.env.pop("CKPT_TEMPLATE", None)
    cli("template", "start")
    info = template_client.status(cli.root)
    assert info is not None
    sandbox_id = f"tpltrickle-{os.getpid()}"
    stop = threading.Event()
    trickler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    trickler.connect(info["socket"])

    def trickle() -> None:
        payload = b'{"op": "status", "version": "' + b" " * 1000
        for i in range(len(payload)):
            if stop.wait(0.5):
                return
            try:
                trickler.send(payload[i : i + 1])
            except OSError:
                return

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        out = cli("run", sandbox_id, "--workload", "http", "--port", "0", "--json", timeout=WAIT_S)
    finally:
        stop.set()
        t.join(WAIT_S)
        trickler.close()
    counters = json.loads(out.stdout)["timings"]["counters"]
    assert counters["sandbox_start"] == "template", counters
    assert template_client.status(cli.root)["pid"] == info["pid"]


# -- who may ask -------------------------------------------------------------------------


def test_wrong_version_is_refused_and_the_template_exits(cli: Cli, tmp_path: Path) -> None:
    cli.env.pop("CKPT_TEMPLATE", None)
    cli("template", "start")
    t = Tpl(cli.root).ensure()
    spawn = Spawn(cli.root, tmp_path)
    try:
        before = t.status()
        reply = send(t.sock, line(spawn.request(version="other")), spawn.fds())
        assert reply is not None and reply["ok"] is False
        assert reply["error"].startswith(proto.VERSION_MISMATCH)
        os.close(spawn.w)
        spawn.w = os.open(os.devnull, os.O_RDONLY)
        assert read_to_eof(spawn.r) == b""
        wait_for(lambda: gone(before["pid"]), "the stale template to exit")
        assert not os.path.exists(t.sock)
        assert not (cli.root / proto.INFO_FILE).exists()
        assert sandbox_processes(cli.root) == []
    finally:
        spawn.close()


CHILD = r"""
import json, os, socket, sys
path, log_path = sys.argv[1], sys.argv[2]
log = os.open(log_path, os.O_WRONLY | os.O_APPEND)  # opened while still root
r, w = os.pipe()
os.setgid(65534)
os.setgroups([])
os.setuid(65534)
out = {"uid": os.getuid()}
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(path)
except OSError as exc:
    out["connect_errno"] = exc.errno
else:
    req = json.loads(sys.argv[3])
    try:
        socket.send_fds(s, [json.dumps(req).encode() + b"\n"], [log, w])
    except BrokenPipeError:
        pass  # refused before we finished sending: the reply is still there to read
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    out["reply"] = json.loads(buf) if buf else None
    os.close(w)
    out["ready"] = os.read(r, 100).decode()
print(json.dumps(out))
"""


def test_a_peer_of_another_uid_is_refused(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to become another user")
    base = Path(tempfile.mkdtemp(prefix="ckpt-tpluid-"))
    base.chmod(0o711)  # traversable by uid 65534, as is /tmp
    root = base / "root"
    root.mkdir(mode=0o711)
    try:
        template_client.start(root, wait=True)
        t = Tpl(root).ensure()
        spawn = Spawn(root, tmp_path)
        log = tmp_path / "sandbox.log"
        req = json.dumps(spawn.request())

        def as_nobody() -> dict[str, Any]:
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, t.sock, str(log), req],
                capture_output=True,
                text=True,
                timeout=WAIT_S,
            )
            assert proc.returncode == 0, proc.stderr
            return json.loads(proc.stdout)

        before = t.status()
        assert stat.S_IMODE(os.stat(t.sock).st_mode) == 0o600
        out = as_nobody()  # the socket's mode keeps it out
        assert out["uid"] == 65534 and out["connect_errno"] == 13, out
        os.chmod(t.sock, 0o666)  # past the mode, SO_PEERCRED must still refuse
        out = as_nobody()
        assert "connect_errno" not in out, out
        assert out["reply"]["ok"] is False and "own user" in out["reply"]["error"], out
        assert out["ready"] == ""
        after = t.status()
        assert after["pid"] == before["pid"] and after["spawned"] == before["spawned"]
        assert after["refused"] == before["refused"] + 1
        assert [p.pid for p in sandbox_processes(root)] == [t.pid]
        assert log.read_bytes() == b""
        spawn.close()
    finally:
        template_client.stop(root)
        leftover = sandbox_processes(root)
        for p in leftover:
            p.kill()
        shutil.rmtree(base, ignore_errors=True)
    assert leftover == []


def test_status_and_stop_ops_answer(tpl: Tpl) -> None:
    """The two other ops, raw: status names the template; stop ends it (the next test's
    fixture starts a fresh one)."""
    reply = send(tpl.sock, line({"op": "status", "version": proto.version()}))
    assert reply["ok"] is True and reply["result"]["pid"] == tpl.pid
    assert reply["result"]["root"] == str(tpl.root.absolute())
    reply = send(tpl.sock, line({"op": "stop", "version": proto.version()}))
    assert reply == {"ok": True, "result": {"stopping": True}}
    wait_for(lambda: gone(tpl.pid), "the template to stop")
    assert template_client.status(tpl.root) is None
    assert sandbox_processes(tpl.root) == []
