"""The migration channel as a page sink: one image's ``pagexfer`` events, as the
sandbox streams them, go on to the destination as ``StateChunk``, ``PageRuns`` and
``RoundEnd`` messages, one at a time (memory stays one frame).

A stored run travels as it came from the sandbox, compressed once there: one run per
``PageRuns``, which the destination keeps as it is (``incoming._runs``).  A zero run
goes as zero pages, which compress to almost nothing, in frames of at most
``MAX_BATCH_PAGES``: the wire format has no zero runs of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ckpt.images.pagexfer import ZERO, PageRun, StreamEnd
from ckpt.migration import messages as m
from ckpt.migration.errors import MigrationError
from ckpt.statefile.pages import ZERO_PAGE

# The final image's metadata the destination keeps (incoming.KEPT_METADATA).
SENT_METADATA = ("workload", "engine", "address", "objects", "types")


class ChannelSink:
    """Forwards the events of image ``round_no`` to ``ch``; call it with each event.

    ``final``: the image carries the kernel state (fed to ``state_hash`` too, when
    given), and must have some.  ``at(step, sink)`` is called after each run forwarded
    and at the end (``"end"``), before the ``RoundEnd`` goes: the caller's progress
    hook."""

    def __init__(
        self,
        ch: Any,
        round_no: int,
        *,
        final: bool,
        state_hash: Any = None,
        at: Callable[[str, ChannelSink], None] | None = None,
    ) -> None:
        self.ch = ch
        self.round_no = round_no
        self.final = final
        self.state_hash = state_hash
        self.at = at
        self.pages = 0
        self.state_bytes = 0
        self.end: StreamEnd | None = None

    def __call__(self, event: Any) -> None:
        if isinstance(event, PageRun):
            self._run(event)
        elif isinstance(event, StreamEnd):
            self._end(event)
        else:
            self._state(event)

    def _state(self, data: bytes) -> None:
        if not self.final:
            raise MigrationError("the sandbox sent kernel state inside a pre-copy round")
        self.ch.send(m.StateChunk(offset=self.state_bytes, data=data))
        if self.state_hash is not None:
            self.state_hash.update(data)
        self.state_bytes += len(data)

    def _run(self, run: PageRun) -> None:
        first, npages = run.first, run.npages
        if run.codec == ZERO:
            for at in range(first, first + npages, m.MAX_BATCH_PAGES):
                n = min(m.MAX_BATCH_PAGES, first + npages - at)
                pages = ((i, ZERO_PAGE) for i in range(at, at + n))
                self.ch.send(m.pack_pages(self.round_no, pages))
        else:
            self.ch.send(
                m.PageRuns(
                    round=self.round_no, runs=[(first, npages)], codec=run.codec, data=run.data
                )
            )
        self.pages += npages
        if self.at is not None:
            self.at("run", self)

    def _end(self, end: StreamEnd) -> None:
        if end.pages != self.pages or end.state_bytes != self.state_bytes:
            raise MigrationError("the sandbox's image ended with other counts than it sent")
        if self.final and self.state_bytes == 0:
            raise MigrationError("the sandbox's final image has no kernel state")
        self.end = end
        if self.at is not None:
            self.at("end", self)
        meta = {k: end.metadata.get(k) for k in SENT_METADATA}
        self.ch.send(
            m.RoundEnd(
                round=self.round_no,
                pages=self.pages,
                final=self.final,
                state_bytes=self.state_bytes,
                metadata={k: v for k, v in meta.items() if isinstance(v, str | int) or v is None},
            )
        )
