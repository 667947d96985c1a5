"""The channel's typed messages: one msgspec struct per kind, the kind in the frame header.

A frame's kind byte names the struct its payload decodes to, so a payload is decoded
into exactly one type and never dispatched on a string inside it.  Kinds are numbered
with gaps by family (handshake 1-15, data 16-31, control 32-47) so that the messages
``serve`` and ``migrate`` will need (round markers, restored, resume) slot in without
renumbering; an unknown kind is refused before its payload is read.

Page runs travel compressed: ``pack_pages`` merges ascending page indices into runs
``(first, count)`` and compresses their bytes together; ``unpack_pages`` checks the runs
and the declared size against the frame's limit before anything is decompressed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import ClassVar

import msgspec

from ckpt.migration.errors import FrameError
from ckpt.statefile.chunks import compress_chunk, decompress_chunk
from ckpt.statefile.format import CODEC_NONE, CODEC_ZSTD, MAX_PAGES, PAGE_SIZE

PROTOCOL_VERSION = 6  # 2: Offer.nonce and Restored.proof (proof.py); 3: Connections;
# 4: post-copy (Offer.post_copy, PageMap, Fault); 5: Hello.encrypt (sealed.py);
# 6: Resume (reconnect.py)
MAX_TEXT = 1024  # an error message or a software name: one line, bounded
MAX_BATCH_PAGES = 1024  # 4 MiB of raw pages in one frame
MAX_PROOF = 64  # bytes of a nonce or a proof (proof.py uses 32)
MAX_MAP_RUNS = 32768  # runs of one PageMap message
MAX_FAULT_RUNS = 64  # runs of one Fault message


class Kind(enum.IntEnum):
    """The frame kind byte."""

    HELLO = 1
    PAGE_RUNS = 16
    STATE_CHUNK = 17
    ROUND_END = 18
    CONNECTIONS = 19
    PAGE_MAP = 20
    ACK = 32
    ERROR = 33
    DONE = 34
    OFFER = 35
    RESTORED = 36
    FAULT = 37
    RESUME = 38


class ErrorCode(enum.IntEnum):
    """Why the peer gave up, so the other side can act on it without matching text."""

    INTERNAL = 0
    PROTOCOL = 1
    EXISTS = 2  # the sandbox ID already exists on the destination
    NO_SPACE = 3
    RESTORE_FAILED = 4
    CANCELLED = 5
    REFUSED = 6  # the offer is not acceptable (bad ID, limits)
    BUSY = 7  # the destination is receiving another migration


class Message(msgspec.Struct, array_like=True, forbid_unknown_fields=True, frozen=True):
    """Base of every message; ``KIND`` is the frame kind it travels as."""

    KIND: ClassVar[Kind]


class Hello(Message):
    """The first authenticated frame each side sends: proves the key, states limits.
    ``encrypt``: the source asks for sealed frames, the destination accepts only
    those (``--encrypt``, ``sealed.py``)."""

    KIND: ClassVar[Kind] = Kind.HELLO
    protocol: int
    software: str
    max_payload: int
    encrypt: bool = False


class PageRuns(Message):
    """A batch of memory pages: runs of consecutive indices, their bytes compressed together."""

    KIND: ClassVar[Kind] = Kind.PAGE_RUNS
    round: int
    runs: list[tuple[int, int]]
    codec: int
    data: bytes


class StateChunk(Message):
    """A piece of the kernel-state stream; ``offset`` lets the receiver check continuity."""

    KIND: ClassVar[Kind] = Kind.STATE_CHUNK
    offset: int
    data: bytes
    last: bool = False


class Ack(Message):
    """The receiver has applied everything up to the sender's frame ``seq``."""

    KIND: ClassVar[Kind] = Kind.ACK
    seq: int


class Error(Message):
    """The sender gives up; the receiver raises ``PeerError(code, message)``."""

    KIND: ClassVar[Kind] = Kind.ERROR
    code: int
    message: str


class Done(Message):
    """The sender's stream ends here, after ``frames`` frames: an orderly end, not a cut."""

    KIND: ClassVar[Kind] = Kind.DONE
    frames: int


