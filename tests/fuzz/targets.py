"""The fuzz targets: one input in, and the only acceptable outcomes are a value or a CkptError.

Each target is a plain function of ``bytes`` that raises ``Finding`` (with the cause
chained) for anything else: another exception type, a ``CkptError`` with no message, or
two engines loading the same bytes to different graphs.  A crash, a hang or an ASan
report is caught by whoever runs the target (libFuzzer through atheris in ``run.py``, a
sanitized process in ``replay.py``, the watchdog in ``test_replay.py``).  Nothing here
imports atheris, so the committed corpus replays anywhere.

Input layouts (so that mutations reach the decoders behind the checksums):

* ``state``: byte 0 picks the mode.  Even: bytes 1.. are a whole stream, frame and all,
  loaded as they are.  Odd: bytes 1.. are a payload; the target frames it (magic,
  version, CRC-32, length) before loading, so the CRC never stops a mutation.
* ``statefile``: ``u32 n1 | checkpoint.img (n1) | u32 n2 | pages_meta.img (n2) |
  pages.img (the rest)``, little-endian, lengths clamped to what is left.  The three
  files are written into a scratch image directory and read every way the reader offers.
"""

from __future__ import annotations

import atexit
import os
import shutil
import struct
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckpt import state, statefile
from ckpt.errors import CkptError
from ckpt.state import wire
from ckpt.statefile.format import CHECKPOINT_IMG, PAGES_IMG, PAGES_META_IMG

from .models import graph_equal, models

graph_diff = graph_equal.graph_diff
MODELS = models  # imported for its registrations: the classes the seed streams name

# Engines whose loads of the same bytes must agree.  typed and native implement one
# reader and must agree on hostile input too; reflect decodes some malformed compact
# rows differently by design (it reads every slot self-describing), so comparing it is
# opt-in: CKPT_FUZZ_DIFF=all.  CKPT_FUZZ_DIFF=off compares none.
_DIFF = os.environ.get("CKPT_FUZZ_DIFF", "")
DIFF_PAIRS = (
    set()
    if _DIFF == "off"
    else {("reflect", "typed"), ("reflect", "native"), ("typed", "native")}
    if _DIFF == "all"
    else {("typed", "native")}
)
# The engines the state target loads with: all by default; CKPT_FUZZ_ENGINES=native (a
# comma-separated list) focuses a run on some, e.g. on the C core, three times faster.
ENGINES = tuple(e for e in os.environ.get("CKPT_FUZZ_ENGINES", "").split(",") if e) or (
    state.ENGINES
)
if not set(ENGINES) <= set(state.ENGINES):
    raise SystemExit(f"CKPT_FUZZ_ENGINES={','.join(ENGINES)}: choose from {state.ENGINES}")
KEY = b"fuzz-key-0123456789abcdef-fuzz-key"  # the key the keyed seed images are sealed with
MAX_PAGES_READ = 64  # pages read back per input: enough for the seeds, bounded for a hostile one
_LEN = struct.Struct("<I")


class Finding(AssertionError):
    """An outcome other than a value or a CkptError: a bug to report with its input."""


