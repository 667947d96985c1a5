"""Read checkpoint.img: check the header, metadata and footer, then stream verified chunks.

Every length read from the file is checked against the file's size before anything is
allocated, and every error names the file and the offset.  Tags are checked before the
bytes they cover are parsed or handed out: the header, metadata and footer (which closes
the chain with the last chunk's tag, authenticating the chunk count and stream length)
on open, and each chunk on a pool thread before it is decompressed or handed out.
``StatefileReader(..., verify=False)`` skips the tag checks (structure and lengths are
still checked); only ``open_image_unverified`` uses it.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckpt.errors import IntegrityError, StatefileError
from ckpt.statefile.chunks import decompress_chunk, map_ordered
from ckpt.statefile.files import open_regular
from ckpt.statefile.format import (
    CHUNK_FRAME,
    CODEC_NAMES,
    CODEC_NONE,
    END_MAGIC,
    FLAG_ENCRYPTED,
    FLAG_KEYED,
    FOOTER,
    FORMAT_VERSION,
    HEADER,
    KNOWN_FLAGS,
    MAGIC,
    MAX_CHUNK_SIZE,
    MAX_METADATA_LEN,
    META_LEN,
    footer_size,
    tag_size,
)
from ckpt.statefile.integrity import Sealer
from ckpt.statefile.seal import (
    AEAD_TAG_SIZE,
    ENC_HEADER,
    PURPOSE_CHUNKS,
    PURPOSE_METADATA,
    EncryptedImageError,
    chunk_fields,
    cipher_for,
    header_key_id,
)

MAX_METADATA_DEPTH = 64  # an image's own metadata nests 3 deep; printing recurses


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in decoded JSON (iteratively: no recursion)."""
    deepest = 0
    todo = [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d)
        if d <= MAX_METADATA_DEPTH:
            todo.extend((item, d + 1) for item in v)
    return deepest


@dataclass(frozen=True)
class Header:
    """What the fixed header and footer of a statefile say."""

    version: int
    keyed: bool
    compression: str
    chunk_size: int
    image_id: bytes
    chunk_count: int
    stream_len: int
    metadata_offset: int
    file_size: int
    table_offset: int
    encrypted: bool = False
    key_id: str = ""  # an encrypted image's key fingerprint (hex)


def read_exact(f: Any, n: int, path: Path, offset: int, what: str) -> bytes:
    """Read exactly ``n`` bytes at the current position or raise a truncation error."""
    data = f.read(n)
    if len(data) != n:
        raise IntegrityError(
            f"{path}: truncated at offset {offset + len(data)}: {what} needs {n} bytes, "
            f"{len(data)} left"
        )
    return data


@dataclass(frozen=True)
class _Frame:
    """One chunk table entry, with where the chunk's bytes are."""

    index: int
    offset: int  # file offset of the stored bytes
    frame: bytes  # the packed table entry fields (covered by the tag)
    raw_len: int
    stored_len: int
    codec: int
    prev_tag: bytes
    tag: bytes
    raw_off: int  # offset in the stream


