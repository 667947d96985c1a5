"""Post-copy: the destination runs the sandbox before its newest pages have arrived.

After ``--rounds`` pre-copy rounds (0: none) the source freezes its sandbox and sends
a final image with the kernel state and no pages, then the map of the pages it left
out (``PageMap``).  The destination restores at once; those pages reach its sandbox
through a feed (``images/pagefeed.py``) while it runs::

    source sandbox ─pages verb─▶ ckpt migrate ─channel─▶ ckpt serve ─feed─▶ sandbox
      (paused: pageserver.py)    SourcePager    PageRuns   DestRelay   RemotePages
                               ◀─── WANT ─────  ◀─ Fault ──            ◀─ WANT ──

A page the destination reads before it came is asked for (``Fault``) and goes ahead
of the push; the push sends the pages the sandbox touched last first, then the rest.

The window: from the commit (the source reads ``Ack`` to ``Done``) until the
destination holds every page, the newest state is split between the hosts, as in
QEMU's post-copy.  The source's copy stays paused through it (its guard leaves it
paused: ``guard.PAGING``), never resumed (two copies) nor deleted (the pages would be
lost), and is deleted once the destination says it holds every page (``Ack`` after
the push's ``RoundEnd``).  A destination that loses its source in the window stops its
sandbox and logs how many pages never arrived; a source that loses its destination
keeps its paused copy and says so.  Before the commit, a failure is a pre-copy
migration's: the source resumes.  The destination sends an empty ``Fault`` every
second while it waits, so each side's ``io_timeout`` notices a dead peer.

A link cut inside the window is survived (``reconnect.py``): the source connects
again and says ``Resume``; the relay takes the new channel, sends the map of the pages
it has not received (a page relayed to the sandbox is held there) and asks again for
the pages its sandbox waits on; the source has its sandbox send those again
(``resend``).  Either side gives up after ``migrate_reconnect_s`` as above.
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ckpt.images.pagexfer import PageMap, PageRun, StreamEnd
from ckpt.migration import messages as m
from ckpt.migration.errors import FrameError, MigrationError, PeerError
from ckpt.migration.pagechannel import ChannelSink
from ckpt.statefile.format import PAGE_SIZE

KEEPALIVE_S = 1.0  # the destination's empty Fault while it waits: it is alive
WINDOW_STEP_S = 0.05  # how often the window (bytes still only on the source) is sampled
FEED_NAME = "feed.sock"
MAX_ASKED = 4096  # runs the relay remembers asking for, to ask again after a cut


def send_map(ch: Any, runs: list[tuple[int, int]]) -> None:
    """``runs`` as ``PageMap`` messages, the last one marked (an empty map: one)."""
    for at in range(0, max(len(runs), 1), m.MAX_MAP_RUNS):
        last = at + m.MAX_MAP_RUNS >= len(runs)
        ch.send(m.PageMap(runs=runs[at : at + m.MAX_MAP_RUNS], last=last))


def recv_map(ch: Any, limit: int) -> list[tuple[int, int]]:
    """The ``PageMap`` messages up to the last one, checked: ascending, disjoint,
    inside ``limit`` pages."""
    runs: list[tuple[int, int]] = []
    end = 0
    while True:
        msg = ch.recv()
        if not isinstance(msg, m.PageMap):
            raise FrameError(f"the peer sent a {type(msg).__name__} instead of its page map")
        for first, count in msg.runs:
            if first < end or first + count > limit:
                raise FrameError("the peer's page map has runs out of order or range")
            end = first + count
        runs.extend(msg.runs)
        if msg.last:
            return runs


class SourcePager:
    """The source's side, from the post-copy freeze until every page has gone: the
    sandbox's ``pages`` stream (``send_client.pages``) on to the channel, in a thread;
    ``want`` passes on a ``Fault``.  ``join`` returns the stream's counters.

    ``resend``: after a reconnect, only those pages, the ones the destination lacks
    (their map is not sent: the destination made it); ``carry``: the pager before the
    cut, whose window goes on."""

    def __init__(
        self,
        root: Any,
        sid: str,
        ch: Any,
        round_no: int,
        *,
        resend: list[tuple[int, int]] | None = None,
        carry: SourcePager | None = None,
    ) -> None:
        self.root, self.sid, self.ch = root, sid, ch
        self.sink = ChannelSink(ch, round_no, final=False)
        self.resend = resend
        self.map_pages = 0
        self.channel_failed = False  # the stream stopped because the channel did
        self.mapped = threading.Event()
        self._conn: socket.socket | None = None
        self._early: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ckpt-pager", daemon=True)
        self.t_last = self._t0 = self._t_sample = 0.0
        self.window: list[tuple[float, int]] = []  # see _sample
        if carry is not None:
            self.window, self._t_sample = carry.window, carry._t_sample

    def start(self) -> None:
        self._t0 = self._t_sample = time.perf_counter()
        self._thread.start()

    def _run(self) -> None:
        from ckpt.sandbox.client import send_client

        try:
            self._result = send_client.pages(
                self.root, self.sid, self._event, self._connected, resend=self.resend is not None
            )
        except BaseException as exc:  # joined by the session's thread
            self._error = exc
            if self.channel_failed:  # wake the session's thread, reading the channel
                self.ch.close()
        finally:
            self.mapped.set()

    def _event(self, event: Any) -> None:
        if isinstance(event, PageMap) and not self.mapped.is_set():
            if not event.runs:  # an empty MAP: the map is whole
                if self.resend is None:
                    self._to_channel(m.PageMap(runs=[], last=True))
                self.mapped.set()
                return
            self.map_pages += sum(count for _, count in event.runs)
            for at in range(0, len(event.runs), m.MAX_MAP_RUNS):
                if self.resend is None:
                    runs = event.runs[at : at + m.MAX_MAP_RUNS]
                    self._to_channel(m.PageMap(runs=runs, last=False))
            return
        if not self.mapped.is_set():
            raise MigrationError("the sandbox sent its post-copy pages before their whole map")
        if isinstance(event, StreamEnd) and not self.map_pages and self.resend is None:
            return  # nothing was left out: the session goes on as pre-copy's
        if isinstance(event, PageRun | StreamEnd):
            self._to_channel(event)
            self.t_last = time.perf_counter()
            self._sample(isinstance(event, StreamEnd))
        else:
            raise MigrationError("the sandbox sent kernel state among its post-copy pages")

    def _to_channel(self, item: Any) -> None:
        """A map message or a stream event on to the channel; a failure there is the
        channel's (a reconnect may mend it), not the sandbox's."""
        try:
            if isinstance(item, m.Message):
                self.ch.send(item)
            else:
                self.sink(item)
        except BaseException:
            self.channel_failed = True
            raise

    def _sample(self, last: bool) -> None:
        """The window: (ms since the pages began, bytes not sent yet), every
        ``WINDOW_STEP_S`` and at the end."""
        now = self.t_last
        if last or not self.window or now - self._t_sample >= WINDOW_STEP_S:
            self._t_sample = now
            left = max(0, self.map_pages - self.sink.pages) * PAGE_SIZE
            self.window.append((round((now - self._t0) * 1e3, 1), left))

    def _connected(self, conn: socket.socket) -> None:
        from ckpt.images.pagefeed import RUN_REF, Feed, frame

        if self.resend is not None:  # which pages: before anything else
            frames = [frame(Feed.AGAIN, RUN_REF.pack(f, n)) for f, n in self.resend]
            conn.sendall(b"".join(frames) + frame(Feed.AGAIN))
        with self._lock:
            self._conn = conn
            early, self._early = self._early, []
        if early:
            self.want(early)

    def want(self, runs: list[tuple[int, int]]) -> None:
        """Pages the destination asked for: to the sandbox, ahead of its push."""
        from ckpt.images.pagefeed import RUN_REF, Feed, frame

        with self._lock:
            if self._conn is None:
                self._early.extend(runs)
                return
            conn = self._conn
        data = b"".join(frame(Feed.WANT, RUN_REF.pack(f, n)) for f, n in runs)
        with contextlib.suppress(OSError):  # the stream ended: every page went
            conn.sendall(data)

    def hang_up(self) -> None:
        """Committed: the sandbox's clients here are hung up, its port let go, so they
        find it there (the sandbox keeps serving its pages)."""
        from ckpt.images.pagefeed import Feed, frame

        with self._lock:
            conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(frame(Feed.HANG_UP))

    def join(self, timeout: float) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise MigrationError(f"the source's pages did not all go within {timeout:g} s")
        if self._error is not None:
            raise self._error
        return self._result

    def failed_here(self) -> bool:
        """The stream ended for the sandbox's sake, not the channel's: no reconnect
        mends that."""
        return self._error is not None and not self.channel_failed

    def result_counters(self) -> dict[str, Any]:
        """The stream's counters if it ended whole (after :meth:`stop`), else none."""
        return dict(self._result.counters) if self._result is not None else {}

    def stop(self, wait_s: float = 10.0) -> None:
        """End the stream (the migration failed before its commit), so the sandbox
        is free for the resume that follows."""
        with self._lock:
            conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(wait_s)