class Offer(Message):
    """The source's first message of a migration: which sandbox, and what restoring it needs.

    ``pages`` bounds every page index the source will send (the kernel's address space
    in pages); ``port`` is where the destination binds (None: the port it had);
    ``nonce`` is what the destination's proof in ``Restored`` is keyed by (proof.py);
    ``ip``/``prefix``/``mac``: the sandbox's own address, which the destination gives
    it again (``ckpt.sandbox.wire.netns``) on its ``--bridge``, else on a bridge named
    as the source's ``bridge``."""

    KIND: ClassVar[Kind] = Kind.OFFER
    sandbox_id: str
    workload: str
    engine: str
    pages: int
    cpus: float | None = None
    port: int | None = None
    nonce: bytes = b""
    ip: str | None = None
    prefix: int | None = None
    mac: str | None = None
    bridge: str | None = None
    post_copy: bool = False


class RoundEnd(Message):
    """The end of one image: ``final`` carries the kernel state (sent before it as
    ``StateChunk``s) and the metadata restoring it needs."""

    KIND: ClassVar[Kind] = Kind.ROUND_END
    round: int
    pages: int
    final: bool = False
    state_bytes: int = 0
    metadata: dict[str, str | int | None] = {}


class Connections(Message):
    """After the final image of a sandbox with its own address: its established
    connections' states (``sandbox.tcprepair.encode``), read in repair mode."""

    KIND: ClassVar[Kind] = Kind.CONNECTIONS
    data: bytes


class PageMap(Message):
    """Post-copy, after the final image: runs ``(first, count)`` of the pages it left
    out, which come after as ``PageRuns`` of round ``final + 1`` in any order while the
    destination runs; ``last``: the map is whole.  An empty whole map: none are left."""

    KIND: ClassVar[Kind] = Kind.PAGE_MAP
    runs: list[tuple[int, int]]
    last: bool = True


class Fault(Message):
    """Post-copy: the destination read these pages before they came: send them first."""

    KIND: ClassVar[Kind] = Kind.FAULT
    runs: list[tuple[int, int]]


class Resume(Message):
    """Post-copy, committed, the link was cut: the source's first message on a new
    connection, instead of an ``Offer``.  ``nonce`` is the offer's: the destination
    answers with the ``PageMap`` of the pages it still lacks, or an ``Error``."""

    KIND: ClassVar[Kind] = Kind.RESUME
    sandbox_id: str
    nonce: bytes


class Restored(Message):
    """The destination runs the sandbox; it keeps it only once the source says ``Done``.
    ``proof`` shows it restored this migration's state (proof.py); without it the source
    keeps its copy."""

    KIND: ClassVar[Kind] = Kind.RESTORED
    address: str | None
    restore_ms: float
    proof: bytes = b""


MESSAGE_TYPES: dict[int, type[Message]] = {
    t.KIND: t
    for t in (
        Hello,
        PageRuns,
        StateChunk,
        RoundEnd,
        Connections,
        PageMap,
        Ack,
        Error,
        Done,
        Offer,
        Restored,
        Fault,
        Resume,
    )
}
_ENCODER = msgspec.msgpack.Encoder()
_DECODERS = {kind: msgspec.msgpack.Decoder(t) for kind, t in MESSAGE_TYPES.items()}


def encode(msg: Message) -> bytes:
    """The payload bytes of ``msg`` (its kind goes in the frame header)."""
    return _ENCODER.encode(msg)


def decode(kind: int, payload: bytes | memoryview) -> Message:
    """Decode an authenticated payload as ``kind``'s struct and check its values."""
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise FrameError(f"the peer sent a frame of unknown kind {kind}")
    try:
        msg = decoder.decode(payload)
    except msgspec.MsgspecError as exc:
        raise FrameError(f"the peer sent a malformed {Kind(kind).name} frame: {exc}") from exc
    _check(msg)
    return msg