class StatefileReader:
    """An opened checkpoint.img whose header, metadata and footer have been checked."""

    def __init__(self, path: Path, key: bytes | None, *, verify: bool = True) -> None:
        self.path = Path(path)
        self.verify = verify
        with self._file() as f:
            try:
                self._open(f, key)
            except OSError as exc:  # EIO and kin: a file that is there but cannot be read
                raise StatefileError(f"{self.path}: cannot read: {exc.strerror}") from exc

    def _file(self, buffering: int = -1) -> Any:
        """The statefile, opened as a regular file (never a link, FIFO or device)."""
        return open(open_regular(self.path, "the statefile"), "rb", buffering=buffering)

    def _open(self, f: Any, key: bytes | None) -> None:
        p = self.path
        size = os.fstat(f.fileno()).st_size
        raw = f.read(HEADER.size)
        if len(raw) < len(MAGIC) or raw[: len(MAGIC)] != MAGIC:
            raise StatefileError(f"{p}: not a ckpt statefile (bad magic at offset 0)")
        if len(raw) < HEADER.size:
            raise IntegrityError(f"{p}: truncated at offset {len(raw)}: header is incomplete")
        _, version, flags, codec, chunk_size, _r1, _r2, image_id = HEADER.unpack(raw)
        if version != FORMAT_VERSION:
            raise StatefileError(
                f"{p}: statefile format version {version}; this ckpt reads version {FORMAT_VERSION}"
            )
        if flags & ~KNOWN_FLAGS:
            raise StatefileError(f"{p}: unknown header flags {flags:#x} at offset 10")
        if codec not in CODEC_NAMES:
            raise StatefileError(f"{p}: unknown compression id {codec} at offset 11")
        if not 0 < chunk_size <= MAX_CHUNK_SIZE:
            raise StatefileError(f"{p}: chunk size {chunk_size} at offset 12 is out of range")
        keyed = bool(flags & FLAG_KEYED)
        encrypted = bool(flags & FLAG_ENCRYPTED)
        if encrypted and not keyed:
            raise StatefileError(f"{p}: header flags {flags:#x} at offset 10 are inconsistent")
        ext = (
            read_exact(f, ENC_HEADER.size, p, HEADER.size, "encryption header")
            if encrypted
            else b""
        )
        # Before any tag: a missing or wrong key is named as such, in one line.
        cipher = cipher_for(key, ext, image_id, str(p), verify=self.verify) if encrypted else None
        self.key_id = header_key_id(ext) if encrypted else ""
        if self.verify:
            if keyed and key is None:
                raise IntegrityError(
                    f"{p}: the image is signed (HMAC-SHA256); pass the key (--key-file)"
                )
            if not keyed and key is not None:
                raise IntegrityError(
                    f"{p}: a key was given but the image is not signed; refusing it "
                    "(its signature may have been stripped)"
                )
        self.sealer = Sealer(key if keyed and self.verify else None)
        self.sealer.cipher = cipher
        tsize = tag_size(flags)
        hdr_tag = read_exact(f, tsize, p, HEADER.size + len(ext), "header tag")
        self._check(self.sealer.mac((raw + ext,)), hdr_tag, f"{p}: header (offset 0)")
        self.header_tag = hdr_tag
        self.data_offset = HEADER.size + len(ext) + tsize
        fsize = footer_size(flags)
        min_size = self.data_offset + META_LEN.size + tsize + fsize
        if size < min_size:
            raise IntegrityError(
                f"{p}: truncated: {size} bytes, a statefile needs at least {min_size}"
            )

        # Footer: fixed size at the very end.
        foot_at = size - fsize
        f.seek(foot_at)
        foot = read_exact(f, fsize, p, foot_at, "footer")
        if foot[-len(END_MAGIC) :] != END_MAGIC:
            raise IntegrityError(
                f"{p}: no end marker at offset {size - len(END_MAGIC)} (truncated or corrupt)"
            )
        table_offset, metadata_offset, chunk_count, stream_len = FOOTER.unpack_from(foot)
        self.footer_fields = foot[: FOOTER.size]
        self.footer_tag = foot[FOOTER.size : FOOTER.size + tsize]
        entry = CHUNK_FRAME.size + tsize
        max_meta_at = foot_at - META_LEN.size - tsize
        if (
            not self.data_offset <= table_offset <= metadata_offset <= max_meta_at
            or chunk_count != (metadata_offset - table_offset) // entry
            or (metadata_offset - table_offset) % entry
            or chunk_count > table_offset - self.data_offset
        ):
            raise IntegrityError(
                f"{p}: footer at offset {foot_at} is inconsistent (table at {table_offset}, "
                f"metadata at {metadata_offset}, {chunk_count} chunks, file {size} bytes)"
            )
        if stream_len > chunk_count * chunk_size:
            raise IntegrityError(
                f"{p}: footer at offset {foot_at} claims {stream_len} stream bytes, more "
                f"than {chunk_count} chunks hold"
            )

        # Metadata: exactly fills the space between metadata_offset and the footer.
        f.seek(metadata_offset)
        mlen_raw = read_exact(f, META_LEN.size, p, metadata_offset, "metadata length")
        (meta_len,) = META_LEN.unpack(mlen_raw)
        expect = foot_at - metadata_offset - META_LEN.size - tsize
        if meta_len != expect or meta_len > MAX_METADATA_LEN:
            raise IntegrityError(
                f"{p}: metadata length {meta_len} at offset {metadata_offset} does not fit "
                f"the file (expected {expect})"
            )
        meta_json = read_exact(f, meta_len, p, metadata_offset + 4, "metadata")
        meta_tag = read_exact(f, tsize, p, metadata_offset + 4 + meta_len, "metadata tag")
        self._check(
            self.sealer.mac((hdr_tag, b"meta", mlen_raw, meta_json)),
            meta_tag,
            f"{p}: metadata (offset {metadata_offset})",
        )
        self.meta_tag = meta_tag
        self.tag_size = tsize

        # Chunk table: its size was checked against the file above.
        f.seek(table_offset)
        table = read_exact(f, metadata_offset - table_offset, p, table_offset, "chunk table")
        # The footer closes the chain with the last chunk's tag; checking it now
        # authenticates chunk_count and stream_len before anything is sized from them.
        # (Each chunk's own tag is checked against the chain when the chunk is read.)
        last_tag = table[-tsize:] if chunk_count else hdr_tag
        footer_tag = self.sealer.mac((last_tag, meta_tag, self.footer_fields))
        self._check(footer_tag, self.footer_tag, f"{p}: footer (offset {foot_at})")
        self.chunks_table = self._parse_table(
            table, table_offset, chunk_count, chunk_size, stream_len
        )
        if cipher is not None:
            meta_json = cipher.open(
                PURPOSE_METADATA, 0, b"", meta_json, f"{p}: metadata (offset {metadata_offset})"
            )
        try:
            # Unverified and encrypted: nothing of the contents can be read.
            metadata = {} if encrypted and cipher is None else json.loads(meta_json)
        except (UnicodeDecodeError, ValueError) as exc:
            raise StatefileError(
                f"{p}: metadata at offset {metadata_offset} is not valid JSON: {exc}"
            ) from exc
        except RecursionError as exc:
            raise StatefileError(
                f"{p}: metadata at offset {metadata_offset} is nested too deeply "
                "for an image's metadata (corrupt or hostile)"
            ) from exc
        if not isinstance(metadata, dict):
            raise StatefileError(f"{p}: metadata at offset {metadata_offset} is not an object")
        if _depth(metadata) > MAX_METADATA_DEPTH:
            raise StatefileError(
                f"{p}: metadata at offset {metadata_offset} is nested deeper than "
                f"{MAX_METADATA_DEPTH} levels (corrupt or hostile)"
            )
        self.metadata: dict[str, Any] = metadata
        self.metadata_json = meta_json
        self.header = Header(
            version=version,
            keyed=keyed,
            compression=CODEC_NAMES[codec],
            chunk_size=chunk_size,
            image_id=image_id,
            chunk_count=chunk_count,
            stream_len=stream_len,
            metadata_offset=metadata_offset,
            file_size=size,
            table_offset=table_offset,
            encrypted=encrypted,
            key_id=self.key_id,
        )

    def _parse_table(
        self, table: bytes, table_offset: int, count: int, chunk_size: int, stream_len: int
    ) -> list[_Frame]:
        """Chunk table entries with their offsets; every length checked against the file."""
        p, tsize = self.path, self.tag_size
        entry = CHUNK_FRAME.size + tsize
        frames: list[_Frame] = []
        pos, raw_off = self.data_offset, 0
        prev = self.header_tag
        for i in range(count):
            at = i * entry
            frame = table[at : at + CHUNK_FRAME.size]
            raw_len, stored_len, codec = CHUNK_FRAME.unpack(frame)
            if (
                not 0 < raw_len <= chunk_size
                or not 0 < stored_len <= table_offset - pos
                or raw_off + raw_len > stream_len
            ):
                raise IntegrityError(
                    f"{p}: chunk {i} (table entry at offset {table_offset + at}) has bad "
                    f"lengths: raw {raw_len}, stored {stored_len}"
                )
            tag = table[at + CHUNK_FRAME.size : at + entry]
            frames.append(_Frame(i, pos, frame, raw_len, stored_len, codec, prev, tag, raw_off))
            prev = tag
            pos += stored_len
            raw_off += raw_len
        if pos != table_offset or raw_off != stream_len:
            raise IntegrityError(
                f"{p}: the chunk table (offset {table_offset}) accounts for {pos} of "
                f"{table_offset} data bytes and {raw_off} of {stream_len} stream bytes"
            )
        return frames

    def _check(self, expected: bytes, got: bytes, what: str) -> None:
        if self.verify:
            self.sealer.check(expected, got, what)

    # -- the stream --------------------------------------------------------------

    def _stored(self, f: Any) -> Iterator[tuple[_Frame, bytes]]:
        """Each chunk's stored bytes, read in order on the calling thread."""
        f.seek(self.data_offset)
        for fr in self.chunks_table:
            yield fr, read_exact(f, fr.stored_len, self.path, fr.offset, f"chunk {fr.index}")

    def _open_chunk(self, fr: _Frame, stored: Any) -> Any:
        """Pool job: check the chunk's tag against the chain, then decompress it."""
        where = f"{self.path}: chunk {fr.index} at offset {fr.offset}"
        if self.verify:
            s = self.sealer
            expected = s.chain(fr.prev_tag, s.digest(fr.index, fr.frame, stored))
            s.check(expected, fr.tag, where)
        cipher = self.sealer.cipher
        if cipher is not None:
            fields = chunk_fields(fr.raw_len, fr.codec, fr.stored_len - AEAD_TAG_SIZE)
            stored = cipher.open(PURPOSE_CHUNKS, fr.index, fields, stored, where)
        return decompress_chunk(stored, fr.codec, fr.raw_len, where)

    def _check_readable(self) -> None:
        """An encrypted image opened without its key has no readable stream."""
        if self.header.encrypted and self.sealer.cipher is None:
            raise EncryptedImageError(
                f"{self.path}: encrypted (key id {self.key_id}); pass its key with --key-file"
            )

    def chunks(self) -> Iterator[bytes]:
        """The stream's chunks in order, each verified before it is yielded."""
        self._check_readable()
        with self._file(buffering=0) as f:
            try:
                if len(self.chunks_table) == 1:  # nothing to overlap: no pool handoff
                    for item in self._stored(f):
                        yield self._open_chunk(*item)
                    return
                yield from map_ordered(lambda item: self._open_chunk(*item), self._stored(f))
            except OSError as exc:
                raise StatefileError(f"{self.path}: cannot read: {exc.strerror}") from exc

    def read_all(self) -> bytes:
        """The whole verified stream as one ``bytes`` object, read the fastest way.

        Refused before anything is read when the stream declares more bytes than this
        host could hold: a few MiB of honest zstd frames can declare hundreds of GiB.

        When every chunk is stored raw (compression none, or data zstd cannot shrink),
        the chunks are one contiguous run of the file: it is read with one large read
        into the result itself and verified in place on the pool, with no copy beyond
        the read.  Otherwise chunks are verified and decompressed on the pool and joined.
        """
        self._check_readable()
        self._check_fits(self.header.stream_len)
        table = self.chunks_table
        if not table or any(fr.codec != CODEC_NONE or fr.stored_len != fr.raw_len for fr in table):
            return b"".join(self.chunks())
        with self._file(buffering=0) as f:
            f.seek(self.data_offset)
            n = self.header.stream_len
            try:
                data = read_exact(f, n, self.path, self.data_offset, "chunk data")
            except OSError as exc:
                raise StatefileError(f"{self.path}: cannot read: {exc.strerror}") from exc
        view = memoryview(data)
        base = self.data_offset
        items = ((fr, view[fr.offset - base : fr.offset - base + fr.stored_len]) for fr in table)
        for _ in map_ordered(lambda item: self._open_chunk(*item), items):
            pass
        return data

    def _check_fits(self, n: int) -> None:
        room = memory_available()
        if room is not None and n > room:
            raise StatefileError(
                f"{self.path}: the state stream declares {n:,} bytes, more than the "
                f"{room:,} this host has available (a corrupt or hostile image, or a host "
                "too small for it)"
            )


