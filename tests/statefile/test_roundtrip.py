"""Round trips through the image: stream and pages, every compression and key setting."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ckpt import state, statefile
from ckpt.errors import StatefileError
from ckpt.statefile import PAGE_SIZE
from tests.statefile.conftest import KEY, sample_pages

SETTINGS = [
    pytest.param({"compression": "zstd"}, id="zstd"),
    pytest.param({"compression": "none"}, id="none"),
    pytest.param({"compression": "zstd", "key": KEY}, id="zstd-key"),
    pytest.param({"compression": "none", "key": KEY}, id="none-key"),
    pytest.param({"compression": "zstd", "level": 9}, id="zstd-9"),
]


@state.savable
@dataclass(eq=False)
class SfFile:
    path: str
    data: bytes
    owner: SfTask | None = None


@state.savable
@dataclass(eq=False)
class SfTask:
    tid: int
    name: str
    files: list[SfFile]
    parent: SfTask | None = None


def build_graph(n: int) -> SfTask:
    root = SfTask(1, "init", [])
    for i in range(n):
        t = SfTask(i + 2, f"task-{i}", [], root)
        t.files = [SfFile(f"/tmp/f{i}-{j}", os.urandom(16) * 4, t) for j in range(3)]
        root.files.extend(t.files)
    return root


@pytest.mark.parametrize("opts", SETTINGS)
@pytest.mark.parametrize("size", [0, 1, 4096, 3 * 512 + 7])
def test_stream_round_trip(make_image, opts, size: int) -> None:
    stream = os.urandom(size // 2) + b"z" * (size - size // 2)
    # A small chunk size makes several chunks out of a small stream.
    target = make_image("img", stream, sample_pages(), chunk_size=512, **opts)
    image = statefile.open_image(target, key=opts.get("key"))
    assert image.read_state() == stream
    assert image.state_reader().read() == stream
    assert image.header.stream_len == size
    assert image.header.chunk_count == -(-size // 512)


@pytest.mark.parametrize("opts", SETTINGS)
def test_pages_round_trip(make_image, opts) -> None:
    pages = sample_pages()
    target = make_image("img", b"s", pages, **opts)
    image = statefile.open_image(target, key=opts.get("key"))
    for lazy in (False, True):
        loaded = image.open_pages(lazy=lazy)
        assert list(loaded.indices) == [i for i, _ in pages]
        for i, data in pages:
            assert loaded.read_page(i) == data
        loaded.wait()
    s = loaded.summary
    assert (s.scanned, s.zero, s.stored) == (10, 3, 7)
    assert (s.stored_runs, s.zero_runs) == (3, 2)


@pytest.mark.parametrize("engine", state.ENGINES)
@pytest.mark.parametrize("opts", SETTINGS[:3])
def test_state_graph_round_trip(tmp_path: Path, engine: str, opts) -> None:
    root = build_graph(200)
    with statefile.ImageWriter(tmp_path / "img", chunk_size=4096, **opts) as img:
        result = state.save(root, img.state_file, engine=engine)
        img.note_save(result, engine)
    image = statefile.open_image(tmp_path / "img", key=opts.get("key"))
    assert image.metadata["engine"] == engine
    assert image.metadata["objects"] == result.objects
    assert image.header.chunk_count > 1
    for other in state.ENGINES:  # one wire format: either engine loads it
        back = state.load(image.state_reader(), engine=other)
        assert [(f.path, f.data, f.owner.tid) for f in back.files] == [
            (f.path, f.data, f.owner.tid) for f in root.files
        ]
        assert all(f.owner.parent is back for f in back.files)
        assert all(any(g is f for g in f.owner.files) for f in back.files)  # identity kept
    assert state.loads(image.read_state(), engine=engine).files[5].path == root.files[5].path


def test_metadata_defaults_and_caller_keys(tmp_path: Path) -> None:
    with statefile.ImageWriter(tmp_path / "img", metadata={"workload": "http"}) as img:
        img.metadata.update(engine="typed", custom={"a": [1, 2]})
        img.state_file.write(b"x" * 10)
        img.write_pages(sample_pages())
    md = statefile.open_image(tmp_path / "img").metadata
    assert md["workload"] == "http"
    assert md["engine"] == "typed"
    assert md["custom"] == {"a": [1, 2]}
    assert md["compression"] == "zstd" and md["level"] == statefile.DEFAULT_LEVEL
    assert md["created"].endswith("+00:00")
    assert md["ckpt_version"] and md["python_version"]
    assert md["pages"]["scanned"] == 10 and md["pages"]["zero"] == 3
    assert md["state_bytes"] == 10
    assert md["_format"]["integrity"] == "crc32"


def test_reserved_metadata_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StatefileError, match="reserved"):  # noqa: SIM117
        with statefile.ImageWriter(tmp_path / "img") as img:
            img.metadata["_mine"] = 1
    assert not (tmp_path / "img").exists()
    assert list(tmp_path.iterdir()) == []


def test_metadata_must_be_json(tmp_path: Path) -> None:
    with pytest.raises(StatefileError, match="JSON"):  # noqa: SIM117
        with statefile.ImageWriter(tmp_path / "img") as img:
            img.metadata["when"] = object()
    assert list(tmp_path.iterdir()) == []


def test_stats_json(tmp_path: Path) -> None:
    with statefile.ImageWriter(tmp_path / "img") as img:
        img.write_stats({"types": {"Task": {"count": 3}}})
    image = statefile.open_image(tmp_path / "img")
    assert image.stats() == {"types": {"Task": {"count": 3}}}
    assert json.loads((tmp_path / "img" / "stats.json").read_text())["types"]["Task"]["count"] == 3


def test_open_by_checkpoint_img_path(make_image) -> None:
    target = make_image("img", b"hello", sample_pages())
    image = statefile.open_image(target / "checkpoint.img")
    assert image.read_state() == b"hello"
    assert image.open_pages().read_page(0) == sample_pages()[0][1]


def test_compression_shrinks_compressible_stream(make_image) -> None:
    stream = b"all work and no play " * 20000
    z = make_image("z", stream, compression="zstd")
    n = make_image("n", stream, compression="none")
    assert (z / "checkpoint.img").stat().st_size < len(stream) // 10
    assert (n / "checkpoint.img").stat().st_size > len(stream)


def test_incompressible_chunks_are_stored_raw(make_image) -> None:
    stream = os.urandom(100_000)
    z = make_image("z", stream, compression="zstd")
    # Stored raw: no zstd expansion beyond the framing.
    assert (z / "checkpoint.img").stat().st_size < len(stream) + 1024


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        ({"compression": "lz4"}, "unknown compression"),
        ({"compression": "zstd", "level": 99}, "out of range"),
        ({"key": b"short"}, "at least 16"),
        ({"chunk_size": 0}, "chunk size"),
    ],
)
def test_bad_writer_options(tmp_path: Path, opts, match: str) -> None:
    with pytest.raises(StatefileError, match=match):
        statefile.ImageWriter(tmp_path / "img", **opts)


def test_bad_pages_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StatefileError, match="ascending"):  # noqa: SIM117
        with statefile.ImageWriter(tmp_path / "a") as img:
            img.write_pages([(3, bytes(PAGE_SIZE)), (2, bytes(PAGE_SIZE))])
    with pytest.raises(StatefileError, match="not 4096"):  # noqa: SIM117
        with statefile.ImageWriter(tmp_path / "b") as img:
            img.write_pages([(0, b"short")])
    assert list(tmp_path.iterdir()) == []


def test_write_after_finish_is_refused(tmp_path: Path) -> None:
    with statefile.ImageWriter(tmp_path / "img") as img:
        f = img.state_file
        f.write(b"abc")
    with pytest.raises(StatefileError, match="finished"):
        f.write(b"more")


def test_caller_may_reuse_its_buffer_after_write(tmp_path: Path) -> None:
    buf = bytearray(b"a" * 3000)
    with statefile.ImageWriter(tmp_path / "img", chunk_size=1024) as img:
        img.state_file.write(buf)
        buf[:] = b"b" * 3000  # the writer must have copied what it kept
        img.state_file.write(memoryview(buf)[:10])
        buf[:10] = b"c" * 10
    assert statefile.open_image(tmp_path / "img").read_state() == b"a" * 3000 + b"b" * 10


# Forking while the chunk pool's threads run is the case under test (Python 3.12 and later
# warn about any fork of a multi-threaded process).
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_works_in_a_forked_child(tmp_path: Path) -> None:
    # The chunk pool is made in this process first; a forked child must get its own.
    with statefile.ImageWriter(tmp_path / "a") as img:
        img.state_file.write(os.urandom(3 << 20))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        code = 1
        try:
            with statefile.ImageWriter(tmp_path / "b") as img:
                img.state_file.write(b"child" * 500_000)
            code = (
                0 if statefile.open_image(tmp_path / "b").read_state() == b"child" * 500_000 else 2
            )
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:  # a child stuck on a dead pool: fail, don't hang
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung writing an image")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(done[1]) == 0


def test_state_reader_partial_reads(make_image) -> None:
    stream = os.urandom(2000) + b"r" * 3000
    target = make_image("img", stream, chunk_size=700)
    reader = statefile.open_image(target).state_reader()
    parts = []
    while part := reader.read(333):
        parts.append(part)
    assert b"".join(parts) == stream
    assert reader.read() == b""
    reader = statefile.open_image(target).state_reader()
    head = reader.read(1000)
    assert head + reader.read() == stream  # the rest after a partial read
    buf = bytearray(10)
    reader = statefile.open_image(target).state_reader()
    assert reader.readinto(buf) == 10 and bytes(buf) == stream[:10]