def _check(msg: Message) -> None:
    if isinstance(msg, Hello | Error):
        text = msg.software if isinstance(msg, Hello) else msg.message
        if len(text) > MAX_TEXT or "\n" in text:
            raise FrameError(
                f"the peer sent a {msg.KIND.name} with an over-long or multi-line text"
            )
    if isinstance(msg, Offer | RoundEnd | Restored):
        texts = [v for v in msg.__struct_fields__ if isinstance(getattr(msg, v), str)]
        values = [getattr(msg, v) for v in texts]
        if isinstance(msg, RoundEnd):
            if len(msg.metadata) > 16:
                raise FrameError("the peer sent a ROUND_END with too much metadata")
            values += [k for k in msg.metadata] + [
                v for v in msg.metadata.values() if isinstance(v, str)
            ]
        if any(len(t) > MAX_TEXT or "\n" in t for t in values):
            raise FrameError(
                f"the peer sent a {msg.KIND.name} with an over-long or multi-line text"
            )
    if isinstance(msg, Resume) and (len(msg.sandbox_id) > MAX_TEXT or "\n" in msg.sandbox_id):
        raise FrameError("the peer sent a RESUME with an over-long or multi-line ID")
    if isinstance(msg, Offer | Restored | Resume):
        given = msg.proof if isinstance(msg, Restored) else msg.nonce
        if len(given) > MAX_PROOF:
            raise FrameError(f"the peer sent a {msg.KIND.name} with an over-long nonce or proof")
    if isinstance(msg, PageMap | Fault):
        bound = MAX_MAP_RUNS if isinstance(msg, PageMap) else MAX_FAULT_RUNS
        if len(msg.runs) > bound:
            raise FrameError(f"the peer sent a {msg.KIND.name} of over {bound} runs")
        end = 0
        for first, count in msg.runs:
            if count < 1 or first < end or first + count > MAX_PAGES:
                raise FrameError(f"the peer sent a {msg.KIND.name} with runs out of order")
            end = first + count if isinstance(msg, PageMap) else 0
    if isinstance(msg, PageRuns | StateChunk | Ack | Done | Hello | Offer | RoundEnd):
        for name in msg.__struct_fields__:
            value = getattr(msg, name)
            if type(value) is int and value < 0:
                raise FrameError(f"the peer sent a {msg.KIND.name} with a negative {name}")


def pack_pages(
    round_no: int, pages: Iterable[tuple[int, bytes]], *, codec: int = CODEC_ZSTD, level: int = 1
) -> PageRuns:
    """One ``PageRuns`` from ``(index, 4096 bytes)`` pairs in ascending index order."""
    runs: list[tuple[int, int]] = []
    raw = bytearray()
    last = -2
    for index, data in pages:
        if len(data) != PAGE_SIZE:
            raise ValueError(f"page {index} is {len(data)} bytes, not {PAGE_SIZE}")
        if index <= last:
            raise ValueError(f"page {index} comes after page {last}: indices must ascend")
        if index == last + 1:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((index, 1))
        raw += data
        last = index
    used, stored = compress_chunk(raw, codec, level)
    return PageRuns(round=round_no, runs=runs, codec=used, data=bytes(stored))


def unpack_pages(msg: PageRuns, max_pages: int = MAX_BATCH_PAGES) -> list[tuple[int, bytes]]:
    """The ``(index, bytes)`` pages of ``msg``, after checking runs and sizes against limits."""
    total = 0
    last_end = 0
    for first, count in msg.runs:
        if count < 1 or first < last_end:
            raise FrameError("the peer sent page runs that are empty, overlapping or unordered")
        total += count
        if total > max_pages:
            raise FrameError(f"the peer sent more than {max_pages} pages in one frame")
        last_end = first + count
    if msg.codec not in (CODEC_NONE, CODEC_ZSTD):
        raise FrameError(f"the peer sent pages with unknown codec {msg.codec}")
    raw_len = total * PAGE_SIZE
    try:
        raw = decompress_chunk(msg.data, msg.codec, raw_len, "page runs")
    except Exception as exc:  # StatefileError, or zstd's own
        raise FrameError(f"the peer sent pages that do not decompress: {exc}") from exc
    view = memoryview(raw)
    out = []
    offset = 0
    for first, count in msg.runs:
        for i in range(count):
            out.append((first + i, bytes(view[offset : offset + PAGE_SIZE])))
            offset += PAGE_SIZE
    return out
