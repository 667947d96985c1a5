"""A hostile pages_meta.img, its totals and checksum made consistent, is refused in one
line by ``inspect --verify`` and by a restore, before anything is sized from it.

The restore runs in a child process under a 1 GiB address-space limit, so a page map
that makes the loader allocate per recorded page fails the test instead of the machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zstandard
from typer.testing import CliRunner

from ckpt import statefile
from ckpt.statefile.format import (
    CODEC_ZSTD,
    FORMAT_VERSION,
    PAGE_SIZE,
    PAGES_HEADER,
    PAGES_MAGIC,
    PAGES_META_HEADER,
    PAGES_PER_CHUNK,
    STORED_RUN,
    ZERO_RUN,
)
from ckpt.statefile.integrity import Sealer
from ckpt.statefile.pages import PageMapError, _run_tag

TSIZE = 4  # CRC-32 tags: these images are not signed
AS_LIMIT = 1 << 30


def forge(img: Path, edit: Callable[[list[list], list[list]], None]) -> None:
    """Rewrite ``img``'s page map with ``edit(stored_runs, zero_runs)``, then make the
    header totals, each run's tag and the file's checksum consistent again."""
    meta = img / "pages_meta.img"
    raw = meta.read_bytes()
    head = list(PAGES_META_HEADER.unpack_from(raw))
    image_id, nstored, nzero = head[5], head[4], head[10]
    pos = PAGES_META_HEADER.size
    runs, zeros = [], []
    for _ in range(nstored):
        runs.append(list(STORED_RUN.unpack_from(raw, pos)))
        pos += STORED_RUN.size + TSIZE
    for _ in range(nzero):
        zeros.append(list(ZERO_RUN.unpack_from(raw, pos)))
        pos += ZERO_RUN.size
    edit(runs, zeros)
    sealer = Sealer(None)
    data = (img / "pages.img").read_bytes()
    stored = sum(r[1] for r in runs)
    zero = sum(z[1] for z in zeros)
    head[4], head[10] = len(runs), len(zeros)
    head[6], head[7], head[8] = stored + zero, zero, stored
    parts = [PAGES_META_HEADER.pack(*head)]
    for first, n, codec, offset, slen in runs:
        parts.append(STORED_RUN.pack(first, n, codec, offset, slen))
        parts.append(_run_tag(sealer, image_id, first, n, codec, data[offset : offset + slen]))
    parts += [ZERO_RUN.pack(first, n) for first, n in zeros]
    body = b"".join(parts)
    meta.write_bytes(body + sealer.mac((body,)))


def forge_bomb(img: Path, runs: int) -> None:
    """Replace ``img``'s pages with ``runs`` stored runs of 256 zero pages each, every one
    a tiny zstd frame declaring its true 1 MiB: a valid map that decompresses to
    ``runs`` MiB from a page file of a few hundred KiB."""
    head = list(PAGES_META_HEADER.unpack_from((img / "pages_meta.img").read_bytes()))
    image_id = head[5]
    frame = zstandard.ZstdCompressor(level=19).compress(bytes(PAGES_PER_CHUNK * PAGE_SIZE))
    pages_head = PAGES_HEADER.pack(PAGES_MAGIC, FORMAT_VERSION, image_id)
    (img / "pages.img").write_bytes(pages_head + frame * runs)
    sealer = Sealer(None)
    entries = []
    for i in range(runs):
        first, offset = i * PAGES_PER_CHUNK, PAGES_HEADER.size + i * len(frame)
        entries.append(STORED_RUN.pack(first, PAGES_PER_CHUNK, CODEC_ZSTD, offset, len(frame)))
        entries.append(_run_tag(sealer, image_id, first, PAGES_PER_CHUNK, CODEC_ZSTD, frame))
    stored = runs * PAGES_PER_CHUNK
    head[4], head[10] = runs, 0
    head[6], head[7], head[8] = stored, 0, stored
    head[9] = PAGES_HEADER.size + runs * len(frame)
    body = PAGES_META_HEADER.pack(*head) + b"".join(entries)
    (img / "pages_meta.img").write_bytes(body + sealer.mac((body,)))


def huge_zero_run(runs: list[list], zeros: list[list]) -> None:
    zeros.append([1 << 50, 1 << 40])


def zero_run_over_a_stored_run(runs: list[list], zeros: list[list]) -> None:
    zeros.insert(0, [runs[0][0] + 1, 2])


def stored_run_at_2_62(runs: list[list], zeros: list[list]) -> None:
    runs[0][0] = 1 << 62


def zero_run_up_to_the_hard_cap(runs: list[list], zeros: list[list]) -> None:
    zeros.append([1 << 31, (1 << 31) - 1])


def stored_run_past_the_kernels_frames(runs: list[list], zeros: list[list]) -> None:
    runs[0][0] = 1000  # as many pages as frames, but outside the frames the kernel has


def one_page_more_than_the_kernel_has(runs: list[list], zeros: list[list]) -> None:
    zeros.append([runs[-1][0] + runs[-1][1], 1])


EVERYWHERE = [huge_zero_run, zero_run_over_a_stored_run, stored_run_at_2_62]
RESTORE_ONLY = [  # inside the format's hard cap: only the kernel state says they are wrong
    zero_run_up_to_the_hard_cap,
    stored_run_past_the_kernels_frames,
    one_page_more_than_the_kernel_has,
]


@pytest.fixture(scope="module")
def kernel_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real sandbox's checkpoint (the "empty" workload: 63 frames, all stored)."""
    from ckpt.sandbox.host.process import Host
    from ckpt.sandbox.wire.protocol import BootRequest, CheckpointRequest, PauseRequest

    d = tmp_path_factory.mktemp("hostile")
    h = Host("unit", str(d / "ctl.sock"))
    try:
        h.boot(BootRequest(workload="empty", options={"rootfs": "minimal"}))
        h.pause(PauseRequest())
        h.checkpoint(CheckpointRequest(image=str(d / "img"), leave_running=True))
    finally:
        h.server.close()
    yield d / "img"


