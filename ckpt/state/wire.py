"""The wire format shared by both engines: framing, top-level layout, value tags.

A stream is one frame::

    +--------+---------+-----------+--------------+----------------------------+
    | "CKST" | version | crc32(LE) | length (LE)  | payload: one MessagePack   |
    | 4 B    | 1 B     | 4 B       | 8 B          | array (see LAYOUT below)   |
    +--------+---------+-----------+--------------+----------------------------+

The payload array, by index::

    0 VERSION   format version (int)
    1 ENGINE    "typed" or "reflect": who wrote it (informational)
    2 ENCODING  "compact" (values encoded per the field's declared kind) or
                "dyn" (every value self-describing); readers handle both
    3 TYPES     [[type name, [field names], [field kind descriptors]], ...]
                in order of first discovery; enum types appear with no fields
    4 TYPE_SEQ  [type index of object 1, of object 2, ...]; object ids start at 1
                (0 stands for None wherever a reference is expected)
    5 ROWS      per type index, its objects' rows in id order; a row is the list
                of field values in the order of the type's field names
    6 ROOT      the root value, self-describing
    7 SHARED    mutable containers reachable from more than one place:
                [[content location, other location, ...], ...]
    8 FLAGS     {"escaped": [type index, ...]}: the types whose compact rows hold
                slot escapes ({T_SLOT: dyn value}, README "the per-slot rule");
                version 1 streams may say {"tagged": true} instead (scalar slots
                holding bare self-describing values)

Self-describing ("dyn") values: None, bool, int (64-bit), float, str and bytes are
MessagePack scalars; a list is an array; every other value is a map with exactly one
integer key, the tag below, whose value is the payload.  So a map always means a tag,
and a reader never has to guess.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

import msgspec

from ckpt.errors import StateError

MAGIC = b"CKST"
FORMAT_VERSION = 2  # what this ckpt writes
READ_VERSIONS = (1, 2)  # what it reads (1: no escapes or value codecs; Nil in dyn = zero)
_HEADER = struct.Struct("<4sBIQ")
HEADER_SIZE = _HEADER.size

# Top-level layout indices.
VERSION, ENGINE, ENCODING, TYPES, TYPE_SEQ, ROWS, ROOT, SHARED, FLAGS = range(9)
LAYOUT_LEN = 9

COMPACT = "compact"
DYN = "dyn"

# Tags of self-describing values ({tag: payload}).
T_REF = 0  # payload: object id
T_TUPLE = 1  # payload: [items]
T_SET = 2  # payload: [items]
T_FROZENSET = 3  # payload: [items]
T_DICT = 4  # payload: [[keys], [values]]
T_BYTEARRAY = 5  # payload: bytes
T_ENUM = 6  # payload: [type index, value]
T_BIGINT = 7  # payload: decimal string
T_SLOT = 8  # a compact slot's escape; payload: the slot's value, self-describing
T_VALUE = 9  # payload: [value codec name, [plain items]] (ckpt.state.values)
INT_MIN = -(1 << 63)
INT_LIMIT = 1 << 64  # MessagePack holds ints in [INT_MIN, INT_LIMIT)


def refuse_extension(code: int, data: memoryview) -> Any:
    """No engine writes MessagePack extension types: one in a stream is damage or forgery
    (found by the fuzzer: it loaded as a ``msgspec.msgpack.Ext`` object in a field).
    Called only when an extension is met, so a sound stream pays nothing."""
    raise StateError(
        f"state stream payload holds a MessagePack extension value (type {code}, "
        f"{len(data)} bytes), which ckpt never writes: the stream is corrupt or forged"
    )


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(ext_hook=refuse_extension)


def array_body(rows: list) -> bytes:
    """The MessagePack encoding of ``rows`` without its array header: the elements'
    encodings back to back, so chunks can be joined under one header (``array_of``)."""
    data = _encoder.encode(rows)
    first = data[0]
    skip = 1 if first & 0xF0 == 0x90 else 3 if first == 0xDC else 5
    return data[skip:]


def array_of(count: int, bodies: list[bytes]) -> msgspec.Raw:
    """An encoded array of ``count`` elements from chunks made by ``array_body``; the
    stream holds exactly what encoding the whole list at once would have written."""
    if count < 16:
        head = bytes([0x90 | count])
    elif count < 1 << 16:
        head = struct.pack(">BH", 0xDC, count)
    else:
        head = struct.pack(">BI", 0xDD, count)
    return msgspec.Raw(head + b"".join(bodies))


def frame(payload: Any) -> bytes:
    """Encode the top-level array and wrap it in the checked frame."""
    body = _encoder.encode(payload)
    return _HEADER.pack(MAGIC, FORMAT_VERSION, zlib.crc32(body), len(body)) + body


def payload_length(header: bytes) -> int:
    """The payload length a frame header declares (0 for a short or foreign header,
    which ``check_frame`` then rejects with the precise reason)."""
    if len(header) < HEADER_SIZE:
        return 0
    magic, _version, _crc, length = _HEADER.unpack_from(header)
    return length if magic == MAGIC else 0


def check_frame(data: Any, crc32: Callable[[Any], int] = zlib.crc32) -> memoryview:
    """Check magic, version, length and checksum; return the payload bytes.

    ``crc32`` computes zlib.crc32 of the payload (the native engine passes its own,
    about ten times fewer instructions where the CPU has carry-less multiply)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise StateError(f"a state stream must be bytes, not {type(data).__name__}")
    view = memoryview(data)
    if len(view) < HEADER_SIZE:
        raise StateError(
            f"not a ckpt state stream: {len(view)} bytes is shorter than the "
            f"{HEADER_SIZE}-byte header (truncated?)"
        )
    magic, version, crc, length = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise StateError(f"not a ckpt state stream: bad magic {bytes(magic)!r} at offset 0")
    if version not in READ_VERSIONS:
        raise StateError(
            f"state stream format version {version} is not supported "
            f"(this ckpt reads versions {', '.join(map(str, READ_VERSIONS))})"
        )
    body = view[HEADER_SIZE:]
    if len(body) != length:
        raise StateError(
            f"state stream truncated or padded: header says {length} payload bytes, "
            f"found {len(body)} at offset {HEADER_SIZE}"
        )
    if crc32(body) != crc:
        raise StateError("state stream is corrupted: payload checksum mismatch")
    return body


