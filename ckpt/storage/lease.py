"""Leases: how an upload and a prune of the same repository keep out of each other's way.

An upload may reuse a chunk that no manifest references yet (it found it present and
did not upload it again); a prune running at that moment would remove it, and the
upload's manifest would then name a missing chunk.  So they exclude each other, each
the same way:

1. write its own lease object ``.leases/KIND-RANDOM`` (a plain PUT), then
2. list ``.leases/`` and back off if a live lease of the other kind is there.

Each writes before it reads, and S3 (AWS since 2020, SeaweedFS through its filer) lists
what was written before the list began, so of two that overlap at least one sees the
other (Dekker's argument); if both do, both back off and neither acts.

A lease is live while the store's own clock says it was written less than ``ttl`` ago:
ages are measured from the ``modified`` time of the objects against that of the lease
just written, never against a host clock.  Holders re-write their lease every ttl/4
from a thread; an upload refuses to write its manifest if its last renewal is older
than ttl/2 by its own monotonic clock, so an upload stalled long enough for a prune to
treat its lease as dead never publishes.  A prune removes leases dead for ``ttl``
(left by killed processes).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time

from ckpt.storage.errors import StoreBusy
from ckpt.storage.store import Store

PREFIX = ".leases/"
DEFAULT_TTL = 600.0  # s; a renewal every 150 s, comfortably inside one request's deadline
UPLOAD = "upload"
PRUNE = "prune"


class Lease:
    """One holder's lease; :meth:`acquire` takes it or raises StoreBusy."""

    def __init__(self, store: Store, kind: str, ttl: float = DEFAULT_TTL) -> None:
        self.store = store
        self.kind = kind
        self.ttl = ttl
        self.key = f"{PREFIX}{kind}-{secrets.token_hex(8)}"
        self.renewed = 0.0  # time.monotonic() of the last successful write
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _write(self) -> float:
        """Write the lease; return its modified time by the store's clock."""
        body = {"kind": self.kind, "host": socket.gethostname(), "pid": os.getpid()}
        self.store.put(self.key, json.dumps(body).encode())
        self.renewed = time.monotonic()
        info = self.store.head(self.key)
        return info.modified if info is not None else time.time()

    def acquire(self, excludes: str, *, remove_dead: bool = False) -> int:
        """Write the lease, then refuse (removing it again) if a live lease of kind
        ``excludes`` exists.  With ``remove_dead``, leases dead for ttl are removed;
        returns how many."""
        now = self._write()
        removed = 0
        try:
            for info in self.store.list(PREFIX):
                if info.key == self.key:
                    continue
                kind = info.key[len(PREFIX) :].split("-", 1)[0]
                age = now - info.modified
                if age > self.ttl:
                    if remove_dead:
                        self.store.delete(info.key)
                        removed += 1
                    continue
                if kind == excludes:
                    raise StoreBusy(
                        f"{self.store.url}: a {kind} is in progress ({info.key}, renewed"
                        f" {max(age, 0):.0f} s ago); retry when it ends, or after"
                        f" {self.ttl - age:.0f} s if its process is gone"
                    )
        except BaseException:
            self.store.delete(self.key)
            raise
        self._thread = threading.Thread(target=self._renew_loop, name="ckpt-lease", daemon=True)
        self._thread.start()
        return removed

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            try:
                self._write()
            except BaseException as exc:  # reported by check_held
                self.error = exc

    def check_held(self, *, ask_store: bool = True) -> None:
        """Raise StoreBusy unless the lease was renewed within ttl/2 and (``ask_store``)
        is still in the store (a prune removes leases it found dead)."""
        stale = time.monotonic() - self.renewed
        if stale > self.ttl / 2 or (ask_store and self.store.head(self.key) is None):
            why = f" ({self.error})" if self.error else ""
            raise StoreBusy(
                f"{self.store.url}: this {self.kind} lost its lease (not renewed for"
                f" {stale:.0f} s{why}); run it again"
            )

    def release(self) -> None:
        """Stop renewing and remove the lease."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=min(self.ttl, 120.0))
        self.store.delete(self.key)
