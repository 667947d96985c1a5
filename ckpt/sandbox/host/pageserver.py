"""Inside a source sandbox after a post-copy freeze: its remote pages, served.

The final image of a post-copy migration (``send.py``) holds the kernel state and no
pages: the frames dirtied since the last round stay here, in the paused kernel's
memory, and :func:`serve_pages` sends them down the control connection (the ``pages``
verb) as ``pagexfer`` RUN frames while the destination already runs.  The map of
those pages goes first, ended by an empty MAP frame.  The client writes ``WANT``
frames (``images.pagefeed``) on the same connection for pages the destination read
before they came; those go first, then the push goes on where it was, in its order:
the pages the sandbox touched last before the freeze (``MemoryFile``'s record of the
final round, REAP's working set), then the rest ascending.  Each page goes once.

After a reconnect (``resend``) the client first names the pages the destination
still lacks (``AGAIN`` frames): the stream is then theirs alone, sent before or not.

Fault point ``push-delay`` (``ckpt/faults.py``) paces the push to a batch every
SECONDS (pages asked for still go at once), so a test can act inside the window.

The kernel stays frozen throughout, so a page read now is the page at the freeze.
The stream ends with an END frame once every page went, and the reply's counters say
how many were asked for and pushed.

Stdlib and ``ckpt`` only, no ``typing`` at run time: the sandbox process imports this.
"""

from __future__ import annotations

import collections
import os
import threading
import time

from ckpt import faults
from ckpt.errors import SandboxError
from ckpt.faults import Fault
from ckpt.kernel.framebits import runs_of_frames

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any

PUSH_BATCH = 32  # pages pushed between two looks at the wanted ones (128 KiB)
MAX_WANTED = 4096  # WANT frames queued at once; a client past it is refused


class Remote:
    """What a post-copy freeze left to send: the remote frames, ascending, and those
    to push first (touched in the final round)."""

    def __init__(self, frames: list[int], first: list[int]) -> None:
        self.frames = frames
        self.first = first


def push_order(remote: Remote) -> list[int]:
    """The order pages are pushed in: the recent working set, then the rest ascending."""
    wanted = set(remote.frames)
    first = list(dict.fromkeys(f for f in remote.first if f in wanted))
    seen = set(first)
    return first + [f for f in remote.frames if f not in seen]