def type_entry(t: int, entry: Any) -> tuple[str, list[str], list[str], bool]:
    """Check type table entry ``t``: (name, field names, kind descriptors, is an enum)."""
    if not (isinstance(entry, list) and len(entry) == 3):
        raise StateError(f"type table entry #{t} is malformed")
    name, names, descriptors = entry
    if not (isinstance(name, str) and isinstance(names, list) and isinstance(descriptors, list)):
        raise StateError(f"type table entry #{t} is malformed")
    if not all(isinstance(n, str) for n in names) or not all(
        isinstance(d, str) for d in descriptors
    ):
        raise StateError(f"type table entry for {name!r} has malformed field names")
    is_enum = descriptors == ["enum"] and not names
    if not is_enum and len(names) != len(descriptors):
        raise StateError(f"type table entry for {name!r} is malformed")
    return name, names, descriptors, is_enum


def unframe(data: Any) -> list:
    """Check the frame and decode the top-level array (shape not yet validated)."""
    body = check_frame(data)
    try:
        payload = _decoder.decode(body)
    except (msgspec.DecodeError, ValueError, OverflowError, RecursionError) as exc:
        raise StateError(f"state stream payload is malformed: {exc}") from exc
    if not isinstance(payload, list) or len(payload) != LAYOUT_LEN:
        raise StateError("state stream payload has the wrong shape (not a ckpt object stream)")
    return payload
