"""Post-copy's page feed: the pages a restored sandbox runs without, brought to it
while it runs.

A post-copy migration restores the sandbox on the destination before its newest
pages have arrived: its image there holds the kernel state and the pre-copy rounds'
pages, and the frames the source dirtied after the last round (the *remote* frames)
are still only on the source.  The destination's server relays them to the sandbox
over a Unix socket, the *feed*, as frames of the ``pagexfer`` stream's shape
(``kind:u8 length:u32le payload``)::

    server -> sandbox   MAP     runs of remote frames, first:u64 count:u32 each
                        MAPPED  (empty) the map is whole: the sandbox resumes
                        RUN     as pagexfer's RUN: pages, pushed or asked for
                        END     (empty) the source sent every page
                        LOST    UTF-8 reason: the source is gone
    sandbox -> server   WANT    first:u64 count:u32: a page read before it arrived
                        HELD    (empty) every remote page is here

:class:`RemotePages` is the sandbox's end: a page reader for ``MemoryFile.restore_pages``
(ckpt/kernel/mm.py) that hands out a page once it has arrived and, for one read
before that, asks for it (``WANT``) and waits.  A page comes once: the source's
memory is frozen, so a page asked for and pushed as well is the same page.

A feed that ends before every page arrived (``LOST``, a closed socket, ``END`` with
pages missing) never hands out what it does not have: every waiting and later read
raises :class:`PagesLost`, which says how many pages never came, and ``on_error`` is
called once, so the host stops the sandbox rather than run with memory it lacks.

Stdlib and ``ckpt`` only, no ``typing`` at run time: the sandbox process imports this.
"""

from __future__ import annotations

import contextlib
import enum
import socket
import threading
import time

from ckpt.errors import StatefileError
from ckpt.images.pagexfer import FRAME, MAP_RUN, MAX_FRAME, ZERO, Frame, _run
from ckpt.statefile.chain import RunIndices
from ckpt.statefile.chunks import decompress_chunk
from ckpt.statefile.format import PAGE_SIZE
from ckpt.statefile.pages_map import ZERO_PAGE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any

RUN_REF = MAP_RUN  # first page, pages: a MAP entry or a WANT
MAP_RUNS_PER_FRAME = MAX_FRAME // RUN_REF.size
WANT_AHEAD = 4  # pages asked for with the one read: its neighbours are often next
WAIT_S = 120.0  # a read waits this long for its page before the feed counts as lost


class Feed(enum.IntEnum):
    """The feed's frame kinds (RUN is pagexfer's)."""

    RUN = Frame.RUN
    MAP = Frame.MAP
    MAPPED = 17
    END = 18
    LOST = 19
    WANT = 32
    HELD = 33
    HANG_UP = 34  # to a post-copy source: it runs there now; hang up its clients here
    AGAIN = 35  # to a post-copy source, first: send only these pages; an empty one ends


class PagesLost(StatefileError):
    """The feed ended before every remote page arrived."""


def frame(kind: int, payload: bytes = b"") -> bytes:
    """One feed frame."""
    return FRAME.pack(kind, len(payload)) + payload


def map_frames(runs: Iterable[tuple[int, int]], *, mapped: bool = True) -> Iterator[bytes]:
    """The MAP frames of ``runs`` (ascending, disjoint), then MAPPED (if ``mapped``)."""
    batch: list[bytes] = []
    for first, count in runs:
        batch.append(RUN_REF.pack(first, count))
        if len(batch) == MAP_RUNS_PER_FRAME:
            yield frame(Feed.MAP, b"".join(batch))
            batch = []
    if batch:
        yield frame(Feed.MAP, b"".join(batch))
    if mapped:
        yield frame(Feed.MAPPED)


def read_frame(recv_exact: Callable[[int], bytes]) -> tuple[int, bytes]:
    """One frame, its length checked before its payload is read."""
    kind, length = FRAME.unpack(recv_exact(FRAME.size))
    if length > MAX_FRAME:
        raise StatefileError(f"a page feed frame of {length} bytes (at most {MAX_FRAME})")
    return kind, recv_exact(length) if length else b""


