"""Handing a sandbox's live sockets to the next sandbox, through the template.

A checkpoint that stops a sandbox would otherwise close its listening socket: clients
arriving before the restore are refused, and keep-alive connections are cut.  Instead
the checkpointed sandbox drains its HTTP server (see ``http.HttpServer.drain``) and
gives the listening socket and its parked connections to the template (``hold``), keyed
by sandbox ID.  The restored sandbox, which learns that ID from the image, takes them
back (``adopt``) and serves them: what arrived meanwhile waits in the kernel's queues
and is answered late, never refused.  The template keeps its own copies until the
restore has succeeded (``release``), so a failed restore can be retried; ``ckpt
delete`` and ``ckpt kill`` release them, and so does a timeout (``CKPT_HOLD_TIMEOUT_S``,
default 600 s).

Only a restore into the same sandbox ID adopts them: a copy of the image restored under
another ID binds anew (the port is then in use until the owner's restore or release).
A template that dies between the checkpoint and the restore takes them along: clients
are refused and parked connections cut until the restore binds anew, which says so.

A restore may follow a template that did not answer its spawn in time (a busy host):
the command then starts the sandbox cold but leaves a template that holds sockets
running, and the sandbox's ``adopt`` waits up to ADOPT_TIMEOUT_S for it, so the listen
queue and parked connections are taken over rather than lost.

A ``hold`` that gets no answer in time is ambiguous: the template may have the sockets
already (it reads the descriptors before it acts on them).  The sandbox then only closes
its descriptors and never shuts the sockets down, which would end them in the template
too and hand a dead listener to the restore; ``adopt`` checks that a listener it gets
still listens.

The template's socket path reaches a sandbox in ``CKPT_TEMPLATE_SOCKET``.  Without a
template there is nothing to hand over to: the restored sandbox binds its port anew.
Stdlib only: the sandbox process imports this.
"""

from __future__ import annotations

import os
import socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ckpt.sandbox.wire.protocol import BindReason, Handover

ENV = "CKPT_TEMPLATE_SOCKET"
LISTEN = "listen"
CONN = "conn"
MAX_SOCKETS = 250  # below the kernel's SCM_MAX_FD (253) for one message
NO_ANSWER = "the template did not answer in time"
ADOPT_TIMEOUT_S = 20.0  # a template slow enough to miss a spawn is waited for this long


def template_socket() -> str | None:
    from ckpt import settings

    return settings.current().template_socket


def _timeout() -> float:
    """For hold and release: ``CKPT_HANDOVER_TIMEOUT_S`` (tests set it small)."""
    from ckpt import settings

    return settings.current().handover_timeout_s


def _exchange(
    path: str, request: dict[str, Any], fds: list[int] = (), timeout: float | None = None
) -> tuple[dict, list[int]]:
    """A request to the template; a reply that is not JSON counts as a refusal."""
    from ckpt.sandbox.wire import template_proto

    timeout = _timeout() if timeout is None else timeout
    try:
        return template_proto.exchange(
            path, request, fds, timeout=timeout, connect_timeout=timeout, max_fds=MAX_SOCKETS
        )
    except ValueError:
        return {}, []


def hold(sandbox_id: str, sockets: list[socket.socket]) -> tuple[Handover, str]:
    """Give ``sockets`` (the listener first) to the template: ``(outcome, why)``.
    ``Handover.TEMPLATE`` when it took them; ``NONE`` when it did not (the caller's
    sockets then simply close when it exits); ``UNKNOWN`` when it did not answer in time
    and may have them: never shut them down then."""
    from ckpt.sandbox.wire.protocol import Handover

    path = template_socket()
    if path is None:
        return Handover.NONE, "no template"
    if len(sockets) > MAX_SOCKETS:
        return Handover.NONE, f"too many connections to hand over ({len(sockets)})"
    kinds = [LISTEN] + [CONN] * (len(sockets) - 1)
    try:
        reply, extra = _exchange(
            path,
            {"op": "hold", "id": sandbox_id, "kinds": kinds},
            [s.fileno() for s in sockets],
        )
    except TimeoutError:
        return Handover.UNKNOWN, f"{NO_ANSWER}; it may hold them"
    except OSError as exc:
        return Handover.NONE, f"template unreachable ({exc})"
    for fd in extra:
        os.close(fd)
    if reply.get("ok"):
        return Handover.TEMPLATE, ""
    return Handover.NONE, str(reply.get("error") or "refused")


def adopt(
    sandbox_id: str,
) -> tuple[socket.socket | None, list[socket.socket], BindReason | None, str]:
    """Take back what the template holds for ``sandbox_id``: ``(listener, connections,
    None, "")``, or ``(None, [], why not, the same in words)``.  The template keeps its
    copies until ``release``."""
    from ckpt.sandbox.wire.protocol import BindReason

    path = template_socket()
    if path is None:
        return None, [], BindReason.NO_TEMPLATE, "no template"
    try:
        reply, fds = _exchange(path, {"op": "adopt", "id": sandbox_id}, timeout=ADOPT_TIMEOUT_S)
    except (FileNotFoundError, ConnectionRefusedError):
        # nothing listens there: no template runs, so none holds the port either
        return None, [], BindReason.NO_TEMPLATE, "no template"
    except OSError as exc:
        return None, [], BindReason.TEMPLATE_UNREACHABLE, f"template unreachable ({exc})"
    kinds = (reply.get("result") or {}).get("kinds") if reply.get("ok") else None
    if not isinstance(kinds, list) or len(kinds) != len(fds) or not fds or kinds[0] != LISTEN:
        for fd in fds:
            os.close(fd)
        if reply.get("ok"):
            return None, [], BindReason.NOTHING_HELD, "nothing held"
        return None, [], BindReason.REFUSED, str(reply.get("error"))
    listener = socket.socket(fileno=fds[0])
    conns = [socket.socket(fileno=fd) for fd in fds[1:]]
    if not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        for s in (listener, *conns):
            s.close()
        return None, [], BindReason.NOT_LISTENING, "the held listener no longer listens"
    return listener, conns, None, ""


def release(path: str, sandbox_id: str) -> bool:
    """Tell the template at ``path`` to close what it holds for ``sandbox_id``."""
    try:
        reply, fds = _exchange(path, {"op": "release", "id": sandbox_id})
    except OSError:
        return False
    for fd in fds:
        os.close(fd)
    return bool((reply.get("result") or {}).get("released"))
