"""memfill.corpus draws as the public ``random`` calls would: the same bytes."""

from __future__ import annotations

import random

import pytest

from ckpt.kernel import memfill


def _corpus_by_public_calls(rng: random.Random, length: int) -> bytes:
    """The corpus as ``rng.choices`` and ``rng.randrange`` give it (the reference)."""
    lines: list[str] = []
    size = 0
    while size < length:
        words = rng.choices(memfill._WORDS, k=rng.randrange(6, 18))
        line = f"{rng.randrange(10**9):09d} " + " ".join(words) + f" {rng.randrange(10**6)}\n"
        lines.append(line)
        size += len(line)
    return "".join(lines).encode()[:length]


@pytest.mark.parametrize("seed", [0, 1, 7, 2**40 + 3])
def test_corpus_is_the_bytes_of_the_public_calls(seed: int) -> None:
    fast, reference = random.Random(seed), random.Random(seed)
    assert memfill.corpus(fast, 200_000) == _corpus_by_public_calls(reference, 200_000)
    assert fast.random() == reference.random()  # the generator is left where it would be
