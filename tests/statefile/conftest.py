"""Helpers for statefile tests: small images written through the real writer."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from ckpt import statefile
from ckpt.statefile import PAGE_SIZE

KEY = b"0123456789abcdef0123456789abcdef"


def page(seed: int) -> bytes:
    """A deterministic non-zero page."""
    return (seed.to_bytes(4, "little") + b"ckpt-page-") * (PAGE_SIZE // 14) + bytes(PAGE_SIZE % 14)


def sample_pages() -> list[tuple[int, bytes]]:
    """Pages 0-3 data, 4-5 zero, 10 data, 11 zero, 12-13 data: runs, gaps and zeros."""
    zero = bytes(PAGE_SIZE)
    return [
        (0, page(0)),
        (1, page(1)),
        (2, page(2)),
        (3, page(3)),
        (4, zero),
        (5, zero),
        (10, page(10)),
        (11, zero),
        (12, page(12)),
        (13, page(13)),
    ]


def write_image(
    target: Path,
    stream: bytes,
    pages: Iterable[tuple[int, Any]] | None = None,
    **opts: Any,
) -> Path:
    """Write ``stream`` (in uneven pieces) and ``pages`` as an image at ``target``."""
    with statefile.ImageWriter(target, **opts) as img:
        f = img.state_file
        pos, step = 0, 1
        while pos < len(stream):
            f.write(stream[pos : pos + step])
            pos += step
            step = step * 3 + 1
        if pages is not None:
            img.write_pages(pages)
    return target


@pytest.fixture
def make_image(tmp_path: Path) -> Callable[..., Path]:
    """Factory: ``make_image(name, stream, pages=None, **ImageWriter options)``."""

    def make(name: str, stream: bytes, pages: Any = None, **opts: Any) -> Path:
        return write_image(tmp_path / name, stream, pages, **opts)

    return make


@pytest.fixture
def random_stream() -> bytes:
    """Half random, half repetitive: compressible and incompressible chunks."""
    return os.urandom(5000) + b"abcdefgh" * 1000
