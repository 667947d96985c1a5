"""The template's side of the handover: held sockets close after
``CKPT_HOLD_TIMEOUT_S``, whether or not the template is busy; hostile ``hold`` requests
(non-sockets, a first socket that does not listen, kinds that do not match the
descriptors, too many descriptors) are refused, nothing is held and no descriptor
leaks; a well-formed hold, adopt and release do what they say.

Every wait is bounded and ends as soon as the event happens; no test asserts a timing.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt.sandbox.client import template_client

from .conftest import Cli, sandbox_processes
from .handover_kit import (
    HOST,
    WAIT_S,
    bindable,
    checkpoint,
    free_port,
    held,
    restore,
    run_http,
    sid,
    start_template,
    steady_fds,
    tcp_sockets,
    wait_for,
)

pytestmark = pytest.mark.slow


# -- CKPT_HOLD_TIMEOUT_S ---------------------------------------------------------------


def test_held_sockets_close_after_the_hold_timeout(tcli: Cli, tmp_path: Path, clients: Any) -> None:
    tpl = start_template(tcli, CKPT_HOLD_TIMEOUT_S="2")
    port, web, image = free_port(), sid("expire"), tmp_path / "img"
    run_http(tcli, web, port)
    conn = clients(port)
    conn.get()
    checkpoint(tcli, web, image)
    # Not a single request to the template until the port is free again; the log
    # shows that it held the sockets and that the timeout (not anything else) closed them.
    wait_for(lambda: bindable(port), "the held listener to be closed")
    log = (tcli.root / "template.log").read_text()
    assert f"holding 2 socket(s) for {web}" in log, log
    assert f"no restore of {web} within 2 s" in log, log
    assert conn.closed_by_server()
    assert held(tcli) == {} and tcp_sockets(tpl) == []
    r = restore(tcli, web, image)  # the restore binds anew and serves
    assert r["listener"] == "bound anew (nothing held)", r
    assert tcli.get(web)["restores"] == 1


def test_held_sockets_close_after_the_hold_timeout_while_the_template_is_busy(
    tcli: Cli, tmp_path: Path
) -> None:
    """Requests every 0.25 s (status here; spawns on a busy host) must not keep a hold
    alive past its timeout."""
    tpl = start_template(tcli, CKPT_HOLD_TIMEOUT_S="1")
    port, web, image = free_port(), sid("busy"), tmp_path / "img"
    run_http(tcli, web, port)
    checkpoint(tcli, web, image)
    deadline = time.monotonic() + 12.0
    info = template_client.status(tcli.root)
    while info and info["held"] and time.monotonic() < deadline:
        time.sleep(0.25)
        info = template_client.status(tcli.root)
    assert info is not None and info["held"] == {}, info
    assert tcp_sockets(tpl) == [] and bindable(port)


# -- a template still warming ----------------------------------------------------------


def test_a_checkpoint_right_after_the_first_run_waits_for_the_warming_template(
    tcli: Cli, tmp_path: Path, clients: Any
) -> None:
    """The first ``run`` in a root starts the template in the background; a checkpoint
    that comes while it still warms up waits for it, so the sockets are held, not closed."""
    port, web, image = free_port(), sid("warming"), tmp_path / "img"
    run_http(tcli, web, port, env={"CKPT_FAULT": "warm-delay:5"})
    assert template_client.status(tcli.root) is None, "the template serves already"
    conn = clients(port)
    conn.get()
    c = checkpoint(tcli, web, image)
    assert c["handover"] == "template", c
    assert web in held(tcli)
    r = restore(tcli, web, image)
    assert r["listener"] == "handed over", r
    assert tcli.get(web)["restores"] == 1


# -- hostile hold requests -------------------------------------------------------------


@pytest.fixture(scope="module")
def tpl_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("hovtpl") / "root"
    template_client.start(root, wait=True)
    yield root
    template_client.stop(root)
    assert sandbox_processes(root) == []


def send(path: str, req: Any, fds: list[int] = ()) -> dict[str, Any] | None:
    """One request with ``fds`` attached; the reply, or None if the template hung up."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(WAIT_S)
    try:
        sock.connect(path)
        data = json.dumps(req).encode() + b"\n"
        if fds:
            socket.send_fds(sock, [data], list(fds))
        else:
            sock.sendall(data)
        buf, got = b"", []
        while not buf.endswith(b"\n"):
            chunk, new, _, _ = socket.recv_fds(sock, 65536, 16)
            got.extend(new)
            if not chunk:
                break
            buf += chunk
    finally:
        sock.close()
    for fd in got:  # a refusal brings no descriptor; anything else would be a leak here
        os.close(fd)
    assert got == [] or json.loads(buf).get("ok"), "descriptors came back with a refusal"
    return json.loads(buf) if buf.strip() else None