def answer_faults(ch: Any, pager: SourcePager | None, kind: type[m.Message], what: str) -> Any:
    """The next message of ``kind`` from the destination, passing each ``Fault`` on to
    ``pager`` meanwhile (an empty one is the destination's keep-alive; with no pager,
    every page has gone)."""
    while True:
        msg = ch.recv()
        if isinstance(msg, m.Fault):
            if pager is not None:
                pager.want(list(msg.runs))
            continue
        if isinstance(msg, kind):
            return msg
        raise FrameError(f"the destination sent a {type(msg).__name__} {what}")


class DestRelay:
    """The destination's side: the map, then a feed socket the restoring sandbox
    connects to, and threads relaying the channel's pages to it and its ``WANT``s to
    the channel.  From :meth:`start` it owns ``ch.recv``: the session's thread takes
    the source's other messages from :meth:`next`.

    Committed (it read ``Done``), a broken channel is not the end: :meth:`resume`
    hands it the source's next one within ``resume_s``; ``ch`` is always the one in
    use."""

    def __init__(
        self, ch: Any, workdir: Path, limit: int, *, nonce: bytes = b"", resume_s: float = 0.0
    ) -> None:
        self.ch = self._first = ch
        self.limit = limit
        self.nonce = nonce
        self.resume_s = resume_s
        self.runs: list[tuple[int, int]] = []
        self.pages = 0
        self.path = Path(workdir) / FEED_NAME
        self._short: Path | None = None  # a directory made for a shorter path
        self._listener: socket.socket | None = None
        self._feed: socket.socket | None = None
        self._inbox: queue.Queue[Any] = queue.Queue()
        self._next: queue.Queue[Any] = queue.Queue()  # channels of a reconnect; None: closed
        self._swapped = threading.Condition()
        self._have = bytearray()  # 1: relayed to the sandbox
        self._asked: collections.deque[tuple[int, int]] = collections.deque(maxlen=MAX_ASKED)
        self._expect = 0  # pages the source's current stream brings
        self._end_sent = False
        self.held = threading.Event()
        self.stop = threading.Event()
        self.committed = False  # it read Done: a cut channel waits for a reconnect
        self.received = 0
        self.reconnects = 0
        self.t_held = 0.0

    def read_map(self) -> None:
        """The ``PageMap`` messages after the final image (``recv_map``)."""
        self.runs = recv_map(self.ch, self.limit)
        self.pages = self._expect = sum(count for _, count in self.runs)
        self._have = bytearray(self.runs[-1][0] + self.runs[-1][1] if self.runs else 0)

    def missing(self) -> list[tuple[int, int]]:
        """Runs of the mapped pages not relayed yet."""
        have, out = self._have, []
        for first, count in self.runs:
            at, end = first, first + count
            while at < end and (gap := have.find(0, at, end)) >= 0:
                at = have.find(1, gap, end)
                at = end if at < 0 else at
                out.append((gap, at - gap))
        return out

    def listen(self) -> str:
        """The feed's socket path, listening (a directory of ours, 0700: the
        migration's own, or one made in the temp dir when that path is too long)."""
        from ckpt.sandbox.wire.paths import MAX_SOCKET_PATH

        if len(os.fsencode(str(self.path.absolute()))) > MAX_SOCKET_PATH:
            self._short = Path(tempfile.mkdtemp(prefix="ckpt-feed-"))
            self.path = self._short / FEED_NAME
        from ckpt.sandbox.wire.rpc import listen_unix

        self._listener = listen_unix(self.path, 1)
        return str(self.path)

    def start(self, sandbox_pid: int, accept_s: float) -> None:
        """Relay from now, in a thread: read the map (``read_map``), accept the
        sandbox's feed (from ``sandbox_pid`` only), send it the map, then pages as
        they come.  The sandbox restores meanwhile: it reads the map last."""
        threading.Thread(
            target=self._relay, args=(sandbox_pid, accept_s), name="ckpt-relay", daemon=True
        ).start()

    def _relay(self, pid: int, accept_s: float) -> None:
        from ckpt.images.pagefeed import map_frames

        try:
            self.read_map()
            feed = self._accept(pid, accept_s)
            for data in map_frames(self.runs):
                feed.sendall(data)
            threading.Thread(target=self._wants, name="ckpt-wants", daemon=True).start()
            while True:  # until the channel closes: Done may come after the last page
                try:
                    msg = self.ch.recv()
                except (FrameError, PeerError):
                    raise  # the source broke the protocol or gave up: no reconnect mends it
                except (MigrationError, OSError) as exc:
                    if not self.committed:
                        raise
                    self._rejoin(exc)
                    continue
                if isinstance(msg, m.PageRuns):
                    feed.sendall(self._run_frames(msg))
                    continue
                if isinstance(msg, m.RoundEnd):  # every page went: the sandbox checks
                    if msg.pages != self._expect or msg.final or self.missing():
                        raise FrameError("the peer's post-copy pages ended not as mapped")
                    self._end()
                    continue
                if isinstance(msg, m.Done):  # the commit: from here a cut is waited out
                    self.committed = True
                self._inbox.put(msg)
        except BaseException as exc:  # handed to the session's thread
            self._lost(exc)
            self._inbox.put(exc)

    def raise_failure(self) -> None:
        """Raise what broke the relay, if it broke (the restore failed meanwhile)."""
        try:
            item = self._inbox.get(timeout=0.5)
        except queue.Empty:
            return
        if isinstance(item, BaseException):
            raise item
        self._inbox.put(item)

    def _end(self) -> None:
        from ckpt.images.pagefeed import Feed, frame

        if not self._end_sent and self._feed is not None:
            self._end_sent = True
            self._feed.sendall(frame(Feed.END))

    def resume(self, ch: Any, nonce: bytes) -> None:
        """The source's new channel after a cut (``Resume``): taken if this migration
        committed and the nonce is its offer's; the channel in use is closed, so the
        relay's thread moves on to the new one."""
        if not self.committed or self.stop.is_set():
            raise MigrationError("its migration here is not in its post-copy window")
        if not hmac.compare_digest(nonce, self.nonce):
            raise MigrationError("its nonce is not the migration's")
        self._next.put(ch)
        with contextlib.suppress(OSError, MigrationError):
            self.ch.close()

    def _rejoin(self, why: BaseException) -> None:
        """The channel broke, committed: take the source's next one within
        ``resume_s``, tell it what is missing, ask again for what the sandbox waits on."""
        with contextlib.suppress(OSError, MigrationError):
            self.ch.close()
        deadline = time.monotonic() + self.resume_s
        while True:
            left = deadline - time.monotonic()
            try:
                ch = self._next.get(timeout=max(left, 0.0)) if left > 0 else None
            except queue.Empty:
                ch = None
            if ch is None:
                raise MigrationError(
                    f"the link to the source broke ({why}) and it did not come back "
                    f"within {self.resume_s:g} s"
                )
            missing = self.missing()
            try:
                send_map(ch, missing)
                for first, count in list(self._asked):
                    if self._have.find(0, first, first + count) >= 0:
                        ch.send(m.Fault(runs=[(first, count)]))
            except (MigrationError, OSError) as exc:
                why = exc
                with contextlib.suppress(OSError, MigrationError):
                    ch.close()
                continue
            with self._swapped:
                self.ch = ch
                self._expect = sum(count for _, count in missing)
                self.reconnects += 1
                self._swapped.notify_all()
            if not missing:
                self._end()
            return

    def _accept(self, pid: int, accept_s: float) -> socket.socket:
        from ckpt.sandbox.wire.rpc import peer_of

        assert self._listener is not None
        self._listener.settimeout(accept_s)
        try:
            conn, _ = self._listener.accept()
        except TimeoutError:
            raise MigrationError(
                f"the restored sandbox did not ask for its pages within {accept_s:g} s"
            ) from None
        if peer_of(conn) != pid:
            conn.close()
            raise MigrationError("a process other than the restored sandbox took its pages")
        conn.settimeout(None)
        self._feed = conn
        return conn

    def _mark(self, first: int, count: int) -> None:
        """Pages ``first``.. relayed: the sandbox holds them whatever the channel does."""
        if first + count > self.limit:
            raise FrameError(f"the peer sent pages {first}..{first + count} out of range")
        self.received += count
        have = self._have
        end = min(first + count, len(have))
        if first < end:
            have[first:end] = b"\x01" * (end - first)

    def _run_frames(self, msg: m.PageRuns) -> bytes:
        """A ``PageRuns`` as feed RUN frames: a run of zero pages as one without data,
        one stored run as it came, anything else raw in runs the feed takes."""
        from ckpt.images.pagefeed import Feed, frame
        from ckpt.images.pagexfer import RUN_HEAD, ZERO
        from ckpt.statefile.format import CODEC_NONE, CODEC_ZSTD, PAGES_PER_CHUNK
        from ckpt.statefile.pages_map import ZERO_PAGE

        if len(msg.runs) == 1 and msg.runs[0][1] <= PAGES_PER_CHUNK:
            first, count = msg.runs[0]  # one stored run, as the source sandbox made it:
            if msg.codec not in (CODEC_NONE, CODEC_ZSTD):  # the sandbox checks the rest
                raise FrameError(f"the peer sent pages with unknown codec {msg.codec}")
            self._mark(first, count)
            return frame(Feed.RUN, RUN_HEAD.pack(first, count, msg.codec) + msg.data)
        pages = m.unpack_pages(msg)  # runs, sizes and data checked here
        out = []
        at = 0
        for first, count in msg.runs:
            self._mark(first, count)
            run = pages[at : at + count]
            at += count
            if all(page == ZERO_PAGE for _, page in run):
                out.append(frame(Feed.RUN, RUN_HEAD.pack(first, count, ZERO)))
            else:
                for i in range(0, count, PAGES_PER_CHUNK):
                    part = run[i : i + PAGES_PER_CHUNK]
                    raw = b"".join(page for _, page in part)
                    head = RUN_HEAD.pack(first + i, len(part), CODEC_NONE)
                    out.append(frame(Feed.RUN, head + raw))
        return b"".join(out)

    def _wants(self) -> None:
        """The sandbox's WANTs to the channel as ``Fault``s, until it holds every page."""
        from ckpt.images.pagefeed import RUN_REF, Feed, read_frame, recv_exact

        assert self._feed is not None
        read = recv_exact(self._feed)
        try:
            while True:
                kind, payload = read_frame(read)
                if kind == Feed.HELD:
                    self.t_held = time.perf_counter()
                    self.held.set()
                    return
                if kind != Feed.WANT or len(payload) != RUN_REF.size:
                    raise MigrationError(f"the sandbox's feed sent a frame of kind {kind}")
                run = RUN_REF.unpack(payload)
                self._asked.append(run)
                self._send(m.Fault(runs=[run]))  # after a cut: asked again by _rejoin
        except BaseException as exc:  # the sandbox is gone, or the channel
            if not self.held.is_set():
                self._inbox.put(
                    exc
                    if isinstance(exc, MigrationError)
                    else MigrationError(f"the restored sandbox stopped taking its pages: {exc}")
                )

    def _send(self, msg: m.Message) -> None:
        """``msg`` on the channel in use; committed, a broken one is the relay's to
        mend, not an error."""
        try:
            self.ch.send(msg)
        except (MigrationError, OSError):
            if not self.committed:
                raise

    def send_last(self, make: Any, timeout: float) -> None:
        """The session's last message (``make(ch)``), on a channel a reconnect brings
        if the one in use broke (best effort within ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            ch = self.ch
            try:
                ch.send(make(ch))
                return
            except (MigrationError, OSError):
                with self._swapped:
                    while self.ch is ch and (left := deadline - time.monotonic()) > 0:
                        self._swapped.wait(left)
                if self.ch is ch:
                    return

    def next(self, timeout: float) -> m.Message:
        """The source's next message (not pages), sending keep-alive ``Fault``s while
        waiting; raises what broke the relay."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise MigrationError(f"the source sent nothing within {timeout:g} s")
            try:
                item = self._inbox.get(timeout=min(KEEPALIVE_S, left))
            except queue.Empty:
                self._send(m.Fault(runs=[]))  # no page wanted: still here
                continue
            if isinstance(item, BaseException):
                raise item
            return item  # type: ignore[no-any-return]

    def wait_held(self, timeout: float) -> None:
        """Until the sandbox holds every page, sending keep-alive ``Fault``s."""
        deadline = time.monotonic() + timeout
        while not self.held.wait(KEEPALIVE_S):
            if time.monotonic() > deadline:
                raise MigrationError(f"the sandbox did not get its pages within {timeout:g} s")
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                item = None
            if isinstance(item, BaseException):
                raise item
            self._send(m.Fault(runs=[]))

    def _lost(self, exc: BaseException) -> None:
        """Tell the sandbox its source is gone (it stops and says what it lacks)."""
        from ckpt.images.pagefeed import Feed, frame

        feed = self._feed
        if feed is None and self._listener is not None:  # a restore waiting to connect
            with contextlib.suppress(OSError):  # hears at once, not at its deadline
                self._listener.close()
        if feed is not None and not self.held.is_set():
            with contextlib.suppress(OSError):
                feed.sendall(frame(Feed.LOST, str(exc).encode()[:200]))

    def close(self) -> None:
        self.stop.set()
        self._next.put(None)  # a relay waiting for a reconnect: no more
        for sock in (self._feed, self._listener):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
        if self.ch is not self._first:  # a reconnect's (the session closes its own)
            with contextlib.suppress(OSError, MigrationError):
                self.ch.close()
        while True:  # channels of a reconnect nobody took
            try:
                ch = self._next.get_nowait()
            except queue.Empty:
                break
            if ch is not None:
                with contextlib.suppress(OSError, MigrationError):
                    ch.close()
        with contextlib.suppress(OSError):
            self.path.unlink()
        if self._short is not None:
            shutil.rmtree(self._short, ignore_errors=True)
