"""Write checkpoint.img: header, the object stream in sealed chunks, table, metadata, footer.

``StateStreamWriter`` is the binary file object handed to ``state.save``: it gathers
writes into ~1 MiB chunks, compresses and tags them on the pool, and writes each
chunk's bytes in order (one large write each), keeping only its small table entry.
Nothing is held beyond the chunks in flight, so the stream is never in memory twice.
See ``format.py`` for the layout.
"""

from __future__ import annotations

import io
import json
from typing import Any, BinaryIO

from ckpt.errors import StatefileError
from ckpt.statefile.chunks import Ordered, compress_chunk
from ckpt.statefile.format import (
    CHUNK_FRAME,
    END_MAGIC,
    FLAG_ENCRYPTED,
    FLAG_KEYED,
    FOOTER,
    FORMAT_VERSION,
    HEADER,
    MAGIC,
    MAX_METADATA_LEN,
    META_LEN,
)
from ckpt.statefile.integrity import Sealer
from ckpt.statefile.seal import PURPOSE_CHUNKS, PURPOSE_METADATA, chunk_fields


def write_header(
    f: BinaryIO, sealer: Sealer, codec: int, chunk_size: int, image_id: bytes
) -> bytes:
    """Write the fixed header and its tag; return the tag (the start of the chain).
    An encrypted image's clear ``ENC_HEADER`` follows the header, under the same tag."""
    flags = FLAG_KEYED if sealer.keyed else 0
    if sealer.cipher is not None:
        flags |= FLAG_ENCRYPTED
    header = HEADER.pack(MAGIC, FORMAT_VERSION, flags, codec, chunk_size, 0, 0, image_id)
    if sealer.cipher is not None:
        header += sealer.cipher.header()
    tag = sealer.mac((header,))
    f.write(header + tag)
    return tag


def _seal_chunk(
    sealer: Sealer, index: int, raw: bytes | bytearray | memoryview, codec: int, level: int
) -> tuple[bytes, Any, bytes, int]:
    """Pool job: compress one chunk, seal it (encrypted images), compute its digest."""
    used, stored = compress_chunk(raw, codec, level)
    if sealer.cipher is not None:
        fields = chunk_fields(len(raw), used, len(stored))
        stored = sealer.cipher.seal(PURPOSE_CHUNKS, index, fields, stored)
    frame = CHUNK_FRAME.pack(len(raw), len(stored), used)
    return frame, stored, sealer.digest(index, frame, stored), len(raw)


class StateStreamWriter(io.BufferedIOBase):
    """The writable binary file ``state.save`` streams into (``img.state_file``)."""

    def __init__(
        self,
        f: BinaryIO,
        sealer: Sealer,
        header_tag: bytes,
        codec: int,
        level: int,
        chunk_size: int,
    ) -> None:
        super().__init__()
        self._f = f
        self._sealer = sealer
        self._tag = header_tag
        self._codec = codec
        self._level = level
        self._chunk_size = chunk_size
        self._buf = bytearray()
        self._ordered = Ordered()
        self._finished = False
        self._table: list[bytes] = []
        self.chunk_count = 0  # chunks submitted
        self.stream_len = 0  # raw bytes accepted
        self.stored_len = 0  # chunk bytes written to the file

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.stream_len

    def write(self, b: Any) -> int:  # type: ignore[override]
        if self._finished:
            raise StatefileError("the image's state stream is already finished")
        mv = memoryview(b).cast("B")
        # Whole chunks of an immutable buffer (state.save writes one bytes object) are
        # compressed straight from it; anything the caller could change is copied.
        immutable = isinstance(b, bytes) or (
            isinstance(b, memoryview) and b.readonly and isinstance(b.obj, bytes)
        )
        n = len(mv)
        pos = 0
        cs = self._chunk_size
        if self._buf:
            take = min(cs - len(self._buf), n)
            self._buf += mv[:take]
            pos = take
            if len(self._buf) == cs:
                full, self._buf = self._buf, bytearray()  # hand it over, no copy
                self._submit(full)
        while n - pos >= cs:
            piece = mv[pos : pos + cs]
            self._submit(piece if immutable else bytes(piece))
            pos += cs
        if pos < n:
            self._buf += mv[pos:]
        self.stream_len += n
        return n

    def flush(self) -> None:
        """Chunks are cut by size, not by flushes: a flush writes nothing early."""

    def _submit(self, raw: bytes | bytearray | memoryview) -> None:
        index = self.chunk_count
        self.chunk_count += 1
        for done in self._ordered.submit(
            _seal_chunk, self._sealer, index, raw, self._codec, self._level
        ):
            self._emit(done)

    def _emit(self, done: tuple[bytes, Any, bytes, int]) -> None:
        frame, stored, digest, _ = done
        self._tag = self._sealer.chain(self._tag, digest)
        self._f.write(stored)
        self._table.append(frame + self._tag)
        self.stored_len += len(stored)

    @property
    def table(self) -> bytes:
        """The chunk table: one frame and tag per chunk written so far."""
        return b"".join(self._table)

    def finish(self) -> bytes:
        """Write the last partial chunk and every queued one; return the last tag."""
        if not self._finished:
            self._finished = True
            last = None
            if self._buf:
                # The last chunk is sealed on this thread, beside the pool's queued
                # ones: it would only wait for them otherwise, and a stream of one
                # chunk (most kernels' state) then costs no thread handoff at all.
                full, self._buf = self._buf, bytearray()
                last = _seal_chunk(self._sealer, self.chunk_count, full, self._codec, self._level)
                self.chunk_count += 1
            for done in self._ordered.drain():
                self._emit(done)
            if last is not None:
                self._emit(last)
        return self._tag

    def abort(self) -> None:
        """Drop queued chunks (the image is being thrown away)."""
        self._finished = True
        self._ordered.cancel()

    def close(self) -> None:
        # state.save may close its file; the image is finished by ImageWriter, not here.
        super().close()


def encode_metadata(metadata: dict[str, Any]) -> bytes:
    """Metadata as compact, sorted JSON; a non-JSON value is a clear error."""
    try:
        data = json.dumps(metadata, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StatefileError(f"image metadata is not JSON-able: {exc}") from exc
    out = data.encode()
    if len(out) > MAX_METADATA_LEN:
        raise StatefileError(f"image metadata is {len(out)} bytes; the limit is {MAX_METADATA_LEN}")
    return out


def write_trailer(
    f: BinaryIO,
    sealer: Sealer,
    header_tag: bytes,
    last_tag: bytes,
    table_offset: int,
    table: bytes,
    chunk_count: int,
    stream_len: int,
    metadata_json: bytes,
) -> None:
    """Write the chunk table, the metadata block and the footer that closes the chain.
    An encrypted image's metadata is stored sealed."""
    if sealer.cipher is not None:
        metadata_json = sealer.cipher.seal(PURPOSE_METADATA, 0, b"", metadata_json)
    mlen = META_LEN.pack(len(metadata_json))
    meta_tag = sealer.mac((header_tag, b"meta", mlen, metadata_json))
    metadata_offset = table_offset + len(table)
    footer = FOOTER.pack(table_offset, metadata_offset, chunk_count, stream_len)
    footer_tag = sealer.mac((last_tag, meta_tag, footer))
    f.write(b"".join((table, mlen, metadata_json, meta_tag, footer, footer_tag, END_MAGIC)))