def listening() -> socket.socket:
    s = socket.socket()
    s.bind((HOST, 0))
    s.listen(4)
    return s


class Kit:
    """Descriptors for one hostile request; every one is closed afterwards."""

    def __init__(self) -> None:
        self.objs: list[Any] = []
        self.fds: list[int] = []

    def sock(self, s: socket.socket) -> int:
        self.objs.append(s)
        return s.fileno()

    def listener(self) -> int:
        return self.sock(listening())

    def connected(self) -> int:
        srv = listening()
        self.objs.append(srv)
        return self.sock(socket.create_connection(srv.getsockname(), timeout=10))

    def pipe(self) -> int:
        r, w = os.pipe()
        self.fds += [r, w]
        return r

    def dup(self, fd: int) -> int:
        self.fds.append(os.dup(fd))
        return self.fds[-1]

    def close(self) -> None:
        for s in self.objs:
            s.close()
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


HOSTILE: dict[str, Callable[[Kit], tuple[dict[str, Any], list[int], str]]] = {
    "pipe": lambda k: ({"kinds": ["listen"]}, [k.pipe()], "sockets only"),
    "pipe-as-conn": lambda k: (
        {"kinds": ["listen", "conn"]},
        [k.listener(), k.pipe()],
        "sockets only",
    ),
    "unbound-tcp": lambda k: ({"kinds": ["listen"]}, [k.sock(socket.socket())], "listening"),
    "udp": lambda k: (
        {"kinds": ["listen"]},
        [k.sock(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))],
        "listening",
    ),
    "connected-first": lambda k: (
        {"kinds": ["listen", "conn"]},
        [k.connected(), k.listener()],
        "listening",
    ),
    "fewer-fds": lambda k: ({"kinds": ["listen", "conn"]}, [k.listener()], "one per descriptor"),
    "more-fds": lambda k: ({"kinds": ["listen"]}, [k.listener(), k.connected()], "one per"),
    "no-fds": lambda k: ({"kinds": ["listen"]}, [], "one per descriptor"),
    "conn-first": lambda k: ({"kinds": ["conn"]}, [k.listener()], "one per descriptor"),
    "two-listens": lambda k: (
        {"kinds": ["listen", "listen"]},
        [k.listener(), k.listener()],
        "one per descriptor",
    ),
    "unknown-kind": lambda k: ({"kinds": ["listen", "pipe"]}, [k.listener(), k.pipe()], "kinds"),
    "kinds-a-string": lambda k: ({"kinds": "listen"}, [k.listener()], "kinds"),
    "no-kinds": lambda k: ({}, [k.listener()], "kinds"),
    "empty-kinds": lambda k: ({"kinds": []}, [], "kinds"),
    "bad-id": lambda k: ({"id": "../evil", "kinds": ["listen"]}, [k.listener()], ""),
    "id-not-a-string": lambda k: ({"id": 7, "kinds": ["listen"]}, [k.listener()], "'id'"),
    "too-many-fds": lambda k: _too_many(k),
}


