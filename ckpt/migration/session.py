"""The migration session: which message follows which, on both sides.

::

    source (ckpt migrate)                       destination (ckpt serve)
    Offer(id, workload, engine, cpus, port,
          nonce)                            ──▶  refuse an ID it has (Error EXISTS)
                                            ◀──  Ack; makes the sandbox's process
    round r (running): PageRuns* RoundEnd   ──▶  written as image rN (pre-dump)
                                            ◀──  Ack
    freeze; StateChunk* PageRuns* RoundEnd  ──▶  written as image "final", parent rN;
      (final, the kernel's metadata)              restored under its root, cgroup, template
    [Connections: its own address's, read   ──▶  rebuilt in repair mode, its link cut off
      in TCP repair mode, link cut off]           (``connections.py``)
                                            ◀──  Restored(address, proof)
    checks the proof (proof.py)
    Done                                    ──▶  the destination keeps the sandbox;
                                                  [attaches, announces, serves them]
                                            ◀──  Ack
    the source deletes its copy

The commit point is the destination reading ``Done``.  Before it, any failure on either
side (an error, a deadline, a closed connection, a signal) makes the destination stop
what it restored and discard what it received, and the source resume its sandbox.
After it, the destination never sends ``Error``: whatever happens (a signal too) it
keeps the sandbox and answers ``Ack``.  So an ``Error`` in answer to ``Done`` means the
destination cancelled before committing, and the source resumes; only silence after
``Done`` leaves the outcome unknown, and the source's copy paused.  The source sends
``Done`` only after its guard (``guard.py``) knows the migration commits, so a source
CLI killed after that point never resumes a copy the destination may run.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpt.engines import ENGINE_NAMES
from ckpt.errors import CkptError
from ckpt.migration import messages as m
from ckpt.migration.errors import FrameError, MigrationError
from ckpt.migration.proof import NONCE_BYTES, proof

LINGER_S = 10.0  # after refusing, read what the source still sends until it hears
RESTORE_WAIT = 5  # io_timeouts the source may take to answer Restored (it checks it)
PAGES_PER_S = 256  # post-copy: the slowest feed waited for (1 MiB/s), past io_timeout


class Exists(MigrationError):
    """The destination already has a sandbox of that ID."""


def check_offer(offer: m.Offer) -> None:
    """Refuse an offer whose values are out of range, before anything is made for it."""
    from ckpt.sandbox.wire.paths import check_id
    from ckpt.statefile.format import MAX_PAGES

    try:
        check_id(offer.sandbox_id)
    except Exception as exc:
        raise FrameError(f"the peer offered a bad sandbox ID: {exc}") from exc
    if offer.engine and offer.engine not in ENGINE_NAMES:
        raise FrameError(f"the peer offered an unknown engine {offer.engine!r}")
    if not 0 < offer.pages <= MAX_PAGES:
        raise FrameError(f"the peer offered {offer.pages} pages (at most {MAX_PAGES})")
    if offer.cpus is not None and not (math.isfinite(offer.cpus) and 0 < offer.cpus <= 1024):
        raise FrameError(f"the peer offered a CPU quota of {offer.cpus}")
    if offer.port is not None and not 0 <= offer.port <= 65535:
        raise FrameError(f"the peer offered port {offer.port}")
    if offer.ip is not None or offer.prefix is not None or offer.mac is not None:
        from ckpt.sandbox.wire import netns

        if not netns.offered_ok(offer.ip, offer.prefix, offer.mac):
            raise FrameError("the peer offered a malformed address or MAC")
    if offer.bridge is not None:
        from ckpt.sandbox.wire import netns

        if offer.ip is None or not netns._IFNAME.fullmatch(offer.bridge):
            raise FrameError("the peer offered a malformed bridge name")
    if len(offer.nonce) != NONCE_BYTES:
        raise FrameError(f"the peer's offer has a {len(offer.nonce)}-byte nonce, not {NONCE_BYTES}")


@dataclass
class Received:
    """What one accepted migration did on the destination, for its log line."""

    sandbox_id: str
    images: int = 0
    address: str | None = None
    restore_ms: float = 0.0
    committed: bool = False
    notes: list[str] = field(default_factory=list)


def receive(
    ch: Any,
    root: Any,
    bridge: str | None = None,
    *,
    first: m.Message | None = None,
    resumable: Any = None,
    resume_s: float = 0.0,
) -> Received:
    """Run the destination's side of one session on an accepted channel.  With
    ``bridge``, a sandbox that had an address of its own gets it (and its MAC) again,
    its veth on ``bridge``; without, on a bridge named as the source's, which must be
    here (else the offer is refused and the source runs on).  ``first``: the offer,
    when the server read it already.  Post-copy, the relay joins ``resumable`` (a
    ``reconnect.Resumable``) while it runs, to wait ``resume_s`` for a source that lost
    its channel after the commit.

    On any failure (or a signal raised as an exception) before ``Done``, the restored
    sandbox is stopped and removed, the received images are removed, and the error is
    told to the source when the channel still works."""
    from ckpt.migration import connections
    from ckpt.migration.guard import COMMITTED, RESTORING, Guard, destination_act
    from ckpt.migration.incoming import Incoming, NoSpace
    from ckpt.migration.postcopy import DestRelay
    from ckpt.sandbox.client import lifecycle, testhooks
    from ckpt.sandbox.client.deadlines import restore_timeout

    offer = ch.recv() if first is None else first
    try:
        if not isinstance(offer, m.Offer):
            raise FrameError(f"the peer began with a {type(offer).__name__}, not an Offer")
        check_offer(offer)
    except FrameError as exc:  # told, so the source's error says why, not "closed"
        ch.send_error(m.ErrorCode.REFUSED, f"refused the offer: {exc}")
        raise
    sid = offer.sandbox_id
    if root.exists(sid):
        ch.send_error(m.ErrorCode.EXISTS, f"sandbox {sid} already exists on the destination")
        raise Exists(f"refused sandbox {sid}: it already exists under {root.path}")
    try:
        net = _arriving_net(root, sid, offer, bridge)
    except CkptError as exc:  # refused before anything is made: the source runs on
        ch.send_error(m.ErrorCode.REFUSED, f"refused sandbox {sid}: {exc}")
        raise MigrationError(f"refused sandbox {sid}: {exc}") from None
    got = Received(sid)
    incoming = Incoming(root.path, offer)
    guard = Guard(incoming.dir, destination_act(root, sid))  # for a server killed
    relay = None  # post-copy: the pages that come after the restore
    made = False  # a sandbox of ``sid`` exists here that this migration made
    acked = False  # Done was answered
    try:
        ch.send(m.Ack(seq=ch.frames_received))
        _warm_template(root)  # a restore forks it
        if offer.post_copy:  # the relay's, imported now rather than as it restores
            from ckpt.images import pagefeed  # noqa: F401
        # The sandbox's process is made while the rounds arrive: once the final image
        # is in, only loading it is left.  From here the guard removes it if we die.
        guard.say(RESTORING)
        # its link stays cut off until the commit: the source owns the address till then
        on_net = {"net": net, "attached": False} if net is not None else {}
        prepared = lifecycle.prepare_restore(root, sid, offer.cpus, offer.engine or None, **on_net)
        made = True
        while True:
            end = incoming.receive_image(ch)
            got.images += 1
            if end.final:
                break
            ch.send(m.Ack(seq=ch.frames_received))
        assert incoming.final is not None
        moved = _moved_connections(ch, offer)
        feed = None
        if offer.post_copy:  # the pages the final image left out, fed as it runs
            relay = DestRelay(ch, incoming.dir, offer.pages, nonce=offer.nonce, resume_s=resume_s)
            feed = relay.listen()  # its map is read as the sandbox restores, not before
            relay.start(prepared.st.pid, restore_timeout(incoming.final, offer.cpus))
            if resumable is not None:
                resumable.add(sid, relay)
        t0 = time.perf_counter()
        try:
            result = lifecycle.restore(
                root,
                sid,
                Path(incoming.final),
                cpus=offer.cpus,
                engine=offer.engine or None,
                port=offer.port,
                any_port=offer.port is None,  # the port it had is taken here: another
                background=True,  # pages fill in behind: the files are open, ours, verified
                prepared=prepared,
                feed=feed,
            )
        except CkptError:
            if relay is not None:  # the feed failed first: its cause, not the symptom
                relay.raise_failure()
            raise
        if net is not None:  # in repair mode, silent, until the commit
            connections.rebuild(root, sid, net, moved, incoming.dir)
            testhooks.pause_point("serve:rebuilt")  # tests: Restored is not sent yet
        got.restore_ms = round((time.perf_counter() - t0) * 1e3, 3)
        got.notes = list(result.notes)
        got.address = _running_address(lifecycle, root, sid)  # proven once seen running
        shown = proof(offer.nonce, sid, got.address, incoming.state_sha256)
        ch.send(m.Restored(address=got.address, restore_ms=got.restore_ms, proof=shown))
        wait = ch.io_timeout * RESTORE_WAIT
        done = ch.recv() if relay is None else relay.next(wait)
        if not isinstance(done, m.Done):
            raise FrameError(f"the peer sent a {type(done).__name__} instead of Done")
        got.committed = True
        guard.say(COMMITTED)
        if net is not None:  # the address is announced here, the connections go on
            try:
                connections.live(root, sid, net)
            except MigrationError as exc:
                got.notes.append(str(exc))
        acked = True
        _ack_commit(ch)
        if relay is not None and relay.pages:  # the source keeps its copy until this
            relay.wait_held(ch.io_timeout * RESTORE_WAIT + relay.pages / PAGES_PER_S)
            got.notes.append(f"post-copy: {relay.pages} pages arrived after it resumed")
            if relay.reconnects:
                got.notes.append(f"post-copy: the source reconnected {relay.reconnects}x")
            relay.send_last(lambda now: m.Ack(seq=now.frames_received), resume_s)
        return got
    except BaseException as exc:
        if got.committed:  # it keeps the sandbox: the source hears Ack, never Error
            if not acked:
                _ack_commit(ch)
            raise
        if made:
            _stop(lifecycle, root, sid)
        if isinstance(exc, MigrationError | OSError) and not ch_closed(ch):
            code = m.ErrorCode.NO_SPACE if isinstance(exc, NoSpace) else m.ErrorCode.INTERNAL
            if isinstance(exc, FrameError):
                code = m.ErrorCode.PROTOCOL
            ch.send_error(code, str(exc), linger=LINGER_S)
        elif isinstance(exc, CkptError) and not ch_closed(ch):  # its own words, no repr
            ch.send_error(
                m.ErrorCode.RESTORE_FAILED, f"the destination failed: {exc}", linger=LINGER_S
            )
        elif not isinstance(exc, MigrationError):
            ch.send_error(m.ErrorCode.CANCELLED, f"the destination gave up: {exc!r}")
        raise
    finally:
        if relay is not None:
            if resumable is not None:
                resumable.drop(sid, relay)
            relay.close()
        incoming.discard()
        guard.close()


def _arriving_net(root: Any, sid: str, offer: m.Offer, bridge: str | None) -> Any:
    """The network an arriving sandbox is given: its offered address and MAC on this
    server's bridge (else on the bridge named as the source's, which must be here),
    under the names this root derives for it; None for a sandbox without an address."""
    if offer.ip is None or offer.prefix is None or offer.mac is None:
        return None
    from ckpt.sandbox.wire import netns

    if bridge is None:
        if offer.bridge is None:
            return None
        bridge = offer.bridge
        try:
            netns.check_bridge(bridge)
        except CkptError as exc:
            raise MigrationError(
                f"it has an address of its own on bridge {bridge}, and {exc}; or serve with "
                "--bridge BR"
            ) from None

    ns_name, veth = netns.names(netns.root_hash(root.cgroup_parent()), sid)
    net = netns.Net(bridge, offer.ip, offer.prefix, offer.mac, ns_name, veth)
    netns.check_unused(root, net)  # a sandbox here already answers on that address
    return net


def _moved_connections(ch: Any, offer: m.Offer) -> bytes:
    """The ``Connections`` a source with an address of its own sends after its final
    image, checked; b"" from any other source."""
    if offer.ip is None:
        return b""
    from ckpt.migration import connections

    msg = ch.recv()
    if not isinstance(msg, m.Connections):
        raise FrameError(f"the peer sent a {type(msg).__name__} instead of its connections")
    return connections.received(msg.data, offer.ip)


def _warm_template(root: Any) -> None:
    """Start the root's template if it is not running (it may have idled out)."""
    from ckpt.errors import CkptError
    from ckpt.sandbox.client import template_client

    if not template_client.disabled():
        with contextlib.suppress(CkptError, OSError):
            template_client.start(root.path)


def _running_address(lifecycle: Any, root: Any, sid: str) -> str | None:
    """The restored sandbox's address, once its record and process say it runs."""
    from ckpt.sandbox.wire.paths import RUNNING

    st = lifecycle.state(root, sid)
    if st.status != RUNNING:
        raise MigrationError(f"the restored sandbox {sid} is {st.status}, not running")
    return st.address


def _ack_commit(ch: Any) -> None:
    """Acknowledge ``Done`` (best effort: the source deletes its copy on it)."""
    with contextlib.suppress(MigrationError, OSError):
        ch.send(m.Ack(seq=ch.frames_received))


def ch_closed(ch: Any) -> bool:
    return bool(getattr(ch, "_closed", False))


def _stop(lifecycle: Any, root: Any, sid: str) -> None:
    """Remove a sandbox this destination restored but must not keep."""
    with contextlib.suppress(Exception):  # the caller's error is reported; list shows the rest
        lifecycle.delete(root, sid, force=True)
