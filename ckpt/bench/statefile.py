"""``ckpt bench statefile``: image write/read throughput against a plain file copy.

Shapes (gVisor's statefile benchmark): ``--size-mib`` of incompressible data (random
bytes) and of compressible data (random bytes mapped onto a 16-letter alphabet: 4 bits
of entropy per byte, about 2:1), each written through ``ImageWriter`` (compression,
integrity tags, fsync and rename included) and read back through ``open_image``; and a
page file of ``--pages-mib`` with half of the pages zero.  The baseline variant ``copy``
writes (and fsyncs) or reads the same bytes as one plain file: the limit for the disk and
page cache at hand.  Variants run interleaved (A B B A ...) by ``harness``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckpt.bench import harness
from ckpt.statefile import PAGE_SIZE, ImageWriter, open_image

KEY = b"ckpt-bench-statefile-key-32bytes"
MiB = 1 << 20
_ALPHABET = bytes(b"etaoinshrdlucmfw"[i % 16] for i in range(256))

# variant -> ImageWriter options
VARIANTS: dict[str, dict[str, Any]] = {
    "zstd": {"compression": "zstd"},
    "none": {"compression": "none"},
    "zstd+hmac": {"compression": "zstd", "key": KEY},
    "zstd+aead": {"compression": "zstd", "key": KEY, "encrypt": True},  # --encrypt
}


def make_data(kind: str, size: int) -> bytes:
    """``size`` bytes of ``incompressible`` or ``compressible`` data."""
    raw = os.urandom(size)
    return raw if kind == "incompressible" else raw.translate(_ALPHABET)


def make_pages(size: int) -> list[tuple[int, bytes]]:
    """``size`` bytes of pages, every other 64-page stretch all zero (50% zero pages)."""
    n = size // PAGE_SIZE
    data = make_data("compressible", n * PAGE_SIZE // 2)
    zero = bytes(PAGE_SIZE)
    out: list[tuple[int, bytes]] = []
    src = 0
    for i in range(n):
        if (i // 64) % 2:
            out.append((i, zero))
        else:
            out.append((i, data[src : src + PAGE_SIZE]))
            src += PAGE_SIZE
    return out


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb", buffering=0) as f:
        f.write(data)
        os.fsync(f.fileno())


def _write_stream(target: Path, data: bytes, opts: dict[str, Any]) -> int:
    with ImageWriter(target, force=True, **opts) as img:
        img.state_file.write(data)  # as state.save does: one large write
    return (target / "checkpoint.img").stat().st_size


def _read_stream(target: Path, key: bytes | None) -> int:
    # What state.load does: read() the whole stream.
    return len(open_image(target, key=key).state_reader().read())


def _write_pages(target: Path, pages: list[tuple[int, bytes]], opts: dict[str, Any]) -> int:
    with ImageWriter(target, force=True, **opts) as img:
        img.write_pages(pages)
    return (target / "pages.img").stat().st_size


def _read_pages(target: Path, key: bytes | None) -> int:
    loaded = open_image(target, key=key).open_pages(lazy=False)
    return loaded.summary.scanned * PAGE_SIZE


@dataclass
class Suite:
    """The cases, plus what the summary needs (sizes, where files go)."""

    cases: list[harness.Case]
    sizes: dict[str, int]  # benchmark name -> bytes processed per op
    workdir: Path

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def _fresh(target: Path) -> Path:
    shutil.rmtree(target, ignore_errors=True)
    return target


def build(size_mib: int, pages_mib: int, workdir: Path | None = None) -> Suite:
    """Every case of the suite; data is generated once, up front."""
    wd = Path(tempfile.mkdtemp(prefix="ckpt-bench-statefile-", dir=workdir))
    size = size_mib * MiB
    cases: list[harness.Case] = []
    sizes: dict[str, int] = {}
    for kind in ("incompressible", "compressible"):
        data = make_data(kind, size)
        copy_file = wd / f"copy-{kind}.bin"
        w, r = f"Write/{kind}", f"Read/{kind}"
        sizes[w] = sizes[r] = size
        cases.append(
            harness.Case(w, "copy", lambda d=data, p=copy_file: _fsync_write(p, d) or len(d))
        )
        for variant, opts in VARIANTS.items():
            target = wd / f"img-{kind}-{variant}"
            cases.append(
                harness.Case(
                    w,
                    variant,
                    lambda t, d=data, o=opts: _write_stream(t, d, o),
                    setup=lambda t=target: _fresh(t),
                    bytes_of=lambda n: n,
                )
            )
        cases.append(harness.Case(r, "copy", lambda p=copy_file: len(p.read_bytes())))
        for variant, opts in VARIANTS.items():
            target = wd / f"img-{kind}-{variant}"
            cases.append(
                harness.Case(r, variant, lambda t=target, o=opts: _read_stream(t, o.get("key")))
            )
    pages = make_pages(pages_mib * MiB)
    raw = b"".join(p for _, p in pages)
    copy_file = wd / "copy-pages.bin"
    sizes["Pages/write"] = sizes["Pages/read"] = len(raw)
    cases.append(
        harness.Case(
            "Pages/write",
            "copy",
            lambda: _fsync_write(copy_file, raw) or len(raw),
            bytes_of=lambda n: n,
        )
    )
    for variant, opts in VARIANTS.items():
        target = wd / f"img-pages-{variant}"
        cases.append(
            harness.Case(
                "Pages/write",
                variant,
                lambda t, o=opts: _write_pages(t, pages, o),
                setup=lambda t=target: _fresh(t),
                bytes_of=lambda n: n,
            )
        )
    cases.append(harness.Case("Pages/read", "copy", lambda: len(copy_file.read_bytes())))
    for variant, opts in VARIANTS.items():
        target = wd / f"img-pages-{variant}"
        cases.append(
            harness.Case(
                "Pages/read", variant, lambda t=target, o=opts: _read_pages(t, o.get("key"))
            )
        )
    return Suite(cases, sizes, wd)


def run(
    size_mib: int = 100,
    pages_mib: int = 64,
    count: int = 3,
    *,
    memory: bool = True,
    progress: bool = True,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Run the suite; returns results, throughput summary and the zero-page check."""
    suite = build(size_mib, pages_mib, workdir)
    try:
        results = harness.run_interleaved(
            suite.cases, count=count, memory=memory, progress=progress
        )
        zero_cost = _zero_page_cost(suite, pages_mib)
    finally:
        suite.cleanup()
    return {"results": results, "summary": summarize(results, suite.sizes), "pages": zero_cost}


