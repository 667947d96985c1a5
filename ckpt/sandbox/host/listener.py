"""Where a sandbox's listening socket comes from: the one the checkpointed sandbox handed
to the template (with its parked connections), taken back on a restore into the same
sandbox ID and port, or else one bound now, inside the sandbox's network namespace when it
has its own address.  When a port cannot be bound, the error says why nothing was handed
over and what to do.

Functions of their arguments only (the kernel, the sandbox ID, the image's metadata):
``Host`` (process.py) decides when to listen and serves what it gets.
"""

from __future__ import annotations

from ckpt.errors import SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any

    from ckpt.sandbox.wire import protocol as p

HOST = "127.0.0.1"


def serves_http(k: Any) -> bool:
    """Does the workload have an HTTP service whose listener we must bind for real?

    A fresh ``http`` kernel has a listener with no host port yet (None until the sandbox
    records one); a restored one has the port it was serving on.
    """
    return k.http_listen_address() is not None or getattr(k, "http", None) is not None


def bind_error(
    port: int, exc: OSError, reason: p.BindReason | None, why: str, host: str = HOST
) -> str:
    """Why a restore could not bind its port, and what to do, in one line."""
    import errno

    from ckpt.sandbox.wire.protocol import BindReason

    msg = f"cannot listen on {host}:{port}: {exc.strerror}"
    if exc.errno == errno.EADDRINUSE and reason is BindReason.TEMPLATE_UNREACHABLE:
        return (
            f"{msg}: the template holding it does not answer ({why}); `ckpt template stop` "
            "(what it holds is lost) and restore again, or pass --port 0 for a free port"
        )
    if exc.errno == errno.EADDRINUSE and reason is BindReason.OTHER_SANDBOX:
        return f"{msg} ({why}, kept for its restore); pass --port 0 for a free port"
    return f"{msg}; pass --port 0 for a free port"


class Adoption:
    """What a restore found held for its listener: the socket and parked connections,
    or why it binds anew (``reason``, and the same in words)."""

    __slots__ = ("conns", "held_for", "listener", "reason", "why")

    def __init__(
        self,
        reason: p.BindReason | None,
        why: str,
        listener: Any = None,
        conns: list[Any] | None = None,
        held_for: str = "",
    ) -> None:
        self.reason, self.why, self.listener = reason, why, listener
        self.conns = conns or []
        self.held_for = held_for


def adopt(
    sandbox_id: str, kernel: Any, image_metadata: dict[str, Any], port: int, host: str = HOST
) -> Adoption:
    """The sockets the checkpointed sandbox handed to the template, if they are for
    this sandbox and port, or why not.  ``held_for`` is set whenever something was held,
    adopted or not, so that a successful restore lets the template close it."""
    from ckpt.sandbox.wire import handover
    from ckpt.sandbox.wire.protocol import BindReason

    held_for = image_metadata.get("sandbox_id")
    if not isinstance(held_for, str) or not serves_http(kernel):
        return Adoption(BindReason.IMAGE_NAMES_NO_SANDBOX, "the image names no sandbox")
    if held_for != sandbox_id:
        # What the template holds belongs to sandbox ``held_for``, whose own restore
        # may come at any moment: a copy of its image restored elsewhere never
        # takes (or releases) them.
        return Adoption(BindReason.OTHER_SANDBOX, f"the held sockets are {held_for}'s")
    listener, conns, reason, why = handover.adopt(held_for)
    if listener is None:
        return Adoption(reason, why)
    held_host, held_port = listener.getsockname()[:2]
    if held_port != port or held_host != host:  # --port 0, another port or address
        for s in (listener, *conns):
            s.close()
        # a restore elsewhere: the CLI releases the held socket once this succeeds
        why = f"the held socket is on {held_host}:{held_port}, not {host}:{port}"
        return Adoption(BindReason.OTHER_PORT, why, held_for=held_for)
    return Adoption(None, "", listener, conns, held_for)


def take_or_bind(
    port: int,
    adoption: Adoption | None = None,
    host: str | None = None,
    netns: str | None = None,
    any_port: bool = False,
) -> tuple[socket.socket, list[socket.socket]]:
    """The listening socket and its parked connections: those handed over by the
    previous sandbox when there are some, else a socket bound now (``adoption`` says
    why nothing was handed over), on ``host`` inside namespace ``netns`` when the
    sandbox has its own address; with ``any_port``, on a free port when ``port`` is
    taken (a migration to the same host, where the source holds it until the end)."""
    if adoption is not None and adoption.listener is not None:
        return adoption.listener, adoption.conns
    try:
        return _bind(host or HOST, port, netns, any_port), []
    except OSError as exc:
        reason, why = (adoption.reason, adoption.why) if adoption else (None, "")
        raise SandboxError(bind_error(port, exc, reason, why, host or HOST)) from exc


def _bind(host: str, port: int, netns: str | None, any_port: bool) -> socket.socket:
    """A listening socket on ``host:port`` (inside ``netns``), or with ``any_port`` on a
    free port when that one is taken."""
    import errno

    from ckpt.sandbox.host.http import bind

    def listen(p: int) -> socket.socket:
        if netns:
            from ckpt.sandbox.wire import netns as netns_mod

            return netns_mod.listen(netns, host, p, bind)
        return bind(host, p)

    try:
        return listen(port)
    except OSError as exc:
        if not (any_port and port and exc.errno == errno.EADDRINUSE):
            raise
    return listen(0)