def _too_many(k: Kit) -> tuple[dict[str, Any], list[int], str]:
    conn = k.connected()
    fds = [k.listener(), *(k.dup(conn) for _ in range(251))]  # 252: under SCM_MAX_FD
    return {"kinds": ["listen"] + ["conn"] * 251}, fds, "too many descriptors"


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_hold_is_refused_and_nothing_is_held(tpl_root: Path, case: str) -> None:
    before = template_client.status(tpl_root)
    assert before is not None and before["held"] == {}
    pid, baseline = before["pid"], steady_fds(before["pid"])
    kit = Kit()
    try:
        fields, fds, expect = HOSTILE[case](kit)
        reply = send(before["socket"], {"op": "hold", "id": "hovhostile", **fields}, fds)
        assert reply is not None and reply["ok"] is False, reply
        assert expect in reply["error"], reply["error"]
        after = template_client.status(tpl_root)
        assert after is not None and after["pid"] == pid
        assert after["held"] == {} and after["refused"] == before["refused"] + 1
        assert steady_fds(pid) == baseline  # every descriptor it was sent is closed
        assert tcp_sockets(pid) == []
        for s in kit.objs:  # ours are untouched: a listener still accepts
            if s.type == socket.SOCK_STREAM and s.getsockopt(
                socket.SOL_SOCKET, socket.SO_ACCEPTCONN
            ):
                socket.create_connection(s.getsockname(), timeout=10).close()
    finally:
        kit.close()


def test_hold_adopt_and_release_do_what_they_say(tpl_root: Path) -> None:
    """The control for the refusals above: a well-formed hold is kept, adopt hands out
    copies, a second hold for the ID replaces the first, release closes them."""
    info = template_client.status(tpl_root)
    assert info is not None
    pid, path, baseline = info["pid"], info["socket"], steady_fds(info["pid"])
    first, second = listening(), listening()
    try:
        reply = send(path, {"op": "hold", "id": "hovctl", "kinds": ["listen"]}, [first.fileno()])
        assert reply == {"ok": True, "result": {"held": 1}}, reply
        first_port = first.getsockname()[1]
        first.close()  # the template's copy keeps it listening
        assert (template_client.status(tpl_root) or {})["held"]["hovctl"]["sockets"] == 1
        assert tcp_sockets(pid) == [(first_port, "LISTEN")] and steady_fds(pid) == baseline + 1
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(WAIT_S)
        with sock:
            sock.connect(path)
            sock.sendall(json.dumps({"op": "adopt", "id": "hovctl"}).encode() + b"\n")
            data, fds, _, _ = socket.recv_fds(sock, 65536, 16)
        assert json.loads(data)["result"]["kinds"] == ["listen"] and len(fds) == 1
        with socket.socket(fileno=fds[0]) as adopted:
            assert adopted.getsockname()[1] == first_port
            socket.create_connection((HOST, first_port), timeout=10).close()
        assert steady_fds(pid) == baseline + 1  # adopt hands out copies, keeps its own
        reply = send(path, {"op": "hold", "id": "hovctl", "kinds": ["listen"]}, [second.fileno()])
        assert reply is not None and reply["ok"], reply
        assert tcp_sockets(pid) == [(second.getsockname()[1], "LISTEN")]
        assert steady_fds(pid) == baseline + 1
        assert bindable(first_port)  # the replaced hold was closed
        assert send(path, {"op": "release", "id": "hovctl"}) == {
            "ok": True,
            "result": {"released": True},
        }
        assert steady_fds(pid) == baseline and tcp_sockets(pid) == []
        assert (template_client.status(tpl_root) or {})["held"] == {}
        reply = send(path, {"op": "release", "id": "hovctl"})
        assert reply == {"ok": True, "result": {"released": False}}
        reply = send(path, {"op": "adopt", "id": "hovnone"})
        assert reply == {"ok": True, "result": {"kinds": []}}
    finally:
        first.close()
        second.close()