def _zero_page_cost(suite: Suite, pages_mib: int) -> dict[str, Any]:
    """pages.img size of a 50%-zero page file written without compression."""
    pages = make_pages(pages_mib * MiB)
    target = suite.workdir / "zero-check"
    with ImageWriter(target, compression="none") as img:
        summary = img.write_pages(pages)
    return {
        "scanned": summary.scanned,
        "zero": summary.zero,
        "stored": summary.stored,
        "pages_img_bytes": summary.pages_img_bytes,
        "non_zero_bytes": summary.stored * PAGE_SIZE,
        "zero_pages_cost_bytes": summary.pages_img_bytes - summary.stored * PAGE_SIZE,
    }


def summarize(results: list[harness.Result], sizes: dict[str, int]) -> list[dict[str, Any]]:
    """MB/s per (name, variant) and its fraction of the plain-copy rate."""
    by = {(r.name, r.variant): r for r in results}
    rows = []
    for r in results:
        size = sizes.get(r.name, 0)
        mbps = size / MiB / (r.wall_ns / 1e9) if r.wall_ns else float("nan")
        copy = by.get((r.name, "copy"))
        frac = (copy.wall_ns / r.wall_ns) if copy and r.wall_ns else float("nan")
        rows.append(
            {
                "name": r.name,
                "variant": r.variant,
                "mib_per_s": mbps,
                "of_copy_rate": frac,
                "cpu_ms": r.cpu_ns / 1e6,
                "cpu_per_wall": r.cpu_ns / r.wall_ns if r.wall_ns else float("nan"),
            }
        )
    return rows


def render_summary(summary: list[dict[str, Any]], pages: dict[str, Any]) -> Any:
    """A rich table of throughput and the zero-page check."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(title="throughput (MiB/s of data; copy = plain file, the limit)")
    for col in ("benchmark", "variant", "MiB/s", "of copy rate", "cpu", "cpu/wall"):
        t.add_column(col, justify="left" if col in ("benchmark", "variant") else "right")
    prev = None
    for row in summary:
        t.add_row(
            row["name"] if row["name"] != prev else "",
            row["variant"],
            f"{row['mib_per_s']:.0f}",
            f"{row['of_copy_rate'] * 100:.0f}%",
            f"{row['cpu_ms']:.0f} ms",
            f"{row['cpu_per_wall']:.2f}",
        )
        prev = row["name"]
    note = Text(
        f"zero pages: {pages['zero']:,} of {pages['scanned']:,} pages; pages.img holds "
        f"{pages['pages_img_bytes']:,} bytes for {pages['non_zero_bytes']:,} bytes of "
        f"non-zero pages (zero pages cost {pages['zero_pages_cost_bytes']:,} bytes incl. header)"
    )
    return Group(t, note)