@pytest.fixture
def image(kernel_image: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(kernel_image, tmp_path / "img"))


PRELUDE = textwrap.dedent(
    """
    import atexit, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))

    def peak():
        # VmHWM: this process's own peak since exec (ru_maxrss would also count the
        # parent's memory at the fork, pytest's).
        with open("/proc/self/status") as f:
            kib = [line.split()[1] for line in f if line.startswith("VmHWM:")]
        print("peak_kib=" + kib[0], flush=True)

    atexit.register(peak)
    """
)
CHILD = PRELUDE + textwrap.dedent(
    """
    from ckpt.errors import CkptError
    from ckpt.sandbox.host.process import Host
    from ckpt.sandbox.wire.protocol import RestoreRequest
    h = Host("restored", sys.argv[2])
    try:
        h.restore(RestoreRequest(image=sys.argv[1]))
    except CkptError as exc:
        print(type(exc).__name__, exc, sep=": ")
        sys.exit(0)
    finally:
        h.server.close()
    print("restored")
    sys.exit(3)
    """
)
INSPECT_CHILD = PRELUDE + textwrap.dedent(
    """
    from ckpt.cli import main
    sys.argv = ["ckpt", "inspect", "statefile", sys.argv[1], "--verify"]
    main()
    """
)


def run_child(code: str, *args: str) -> tuple[int, str, int]:
    """(exit code, output, peak RSS in KiB) of ``python -c code args``; the child
    limits its own address space to 1 GiB and reports its peak RSS as it exits."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    res = subprocess.run(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        timeout=120,
        text=True,
    )
    peaks = re.findall(r"^peak_kib=(\d+)$", res.stdout, re.M)
    assert len(peaks) == 1, res.stdout
    return res.returncode, res.stdout, int(peaks[0])


def restore_in_child(img: Path, tmp_path: Path) -> tuple[int, str, int]:
    """(exit code, output, peak RSS in KiB) of a restore of ``img`` in a child process
    whose address space is limited to 1 GiB."""
    return run_child(CHILD.format(limit=AS_LIMIT), str(img), str(tmp_path / "c.sock"))


def test_the_untouched_image_restores(image: Path, tmp_path: Path, watchdog: None) -> None:
    forge(image, lambda runs, zeros: None)  # the forger itself changes nothing
    rc, out, _ = restore_in_child(image, tmp_path)
    assert rc == 3 and "restored" in out, out


@pytest.mark.parametrize("edit", EVERYWHERE + RESTORE_ONLY, ids=lambda f: f.__name__)
def test_restore_refuses_in_one_line_with_bounded_memory(
    image: Path, tmp_path: Path, edit: Callable, watchdog: None
) -> None:
    forge(image, edit)
    rc, out, peak_kib = restore_in_child(image, tmp_path)
    lines = [line for line in out.splitlines() if "PageMapError" in line]
    assert rc == 0 and len(lines) == 1, out
    assert "Traceback" not in out
    assert peak_kib < AS_LIMIT // 1024
    print(f"{edit.__name__}: refused, peak RSS {peak_kib / 1024:.1f} MiB")


@pytest.mark.parametrize("edit", EVERYWHERE, ids=lambda f: f.__name__)
def test_inspect_verify_refuses(image: Path, edit: Callable, watchdog: None) -> None:
    from ckpt.cli import app

    forge(image, edit)
    res = CliRunner().invoke(app, ["inspect", "statefile", str(image), "--verify", "--json"])
    assert res.exit_code == 1, res.output
    report = json.loads(res.output)
    assert "error" in report["pages"] and "\n" not in report["pages"]["error"]
    assert report["integrity"]["ok"] is False
    with pytest.raises(PageMapError):
        statefile.open_image(image).open_pages()


@pytest.mark.parametrize("edit", RESTORE_ONLY, ids=lambda f: f.__name__)
def test_the_kernels_bounds_refuse_what_the_format_allows(image: Path, edit: Callable) -> None:
    forge(image, edit)
    loaded = statefile.open_image(image).open_pages(lazy=True)  # no kernel: within the cap
    loaded.close()
    with pytest.raises(PageMapError):
        statefile.open_image(image).open_pages(limit=63, frames=63)


def test_no_more_pages_than_the_kernel_has_frames(make_image) -> None:
    """Freed frames leave holes below the address space's end: the frame count bounds
    what may be recorded even where every page lies inside the address space."""
    from tests.statefile.conftest import sample_pages

    img = make_image("img", b"", sample_pages())  # 10 pages, indices up to 13
    statefile.open_image(img).open_pages(limit=14, frames=10).close()
    with pytest.raises(PageMapError, match="only 9 frames"):
        statefile.open_image(img).open_pages(limit=14, frames=9)
    with pytest.raises(PageMapError, match="outside"):
        statefile.open_image(img).open_pages(limit=13, frames=10)


def test_a_page_bomb_is_verified_by_inspect_in_bounded_memory(
    image: Path, tmp_path: Path, watchdog: None
) -> None:
    """3 GiB of declared, well-formed zero pages in a page file of about 100 KiB:
    inspect --verify checks every run without holding them; a restore refuses the
    map, as its kernel has 63 frames."""
    forge_bomb(image, 3072)
    assert (image / "pages.img").stat().st_size < 1 << 20
    rc, out, peak_kib = run_child(INSPECT_CHILD.format(limit=AS_LIMIT), str(image))
    assert rc == 0, out
    assert re.search(r"^verified\s+yes\s*$", out, re.M), out
    print(f"inspect --verify of the page bomb: peak RSS {peak_kib / 1024:.1f} MiB")
    rc, out, peak_kib = restore_in_child(image, tmp_path)
    assert rc == 0 and "PageMapError" in out and "only 63 frames" in out, out
    print(f"restore of the page bomb: refused, peak RSS {peak_kib / 1024:.1f} MiB")


def test_a_restore_parses_no_more_runs_than_its_kernel_has_frames(
    image: Path, tmp_path: Path, watchdog: None
) -> None:
    """Two million one-page zero runs (a 32 MiB map, valid within the format's cap):
    a restore whose kernel has 63 frames refuses on the header's counts, before it
    builds an object per run."""

    def many_runs(runs: list[list], zeros: list[list]) -> None:
        zeros.extend([64 + 2 * i, 1] for i in range(2_000_000))

    forge(image, many_runs)
    rc, out, peak_kib = restore_in_child(image, tmp_path)
    assert rc == 0 and "only 63 frames" in out, out
    assert peak_kib < 150 << 10, f"peak RSS {peak_kib} KiB: the runs were parsed"
    print(f"restore of 2M runs: refused, peak RSS {peak_kib / 1024:.1f} MiB")


@pytest.mark.parametrize("name", ["checkpoint.img", "pages.img", "pages_meta.img"])
def test_a_restore_refuses_a_fifo_at_once(
    image: Path, tmp_path: Path, name: str, watchdog: None
) -> None:
    """A FIFO in the image used to block the restoring sandbox in open(2) for good."""
    (image / name).unlink()
    os.mkfifo(image / name)
    rc, out, _ = restore_in_child(image, tmp_path)
    assert rc == 0 and "StatefileError" in out and "FIFO" in out and name in out, out


def test_a_child_cannot_exceed_the_limit() -> None:
    """The memory bound the restore tests rely on really holds in a child."""
    code = (
        f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({AS_LIMIT}, {AS_LIMIT}))\n"
        "try:\n    b = bytearray(2 << 30)\nexcept MemoryError:\n    print('bounded')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, text=True)
    assert out.stdout.strip() == "bounded"