def recv_exact(sock: socket.socket) -> Callable[[int], bytes]:
    """``n`` bytes from ``sock`` exactly, or ConnectionError at its end."""

    def read(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the page feed closed")
            buf += chunk
        return bytes(buf)

    return read


def read_map(read: Callable[[int], bytes], limit: int) -> list[tuple[int, int]]:
    """The MAP frames up to MAPPED: runs ascending, disjoint, inside ``[0, limit)``,
    at most ``limit`` pages in all (checked as they come)."""
    runs: list[tuple[int, int]] = []
    end = total = 0
    while True:
        kind, payload = read_frame(read)
        if kind == Feed.MAPPED:
            return runs
        if kind != Feed.MAP or len(payload) % RUN_REF.size:
            raise StatefileError(f"the page feed sent a frame of kind {kind} inside its map")
        for first, count in RUN_REF.iter_unpack(payload):
            total += count
            if count < 1 or first < end or first + count > limit or total > limit:
                raise StatefileError("the page feed's map has runs out of order or range")
            runs.append((first, count))
            end = first + count


class RemotePages:
    """The remote frames' pages as the feed brings them (see the module doc).

    Counters for the migration's report: ``faulted`` (pages read before they came,
    each asked for), ``arrived``, ``bytes`` (as they came, compressed), and
    ``last_arrival`` (``time.monotonic()`` of the last page)."""

    lazy = True

    def __init__(
        self,
        sock: socket.socket,
        runs: list[tuple[int, int]],
        *,
        on_error: Callable[[BaseException], None] | None = None,
        wait_s: float = WAIT_S,
    ) -> None:
        self.indices = RunIndices(runs)
        self._sock = sock
        self._on_error = on_error
        self._wait_s = wait_s
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._pages: dict[int, Any] = {}
        self._forgotten: set[int] = set()  # replaced whole before they came: not kept
        size = runs[-1][0] + runs[-1][1] if runs else 0
        self._state = bytearray(size)  # 0 not here, 1 asked for, 2 arrived
        self.missing = len(self.indices)
        self.error: BaseException | None = None
        self.faulted = self.arrived = self.bytes = 0
        self.last_arrival = time.monotonic()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Receive the feed in a thread, from now until every page is here."""
        self._thread = threading.Thread(target=self._receive, name="ckpt-feed", daemon=True)
        self._thread.start()

    # -- the reader's side (the kernel, under its lock) --------------------------------

    def read_page(self, index: int) -> bytes:
        return bytes(self.read_page_view(index))

    def read_page_view(self, index: int) -> Any:
        """Page ``index``, once here; asked for now if it has not come yet."""
        state = self._state
        with self._cond:
            if index >= len(state) or index not in self.indices:
                raise StatefileError(f"page {index} is not a remote page")
            if state[index] != 2:
                self._fault(index)
            page = self._pages.pop(index, ZERO_PAGE)
        return page

    def forget(self, index: int) -> None:
        """The kernel replaced page ``index`` whole without reading it: keep nothing of
        it (what has come is dropped, what comes is not kept); it still counts."""
        with self._cond:
            if index < len(self._state) and self._state[index] == 2:
                self._pages.pop(index, None)
            elif index < len(self._state):
                self._forgotten.add(index)

    def _fault(self, index: int) -> None:
        """Ask for ``index`` (and the pages after it in its run) and wait (lock held)."""
        state = self._state
        if state[index] == 0:
            end = min(self.indices.run_end(index), index + WANT_AHEAD)
            for i in range(index, end):
                if state[i] == 0:
                    state[i] = 1
            self.faulted += 1
            try:
                self._send(frame(Feed.WANT, RUN_REF.pack(index, end - index)))
            except OSError as exc:
                self._lose(f"the page feed failed: {exc}")
        deadline = time.monotonic() + self._wait_s
        while state[index] != 2:
            if self.error is not None:
                raise self.error
            left = deadline - time.monotonic()
            if left <= 0:
                self._lose(f"page {index} did not arrive within {self._wait_s:g} s")
                raise self.error  # type: ignore[misc]
            self._cond.wait(left)

    def _send(self, data: bytes) -> None:
        with self._send_lock:
            self._sock.sendall(data)

    # -- the feed's side ---------------------------------------------------------------

    def _receive(self) -> None:
        read = recv_exact(self._sock)
        try:
            while self.missing:
                kind, payload = read_frame(read)
                if kind == Feed.RUN:
                    self._arrive(_run(payload))
                elif kind == Feed.END:
                    self._lose("the source ended its pages")
                elif kind == Feed.LOST:
                    self._lose(payload.decode("utf-8", "replace")[:200])
                else:
                    raise StatefileError(f"the page feed sent a frame of kind {kind}")
            self._send(frame(Feed.HELD))
        except PagesLost:
            pass
        except (OSError, StatefileError) as exc:
            with contextlib.suppress(PagesLost):
                self._lose(str(exc) or type(exc).__name__)

    def _arrive(self, run: Any) -> None:
        first, npages = run.first, run.npages
        if run.codec == ZERO:
            pages = [ZERO_PAGE] * npages
        else:
            raw = decompress_chunk(run.data, run.codec, npages * PAGE_SIZE, "a fed page run")
            view = memoryview(bytes(raw))
            pages = [view[i * PAGE_SIZE : (i + 1) * PAGE_SIZE] for i in range(npages)]
        state, here = self._state, self.indices
        with self._cond:
            for i, page in enumerate(pages):
                index = first + i
                if index < len(state) and state[index] != 2 and index in here:
                    state[index] = 2
                    if page is not ZERO_PAGE and index not in self._forgotten:
                        self._pages[index] = page
                    self.missing -= 1
                    self.arrived += 1
            self.bytes += len(run.data)
            self.last_arrival = time.monotonic()
            self._cond.notify_all()

    def _lose(self, why: str) -> None:
        """The feed is over with pages missing: fail every read, tell the host once."""
        with self._cond:
            if self.error is not None:
                raise self.error
            self.error = PagesLost(
                f"the migration's source is gone ({why}): {self.missing} of "
                f"{len(self.indices)} pages never arrived"
            )
            self._cond.notify_all()
        if self._on_error is not None:
            self._on_error(self.error)
        raise self.error

    # -- what a page reader has --------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.missing == 0

    def wait(self, timeout: float | None = None) -> None:
        """Until every page is here (or the feed is lost: raises)."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self.missing or self.error, timeout):
                raise PagesLost(f"{self.missing} pages still missing after {timeout:g} s")
            if self.missing and self.error is not None:
                raise self.error

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def counters(self) -> dict[str, Any]:
        return {
            "postcopy_pages": len(self.indices),
            "postcopy_faulted": self.faulted,
            "postcopy_arrived": self.arrived,
            "postcopy_bytes": self.bytes,
        }


class WithRemote:
    """A restore's pages: the remote frames from the feed, every other from the image
    (its chain): what ``MemoryFile.restore_pages`` adopts for a post-copy restore."""

    lazy = True

    def __init__(self, remote: RemotePages, image_pages: Any) -> None:
        from ckpt.statefile.chain import union_indices

        self.remote = remote
        self.image_pages = image_pages
        self.summary = getattr(image_pages, "summary", None)
        self.indices = union_indices((remote, image_pages))

    def read_page(self, index: int) -> bytes:
        if index in self.remote.indices:
            return self.remote.read_page(index)
        return self.image_pages.read_page(index)  # type: ignore[no-any-return]

    def forget(self, index: int) -> None:
        if index in self.remote.indices:
            self.remote.forget(index)

    def read_page_view(self, index: int) -> Any:
        if index in self.remote.indices:
            return self.remote.read_page_view(index)
        view = getattr(self.image_pages, "read_page_view", self.image_pages.read_page)
        return view(index)

    @property
    def done(self) -> bool:
        return self.remote.done and bool(getattr(self.image_pages, "done", True))

    def wait(self) -> None:
        self.image_pages.wait()
        self.remote.wait()

    def close(self) -> None:
        self.image_pages.close()
        self.remote.close()


def attach(
    path: str, image_pages: Any, limit: int, on_error: Callable[[BaseException], None]
) -> WithRemote:
    """Connect to the feed at ``path`` (a socket itself, not a link), read its map
    (inside ``[0, limit)``, the kernel's address space) and start receiving: the
    restore's pages, the remote ones from the feed."""
    import os
    import stat

    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):  # lstat: a link is refused
            raise StatefileError(f"the page feed at {path} is not a socket")
    except OSError as exc:
        raise StatefileError(f"the page feed at {path} cannot be used: {exc}") from exc
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(WAIT_S)
        sock.connect(path)
        runs = read_map(recv_exact(sock), limit)
        sock.settimeout(None)
    except (OSError, StatefileError) as exc:
        sock.close()
        raise StatefileError(f"the page feed at {path} failed: {exc}") from exc
    remote = RemotePages(sock, runs, on_error=on_error)
    remote.start()
    return WithRemote(remote, image_pages)
