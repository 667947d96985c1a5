"""On-disk layout of an image: named constants and the struct layouts, nothing else.

An image is a directory holding ``checkpoint.img`` (the statefile), ``pages.img`` (page
contents), ``pages_meta.img`` (where each page lives) and, optionally, ``stats.json``.
All integers are little-endian.  ``TAG`` is ``TAG_SIZE_KEYED`` (32) bytes of
HMAC-SHA256 when the image is keyed, else ``TAG_SIZE_PLAIN`` (4) bytes of CRC-32.

checkpoint.img — header first, then the chunks' bytes back to back, then the chunk
table, metadata and footer.  The trailer comes last so that callers can keep adding
metadata until the image is committed, and the stream is written once, in order, while
it is produced.  The chunk bytes carry no framing, so a stream whose chunks are all
stored raw is one contiguous run in the file and is read with one large read::

    +--------------------------------------------------------------------+ 0
    | MAGIC "\x89CKPTSF\n" (8) | version u16 | flags u8 | codec u8       |
    | chunk_size u32 | reserved u32 (0) | reserved u32 (0) | image_id (16)  |
    | header_tag   TAG = MAC(header[0:40])                               |
    +--------------------------------------------------------------------+ data_offset
    | chunk 0 stored bytes | chunk 1 stored bytes | ... | chunk N-1      |
    +--------------------------------------------------------------------+ table_offset
    | chunk table, N entries:                                            |
    |   frame = raw_len u32 | stored_len u32 | codec u8 | 3 x pad (0)    |
    |   tag_i = MAC(tag_{i-1} || MAC(index u64 || frame || stored bytes)) |
    |   (tag_{-1} = header_tag: the chain)                               |
    +--------------------------------------------------------------------+ metadata_offset
    | meta_len u32 | metadata JSON (utf-8, meta_len bytes)               |
    | meta_tag     TAG = MAC(header_tag || "meta" || meta_len || JSON)    |
    +--------------------------------------------------------------------+
    | footer: table_offset u64 | metadata_offset u64 | chunk_count u64 |  |
    |         stream_len u64                                             |
    | footer_tag   TAG = MAC(tag_{N-1} || meta_tag || footer fields)      |
    | END_MAGIC "CKPTEND\n" (8)                                          |
    +--------------------------------------------------------------------+ EOF

Chunk i lives at data_offset + the stored lengths of the chunks before it; the stored
lengths must add up to exactly table_offset - data_offset and the raw lengths to
stream_len.  The metadata has its own tag (chained from the header, not the chunks) so
it can be verified and shown without reading the stream.  The footer tag closes the
chain over every chunk: it is checked on open (with the last table entry's tag), which
authenticates the chunk count and stream length before anything is sized from them;
each chunk's tag is checked against the chain before its bytes are decompressed or
handed out, so a dropped, reordered, altered or truncated chunk is refused.

pages.img — just a header and the stored runs back to back (the framing lives in
pages_meta.img, so the page data is written in few, large writes)::

    | PAGES_MAGIC (8) | version u16 | reserved (6) | image_id (16) | run data ... |

pages_meta.img — which pages exist, where each stored run lives, and totals::

    | META_MAGIC (8) | version u16 | flags u8 | codec u8 | stored_count u32 |
    | image_id (16) | scanned u64 | zero u64 | stored u64 | pages_img_size u64 |
    | zero_count u32 | reserved u32                                          |
    | stored run x stored_count: first_page u64 | npages u32 | codec u8 |  |
    |        3 x pad | offset u64 | stored_len u32 | TAG = MAC(image_id ||  |
    |        run fields || stored bytes)                                   |
    | zero run x zero_count: first_page u64 | npages u64                   |
    | meta_tag  TAG = MAC(everything above)                                |

A stored run covers at most ``PAGES_PER_CHUNK`` contiguous non-zero pages and is
compressed on its own, so runs can be fetched independently (lazy loading).  All-zero
pages cost nothing in pages.img: they are only listed as zero runs.

A reader refuses a page map (``pages.check_page_map``) unless its stored and zero runs
are sorted, disjoint and below ``MAX_PAGES``, and the header totals are their sums; a
restore checks it again against its kernel state (every page below the frames the state
declares, no more pages than frames it allocated) before reading any page.  Every file
is opened without following a link and read only if it is a regular file.
"""

