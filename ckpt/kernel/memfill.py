"""Page contents for the ``memory:N`` workload: a realistic mix, made fast and reproducible.

Anonymous memory in a real sandbox is neither all zeros nor all noise.  The mix here,
chosen per block of ``BLOCK_PAGES`` pages so that runs form as they do in a heap:

- zero pages (touched, still zero: freed buffers, bss, calloc'd arrays) — ``ZERO_SHARE``;
- text-like pages (log lines, JSON, strings: zstd shrinks them 3-5x) — ``TEXT_SHARE``;
- incompressible pages (compressed or encrypted payloads, random keys) — the rest.

Every page is distinct (a stamp of its index heads it), so no run compresses to nothing
by repetition.  Text comes from a corpus generated once per seed, sliced at random
offsets: ~1 µs of Python per page instead of building each page word by word.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

PAGE_SIZE = 4096
BLOCK_PAGES = 16
ZERO_SHARE = 0.25
TEXT_SHARE = 0.50
CORPUS_BYTES = 4 << 20
_ZERO = bytes(PAGE_SIZE)
_WORDS = [
    "GET",
    "POST",
    "/api/v1/users",
    "/static/app.js",
    "200",
    "304",
    "404",
    "HTTP/1.1",
    "user_id",
    "session",
    "token",
    "timestamp",
    "level=info",
    "level=warn",
    "request_id",
    "duration_ms",
    "bytes",
    "upstream",
    "cache",
    "hit",
    "miss",
    '"name":',
    '"value":',
    "true",
    "false",
    "null",
    "{",
    "}",
    "[",
    "]",
    ",",
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "for",
    "on",
    "with",
    "as",
    "at",
    "by",
    "error",
    "retry",
    "connection",
    "reset",
    "timeout",
    "accepted",
    "worker",
    "pid",
    "thread",
    "queue",
    "flushed",
]


def corpus(rng: random.Random, length: int = CORPUS_BYTES) -> bytes:
    """Text-like bytes: log lines of words and numbers, ``length`` long.

    Each line is what ``rng.choices(_WORDS, k=rng.randrange(6, 18))`` between two
    ``rng.randrange`` numbers gives, drawn as CPython's ``random`` draws them
    (``randrange(n)`` is ``getrandbits(n.bit_length())`` until below ``n``, ``choices``
    is ``floor(random() * len)``) without a Python call per draw: a restored
    ``memory:N@RATE`` writer builds its corpus on its first step, while the sandbox is
    down.  tests/kernel/test_memfill.py checks the bytes equal the public calls'."""
    words, n = _WORDS, float(len(_WORDS))
    uniform, bits = rng.random, rng.getrandbits
    lines: list[str] = []
    size = 0
    while size < length:
        k = bits(4)  # randrange(6, 18): 6 + a number below 12
        while k >= 12:
            k = bits(4)
        picked = [words[int(uniform() * n)] for _ in range(k + 6)]
        stamp = bits(30)  # randrange(10**9)
        while stamp >= 1_000_000_000:
            stamp = bits(30)
        tail = bits(20)  # randrange(10**6)
        while tail >= 1_000_000:
            tail = bits(20)
        line = f"{stamp:09d} " + " ".join(picked) + f" {tail}\n"
        lines.append(line)
        size += len(line)
    return "".join(lines).encode()[:length]


def pages(npages: int, rng: random.Random) -> Iterator[bytes]:
    """``npages`` pages of the mix, in order (deterministic for a given ``rng``)."""
    text = corpus(rng)
    limit = len(text) - PAGE_SIZE
    done = 0
    while done < npages:
        n = min(BLOCK_PAGES, npages - done)
        roll = rng.random()
        if roll < ZERO_SHARE:
            for _ in range(n):
                yield _ZERO
        elif roll < ZERO_SHARE + TEXT_SHARE:
            for i in range(n):
                at = rng.randrange(limit)
                yield b"%016x" % (done + i) + text[at + 16 : at + PAGE_SIZE]
        else:
            noise = rng.randbytes(n * PAGE_SIZE)
            for i in range(n):
                yield noise[i * PAGE_SIZE : (i + 1) * PAGE_SIZE]
        done += n
