"""The channel as a page sink (``pagechannel.ChannelSink``): what a sandbox streams goes
on as the messages the destination reads, stored runs byte for byte (never
decompressed or compressed again here), zero runs as zero pages in bounded frames,
and an image that is not what it says is refused before its ``RoundEnd`` goes."""

from __future__ import annotations

import hashlib

import pytest

from ckpt.images.pagexfer import ZERO, PageRun, StreamEnd
from ckpt.migration import messages as m
from ckpt.migration.errors import MigrationError
from ckpt.migration.pagechannel import ChannelSink
from ckpt.statefile.format import PAGE_SIZE


class Recorder:
    """A channel that keeps what is sent."""

    def __init__(self) -> None:
        self.sent: list[m.Message] = []

    def send(self, msg: m.Message) -> None:
        self.sent.append(msg)


def _end(pages: int, state: int = 0, **meta: object) -> StreamEnd:
    return StreamEnd("ab" * 16, dict(meta), pages, state)


def test_a_stored_run_goes_on_as_it_came() -> None:
    ch = Recorder()
    sink = ChannelSink(ch, 2, final=False)
    sink(PageRun(10, 3, 1, b"not even zstd: passed on untouched"))
    sink(_end(3))
    runs, end = ch.sent
    assert runs == m.PageRuns(
        round=2, runs=[(10, 3)], codec=1, data=b"not even zstd: passed on untouched"
    )
    assert isinstance(end, m.RoundEnd) and (end.round, end.pages, end.final) == (2, 3, False)


def test_zero_runs_go_as_zero_pages_in_bounded_frames() -> None:
    ch = Recorder()
    sink = ChannelSink(ch, 0, final=False)
    n = 2 * m.MAX_BATCH_PAGES + 5
    sink(PageRun(7, n, ZERO, b""))
    frames = [msg for msg in ch.sent if isinstance(msg, m.PageRuns)]
    assert len(frames) == 3
    pages = [p for f in frames for p in m.unpack_pages(f)]
    assert [i for i, _ in pages] == list(range(7, 7 + n))
    assert all(p == bytes(PAGE_SIZE) for _, p in pages)
    assert sink.pages == n


def test_the_final_image_sends_its_state_hashed_and_kept_metadata() -> None:
    ch = Recorder()
    sha = hashlib.sha256()
    sink = ChannelSink(ch, 4, final=True, state_hash=sha)
    sink(b"kernel-")
    sink(b"state")
    sink(PageRun(0, 1, 0, b"x" * PAGE_SIZE))
    sink(_end(1, 12, workload="kv:1", engine="native", secret="not sent"))
    chunks = [msg for msg in ch.sent if isinstance(msg, m.StateChunk)]
    assert [(c.offset, c.data) for c in chunks] == [(0, b"kernel-"), (7, b"state")]
    assert sha.digest() == hashlib.sha256(b"kernel-state").digest()
    end = ch.sent[-1]
    assert isinstance(end, m.RoundEnd) and end.final and end.state_bytes == 12
    assert end.metadata["workload"] == "kv:1" and "secret" not in end.metadata


@pytest.mark.parametrize(
    ("final", "events"),
    [
        (False, [b"state inside a round"]),
        (True, [PageRun(0, 1, 0, b"x" * PAGE_SIZE), _end(1)]),  # a final image without state
        (False, [PageRun(0, 1, 0, b"x" * PAGE_SIZE), _end(2)]),  # an end that counts otherwise
    ],
)
def test_an_image_not_as_it_says_is_refused_before_its_end(final: bool, events: list) -> None:
    ch = Recorder()
    sink = ChannelSink(ch, 0, final=final)
    with pytest.raises(MigrationError):
        for e in events:
            sink(e)
    assert not any(isinstance(msg, m.RoundEnd) for msg in ch.sent)