from __future__ import annotations

import struct

# the file names are re-exported from the leaf every layer reads them from
from ckpt.imagefiles import CHECKPOINT_IMG as CHECKPOINT_IMG
from ckpt.imagefiles import PAGES_IMG as PAGES_IMG
from ckpt.imagefiles import PAGES_META_IMG as PAGES_META_IMG
from ckpt.imagefiles import STATS_JSON as STATS_JSON

PAGE_SIZE = 4096
CHUNK_SIZE = 1 << 20  # raw bytes per statefile chunk: ~1 MiB, as gVisor's compressio
PAGES_PER_CHUNK = CHUNK_SIZE // PAGE_SIZE

MAGIC = b"\x89CKPTSF\n"
END_MAGIC = b"CKPTEND\n"
PAGES_MAGIC = b"\x89CKPTPG\n"
PAGES_META_MAGIC = b"\x89CKPTPM\n"
FORMAT_VERSION = 1

FLAG_KEYED = 0x01
FLAG_ENCRYPTED = 0x02  # pieces sealed with an AEAD (seal.py); always with FLAG_KEYED
KNOWN_FLAGS = FLAG_KEYED | FLAG_ENCRYPTED

CODEC_NONE = 0
CODEC_ZSTD = 1
CODECS = {"none": CODEC_NONE, "zstd": CODEC_ZSTD}
CODEC_NAMES = {v: k for k, v in CODECS.items()}

TAG_SIZE_KEYED = 32  # HMAC-SHA256
TAG_SIZE_PLAIN = 4  # CRC-32

MAX_CHUNK_SIZE = 64 << 20  # largest chunk_size a reader accepts before allocating
MAX_METADATA_LEN = 16 << 20  # largest metadata JSON a reader accepts
IMAGE_ID_SIZE = 16
# Page indices (and so page totals) an image may record: below 2^32, 16 TiB of 4 KiB
# pages, far beyond what one host's sandbox holds.  A restore checks them again against
# the frames its kernel state declares.
MAX_PAGES = 1 << 32
# Largest pages_meta.img a reader accepts (every run parsed costs ~150 bytes of Python
# objects): alternating zero and stored pages, the worst layout, take under 80 bytes per
# two pages, so 256 MiB still describes 25 GiB of memory; runs of 256 pages, 500 times
# more.
MAX_PAGES_META_LEN = 256 << 20

# checkpoint.img
HEADER = struct.Struct("<8sHBBIII16s")  # magic, version, flags, codec, chunk_size, 0, 0, id
CHUNK_FRAME = struct.Struct("<IIB3x")  # raw_len, stored_len, codec (a chunk table entry)
CHUNK_INDEX = struct.Struct("<Q")
META_LEN = struct.Struct("<I")
FOOTER = struct.Struct("<QQQQ")  # table_offset, metadata_offset, chunk_count, stream_len

# pages.img
PAGES_HEADER = struct.Struct("<8sH6x16s")

# pages_meta.img
PAGES_META_HEADER = struct.Struct("<8sHBBI16sQQQQII")
STORED_RUN = struct.Struct("<QIB3xQI")  # first_page, npages, codec, offset, stored_len
ZERO_RUN = struct.Struct("<QQ")  # first_page, npages


DEFAULT_COMPRESSION = "zstd"
DEFAULT_LEVEL = 1  # measured: see README "Image format"
ZSTD_LEVELS = range(-7, 23)  # accepted --compression-level values for zstd


def tag_size(flags: int) -> int:
    """Bytes of each integrity tag for an image with these header flags."""
    return TAG_SIZE_KEYED if flags & FLAG_KEYED else TAG_SIZE_PLAIN


def footer_size(flags: int) -> int:
    """Bytes of the fixed trailer: footer fields, footer tag and end magic."""
    return FOOTER.size + tag_size(flags) + len(END_MAGIC)