def memory_available() -> int | None:
    """What this process could still allocate: the kernel's MemAvailable, lowered by an
    address-space limit if one is set; None where neither can be read."""
    import resource

    room = None
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    room = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        room = soft if room is None else min(room, soft)
    return room


class ChunkStream(io.RawIOBase):
    """A readable binary file over verified chunks, for ``state.load``.

    Partial reads stream chunk by chunk (bounded memory).  Reading everything at once
    (``read()``, ``readall()``), as ``state.load`` does, takes the fastest path
    (``StatefileReader.read_all``).
    """

    def __init__(self, reader: StatefileReader) -> None:
        super().__init__()
        self._reader = reader
        self._chunks: Iterator[bytes] | None = None
        self._cur = memoryview(b"")
        self._pos = 0
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:  # type: ignore[override]
        if self._chunks is None:
            self._chunks = self._reader.chunks()
        out = memoryview(b).cast("B")
        n = 0
        while n < len(out):
            if self._pos >= len(self._cur):
                nxt = None if self._eof else next(self._chunks, None)
                if nxt is None:
                    self._eof = True
                    break
                self._cur = memoryview(nxt)
                self._pos = 0
                continue
            take = min(len(out) - n, len(self._cur) - self._pos)
            out[n : n + take] = self._cur[self._pos : self._pos + take]
            n += take
            self._pos += take
        return n

    def readall(self) -> bytes:
        if self._chunks is None and not self._eof:
            self._eof = True
            return self._reader.read_all()
        if self._chunks is None:
            return b""
        rest = [bytes(self._cur[self._pos :])]
        if not self._eof:
            rest.extend(self._chunks)
        self._eof = True
        self._cur, self._pos = memoryview(b""), 0
        return b"".join(rest)

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        if size is None or size < 0:
            return self.readall()
        return super().read(size)

    def close(self) -> None:
        if self._chunks is not None:
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()
        super().close()