def _expect_ckpt_error(what: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
    """Run ``fn``; (True, value) or (False, error) for a CkptError, Finding otherwise."""
    try:
        return True, fn()
    except CkptError as exc:
        if not str(exc):
            raise Finding(f"{what}: {type(exc).__name__} with an empty message") from exc
        return False, exc
    except Finding:
        raise
    except Exception as exc:
        raise Finding(f"{what}: {type(exc).__name__}: {exc}"[:500]) from exc


# -- state -------------------------------------------------------------------------


def state_frame(payload: bytes) -> bytes:
    """``payload`` behind a valid frame header (what the odd mode does)."""
    return wire._HEADER.pack(wire.MAGIC, wire.FORMAT_VERSION, zlib.crc32(payload), len(payload)) + (
        payload
    )


def state_input(data: bytes) -> bytes:
    """The stream a ``state`` input stands for (see the module docstring)."""
    if not data:
        return b""
    return state_frame(data[1:]) if data[0] & 1 else data[1:]


def state_target(data: bytes, engines: tuple[str, ...] | None = None) -> None:
    """Load with every engine and inspect; engines that both succeed must agree."""
    stream = state_input(data)
    loaded: list[tuple[str, Any]] = []
    for engine in engines or ENGINES:
        ok, value = _expect_ckpt_error(
            f"state.loads(engine={engine!r})", lambda e=engine: state.loads(stream, engine=e)
        )
        if ok:
            loaded.append((engine, value))
    _expect_ckpt_error("state.inspect_stream", lambda: _inspect(stream))
    for i, (engine_a, a) in enumerate(loaded):
        for engine_b, b in loaded[i + 1 :]:
            if (engine_a, engine_b) not in DIFF_PAIRS:
                continue
            try:
                diff = graph_diff(a, b)
            except RecursionError:  # the comparison's limit, not the loader's
                continue
            if diff is not None:
                raise Finding(f"{engine_a} and {engine_b} load the same bytes differently: {diff}")


def _inspect(stream: bytes) -> None:
    view = state.inspect_stream(stream)
    view.verify()
    for _ in view.objects():
        pass
    view.root_value  # noqa: B018  (a property that must not raise)


# -- statefile ---------------------------------------------------------------------


def statefile_pack(checkpoint: bytes, pages_meta: bytes, pages: bytes) -> bytes:
    """One ``statefile`` input from an image's three files."""
    return _LEN.pack(len(checkpoint)) + checkpoint + _LEN.pack(len(pages_meta)) + pages_meta + pages


def statefile_unpack(data: bytes) -> tuple[bytes, bytes, bytes]:
    """The three files a ``statefile`` input stands for (lengths clamped)."""
    parts = []
    pos = 0
    for _ in range(2):
        (n,) = _LEN.unpack(data[pos : pos + 4].ljust(4, b"\0"))
        pos += 4
        parts.append(data[pos : pos + n])
        pos += len(parts[-1])
    return parts[0], parts[1], data[pos:]


_scratch: Path | None = None


def _image_dir() -> Path:
    """One scratch image directory per process, in memory where there is /dev/shm."""
    global _scratch
    if _scratch is None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        _scratch = Path(tempfile.mkdtemp(prefix="ckpt-fuzz-image-", dir=base))
        atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
    return _scratch


def statefile_target(data: bytes) -> None:
    """Open the image verified (no key, the key, unverified), read stream and pages."""
    checkpoint, pages_meta, pages = statefile_unpack(data)
    d = _image_dir()
    (d / CHECKPOINT_IMG).write_bytes(checkpoint)
    (d / PAGES_META_IMG).write_bytes(pages_meta)
    (d / PAGES_IMG).write_bytes(pages)
    for what, opener in (
        ("open_image(key=None)", lambda: statefile.open_image(d)),
        ("open_image(key=KEY)", lambda: statefile.open_image(d, key=KEY)),
        ("open_image_unverified", lambda: statefile.open_image_unverified(d)),
    ):
        ok, image = _expect_ckpt_error(what, opener)
        if ok:
            _read_image(what, image)
    _expect_ckpt_error("inspect_image", lambda: statefile.inspect_image(d, objects=3))
    _expect_ckpt_error("inspect_image(verify)", lambda: statefile.inspect_image(d, verify=True))


def _read_image(what: str, image: Any) -> None:
    image.metadata  # noqa: B018  (a property that must not raise)
    _expect_ckpt_error(f"{what}.read_state", image.read_state)
    _expect_ckpt_error(f"{what}.state_reader", lambda: _partial_read(image))
    ok, pages = _expect_ckpt_error(f"{what}.open_pages", image.open_pages)
    if ok:
        with pages:
            _expect_ckpt_error(f"{what}.read_page", lambda: _read_pages(pages))


def _partial_read(image: Any) -> None:
    with image.state_reader() as reader:
        reader.read(100)
        reader.read(5000)
        reader.read()


def _read_pages(pages: Any) -> None:
    for n, index in enumerate(pages.indices):
        if n >= MAX_PAGES_READ:
            break
        page = pages.read_page(index)
        if len(page) != statefile.PAGE_SIZE:
            raise Finding(f"page {index} is {len(page)} bytes")
    for _ in pages.stored_runs():
        pass


TARGETS: dict[str, Callable[[bytes], None]] = {
    "state": state_target,
    "statefile": statefile_target,
}
