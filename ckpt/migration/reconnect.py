"""Post-copy's window survives a cut link: the source connects again and resumes.

Once the destination has read ``Done`` the sandbox runs there and the pages it lacks
are still only on the source, so a broken channel must not end the migration.  The
source connects again (the same authenticated handshake, sealed if the first was)
and sends ``Resume`` with its offer's nonce instead of an ``Offer``; ``ckpt serve``
hands that channel to the waiting :class:`~ckpt.migration.postcopy.DestRelay`
(:class:`Resumable`), which answers with the map of the pages it has not received
and takes the pages from there.  Each side waits ``migrate_reconnect_s`` for the
other (``CKPT_MIGRATE_RECONNECT_S``), then gives up as before: the destination stops
its copy and says how many pages never came; the source keeps its paused copy.

A cut before the commit is not resumed: the source resumes its own copy, as any
failure before the commit does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ckpt.migration import messages as m
from ckpt.migration.errors import MigrationError, PeerError

FIRST_WAIT_S = 0.1  # the first pause between attempts; it doubles up to MAX_WAIT_S
MAX_WAIT_S = 2.0


def reconnect_s() -> float:
    """``CKPT_MIGRATE_RECONNECT_S``: how long either side waits for the other after a
    cut inside the post-copy window."""
    from ckpt import settings

    return settings.current().migrate_reconnect_s


class Resumable:
    """The destination's post-copy relays in their window, by sandbox ID, for the
    ``Resume`` of a source that lost its channel."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._relays: dict[str, Any] = {}

    def add(self, sid: str, relay: Any) -> None:
        with self._lock:
            self._relays[sid] = relay

    def drop(self, sid: str, relay: Any) -> None:
        with self._lock:
            if self._relays.get(sid) is relay:
                del self._relays[sid]

    def take(self, ch: Any, msg: m.Resume) -> None:
        """Hand ``ch`` to the relay of ``msg.sandbox_id``, or tell the source why not
        (then ``ch`` is closed) and raise."""
        with self._lock:
            relay = self._relays.get(msg.sandbox_id)
        try:
            if relay is None:
                raise MigrationError(f"no migration of {msg.sandbox_id} waits to resume here")
            relay.resume(ch, msg.nonce)
        except MigrationError as exc:
            ch.send_error(m.ErrorCode.REFUSED, f"cannot resume {msg.sandbox_id}: {exc}")
            raise MigrationError(f"refused to resume {msg.sandbox_id}: {exc}") from None


def rejoin(
    connect: Callable[[], Any],
    sid: str,
    nonce: bytes,
    limit: int,
    deadline: float,
    why: BaseException,
) -> tuple[Any, list[tuple[int, int]]]:
    """The source's side: connect again until ``deadline`` (``time.monotonic``) and
    resume; returns the new channel and the runs the destination still lacks.  A
    destination that refuses (it gave up, or never committed) is not asked again."""
    from ckpt.migration.postcopy import recv_map

    wait = FIRST_WAIT_S
    while True:
        try:
            ch = connect()
        except (MigrationError, OSError) as exc:
            why = exc
        else:
            try:
                ch.send(m.Resume(sandbox_id=sid, nonce=nonce))
                return ch, recv_map(ch, limit)
            except PeerError as exc:
                ch.close()
                raise MigrationError(f"the destination would not resume: {exc}") from None
            except (MigrationError, OSError) as exc:
                ch.close()
                why = exc
        left = deadline - time.monotonic()
        if left <= 0:
            raise MigrationError(f"could not reconnect to the destination in time: {why}")
        time.sleep(min(wait, left))
        wait = min(wait * 2, MAX_WAIT_S)