def serve_pages(host: Any, request: Any, conn: socket.socket) -> dict[str, Any]:
    """The ``pages`` verb (see module doc); returns the reply's counters."""
    from ckpt.images.pagefeed import RUN_REF, Feed, frame, map_frames, read_frame, recv_exact
    from ckpt.images.pagexfer import FRAME, RUN_HEAD, Frame, end_frame, runs_of

    remote: Remote | None = getattr(host, "postcopy", None)
    if remote is None or host.kernel is None:
        raise SandboxError(f"sandbox {host.id} has no post-copy pages to serve")
    if not host.frozen:
        raise SandboxError(f"sandbox {host.id} runs: its pages are no longer the frozen ones")
    if getattr(request, "resend", False):  # after a reconnect: only what the client lacks
        remote = Remote(_named(remote.frames, recv_exact(conn)), remote.first)
    for data in map_frames(runs_of_frames(remote.frames), mapped=False):
        conn.sendall(data)  # first: the destination restores once it has the map
    conn.sendall(frame(Feed.MAP))  # an empty MAP: the map is whole
    ours = _marks(remote.frames)
    limit = len(ours)
    sent = bytearray(limit)
    wanted: collections.deque[tuple[int, int]] = collections.deque()
    cond = threading.Condition()
    closed = [False]

    def read_wants() -> None:
        read = recv_exact(conn)
        try:
            while True:
                kind, payload = read_frame(read)
                if kind == Feed.HANG_UP:
                    hang_up(host)
                    continue
                if kind != Feed.WANT or len(payload) != RUN_REF.size:
                    raise SandboxError(f"the client sent a frame of kind {kind} for pages")
                first, count = RUN_REF.unpack(payload)
                with cond:
                    if len(wanted) >= MAX_WANTED:
                        raise SandboxError("the client asked for pages faster than they go")
                    wanted.append((first, min(count, 1024)))
                    cond.notify()
        except Exception:  # the client is gone or broke the protocol
            with cond:
                closed[0] = True
                cond.notify()

    reader = threading.Thread(target=read_wants, name="ckpt-wants", daemon=True)
    reader.start()
    mf = host.kernel.memory_file
    counters = {"postcopy_pushed": 0, "postcopy_wanted": 0, "postcopy_bytes": 0}

    def send(frames: list[int], kind: str) -> None:
        frames = sorted(f for f in frames if f < limit and ours[f] and not sent[f])
        if not frames:
            return
        for f in frames:
            sent[f] = 1
        with host.cond:
            pages = list(mf.pages(frames))
        for run in runs_of(pages):
            conn.sendall(FRAME.pack(Frame.RUN, RUN_HEAD.size + len(run.data)))
            conn.sendall(RUN_HEAD.pack(run.first, run.npages, run.codec) + run.data)
            counters["postcopy_bytes"] += len(run.data)
        counters[kind] += len(frames)

    order = push_order(remote)
    delay = faults.injected(Fault.PUSH_DELAY)  # tests: a window that stays open
    pace = delay.seconds if delay is not None else 0.0
    next_push = time.monotonic()
    at = 0
    t0 = time.perf_counter()
    while at < len(order):
        with cond:
            if closed[0] and not wanted:
                raise SandboxError("the client stopped reading the post-copy pages")
            if pace and not wanted:  # the slowed push waits, the pages asked for do not
                cond.wait(max(0.0, next_push - time.monotonic()))
            asked = list(wanted)
            wanted.clear()
        for first, count in asked:
            send(list(range(first, first + count)), "postcopy_wanted")
        if time.monotonic() < next_push:
            continue
        next_push = time.monotonic() + pace
        batch: list[int] = []
        while at < len(order) and len(batch) < PUSH_BATCH:
            if not sent[order[at]]:
                batch.append(order[at])
            at += 1
        send(batch, "postcopy_pushed")
    sent_pages = counters["postcopy_pushed"] + counters["postcopy_wanted"]
    conn.sendall(end_frame(os.urandom(16), {}, sent_pages, 0))
    counters["postcopy_push_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
    return counters


def _marks(frames: list[int]) -> bytearray:
    """A byte per frame up to the last of the ascending ``frames``: 1 for theirs."""
    marks = bytearray(frames[-1] + 1 if frames else 0)
    for f in frames:
        marks[f] = 1
    return marks


def _named(frames: list[int], read: Any) -> list[int]:
    """The client's ``AGAIN`` runs (an empty one ends them): those of ``frames``, the
    remote ones, ascending; it may name each remote page once at most."""
    from ckpt.images.pagefeed import RUN_REF, Feed, read_frame

    ours = _marks(frames)
    limit = len(ours)
    named = bytearray(limit)
    left = len(frames)
    while True:
        kind, payload = read_frame(read)
        if kind != Feed.AGAIN or len(payload) not in (0, RUN_REF.size):
            raise SandboxError(f"the client sent a frame of kind {kind} for pages to resend")
        if not payload:
            return [f for f in frames if named[f]]
        first, count = RUN_REF.unpack(payload)
        if count > left or first + count > limit:
            raise SandboxError("the client named pages to resend that are not remote ones")
        left -= count
        for f in range(first, first + count):
            named[f] = ours[f]


def hang_up(host: Any) -> None:
    """Committed: the sandbox runs on the destination, so its clients here are hung up
    and its port let go while the pages are still served: they reconnect there, rather
    than wait on a paused copy until the last page has gone.  ``listen_again`` undoes
    it for a resume after the destination lost it."""
    with host.cond:
        http, host.http = host.http, None
    if http is not None:
        host.hung_up_port = http.address[1]
        http.close(shutdown=not host.handed_over)


def listen_again(host: Any) -> None:
    """A source resumed after its post-copy destination lost the sandbox: serve on
    the port it had (the one it let go at the commit)."""
    port = getattr(host, "hung_up_port", None)
    if port is not None and host.http is None:
        host.hung_up_port = None
        with host.cond:
            host._listen(port)
