"""A migration's connections, for a sandbox with its own address: the steps of
``sandbox/host/connmove.py`` driven from ``migrate`` (source) and ``serve`` (destination).

Source: ``park`` before the final freeze, ``cut`` after the final image (the address
cut off its bridge first; the states go to the destination as one ``Connections``
message), ``back`` if the migration fails before the destination commits (the
connections served again, then the address attached).  Destination: ``rebuild`` once
the sandbox is restored, ``live`` once it has read ``Done`` (the address attached and
announced, then the connections served).  Links are changed here, in the namespace
where ``run`` or ``serve`` made the veth, never by the sandbox process.  The
sandbox's cgroup is thawed for a step that finds it frozen, and frozen again after:
its kernel stays frozen throughout.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from ckpt.migration.errors import FrameError, MigrationError

STATES_FILE = "connections"
STEP_TIMEOUT_S = 30.0
MAX_STATES_BYTES = 64 << 20  # what a Connections message may carry


def _step(root: Any, sid: str, op: str, net: Any, path: Path | None = None, **kw: Any) -> int:
    from ckpt.sandbox.client import lifecycle
    from ckpt.sandbox.client.group import freezable, open_cgroup, own_group
    from ckpt.sandbox.wire.paths import PAUSED
    from ckpt.sandbox.wire.protocol import ConnectionsRequest, Step

    st = lifecycle.state(root, sid)
    refreeze = None
    if st.status == PAUSED:
        refreeze = freezable(open_cgroup(st.cgroup and own_group(root, st, strict=True)))
        if refreeze is not None:
            refreeze.thaw()
    try:
        request = ConnectionsRequest(
            op=Step(op), net=net.record(), path=str(path) if path else None, **kw
        )
        reply = lifecycle._call(root, st, request, timeout=STEP_TIMEOUT_S)
    finally:
        if refreeze is not None:
            refreeze.freeze()
    return int(reply.connections)


def net_of(root: Any, st: Any) -> Any:
    from ckpt.sandbox.wire import netns

    return netns.of(root, st)


# -- source ------------------------------------------------------------------------------


def park(root: Any, sid: str, net: Any) -> int:
    return _step(root, sid, "park", net)


def cut(root: Any, sid: str, net: Any, workdir: Path) -> bytes:
    """The connections' states (``tcprepair.encode``), read with the address cut off."""
    from ckpt.sandbox.wire import netmove

    path = workdir / STATES_FILE
    netmove.detach(net)
    _step(root, sid, "cut", net, path)
    data = path.read_bytes()
    path.unlink()
    return data


def back(root: Any, sid: str, net: Any) -> None:
    """Best effort: a failure here is the caller's second error, not its first."""
    from ckpt.errors import CkptError
    from ckpt.sandbox.wire import netmove

    with contextlib.suppress(CkptError, OSError):
        _step(root, sid, "back", net)
    with contextlib.suppress(CkptError, OSError):
        netmove.attach(net)


# -- destination -------------------------------------------------------------------------


def received(data: bytes, ip: str) -> bytes:
    """Check a peer's connection states before anything is made of them."""
    from ckpt.errors import CkptError
    from ckpt.sandbox.wire import tcprepair

    if len(data) > MAX_STATES_BYTES:
        raise FrameError(f"the peer sent over {MAX_STATES_BYTES} bytes of connection state")
    try:
        states = tcprepair.decode(data)
    except CkptError as exc:
        raise FrameError(f"the peer sent bad connection state: {exc}") from None
    if any(s.local_ip != ip for s in states):
        raise FrameError("the peer sent a connection on another address than its sandbox's")
    return data


def rebuild(root: Any, sid: str, net: Any, data: bytes, workdir: Path) -> int:
    path = workdir / STATES_FILE
    path.write_bytes(data)
    try:
        return _step(root, sid, "rebuild", net, path)
    finally:
        path.unlink(missing_ok=True)


def live(root: Any, sid: str, net: Any) -> int:
    from ckpt.sandbox.wire import netmove

    try:
        netmove.attach(net)
        netmove.announce(net)
        return _step(root, sid, "live", net)
    except Exception as exc:
        raise MigrationError(
            f"the sandbox's address or connections did not come up: {exc}"
        ) from exc
