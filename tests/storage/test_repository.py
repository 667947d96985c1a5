"""Images as content-addressed chunks: round trip, dedup, atomic visibility, integrity,
ls and rm, against the real S3 server (and a local directory where it says so)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ckpt.storage.errors import (
    ChunkIntegrityError,
    ImageExists,
    ImageInUse,
    ObjectMissing,
    StorageError,
)
from ckpt.storage.manifest import ManifestError
from ckpt.storage.repository import CHUNKS, Repository

KEY = b"k" * 32
CHUNK = 512 << 10


def payload(size: int, seed: int = 0) -> bytes:
    """Deterministic bytes that do not repeat within a chunk."""
    import random

    return random.Random(seed).randbytes(size)


def upload(repo: Repository, name: str, files: dict[str, bytes], **options: object):
    with repo.upload(name, sandbox_id="sb-1", **options) as up:  # type: ignore[arg-type]
        for filename, data in files.items():
            up.add_file(filename, data)
        up.commit()
    return up


def test_round_trip(repo_url: str, tmp_path: Path) -> None:
    repo = Repository.open(repo_url)
    files = {
        "checkpoint.img": payload(100_000, 1),
        "pages.img": payload(3 * CHUNK + 12345, 2),
        "empty.img": b"",
    }
    up = upload(repo, "img1", files)
    assert up.stats.bytes_total == sum(map(len, files.values()))
    reader = repo.open_image("img1")
    for name, data in files.items():
        assert reader.read_file(name) == data
    pages = files["pages.img"]
    for offset, length in [(0, 1), (CHUNK - 3, 7), (CHUNK * 2 + 5, CHUNK + 100), (0, len(pages))]:
        assert reader.read_range("pages.img", offset, length) == pages[offset : offset + length]
    reader.download(tmp_path / "out")
    assert (tmp_path / "out" / "pages.img").read_bytes() == pages
    assert reader.manifest.sandbox_id == "sb-1" and reader.manifest.size == len(pages) + 100_000


@pytest.mark.slow
def test_streamed_writes_in_odd_pieces(s3_repo: Repository) -> None:
    data = payload(2 * CHUNK + 777, 3)
    with s3_repo.upload("img", sandbox_id="s") as up:
        out = up.open("pages.img")
        for start in range(0, len(data), 100_003):
            out.write(data[start : start + 100_003])
        out.close()
        up.commit()
    assert s3_repo.open_image("img").read_file("pages.img") == data
    assert [r.size for r in up.manifest.files["pages.img"].chunks] == [CHUNK, CHUNK, 777]


@pytest.mark.slow
def test_dedup_second_upload_sends_no_chunk_bytes(s3_repo: Repository) -> None:
    files = {"pages.img": payload(8 * CHUNK, 4), "checkpoint.img": payload(5000, 5)}
    first = upload(s3_repo, "first", files)
    assert first.stats.bytes_uploaded == first.stats.bytes_total
    second = upload(s3_repo, "second", files, parent="first")
    assert second.stats.bytes_total == first.stats.bytes_total
    assert second.stats.bytes_uploaded == 0
    assert second.manifest.parent_id == first.manifest.image_id
    changed = bytearray(files["pages.img"])
    changed[3 * CHUNK + 10] ^= 0xFF  # one page of one chunk changed
    third = upload(s3_repo, "third", {**files, "pages.img": bytes(changed)})
    assert third.stats.bytes_uploaded == CHUNK


@pytest.mark.slow
def test_repeated_chunks_within_an_image_are_sent_once(s3_repo: Repository) -> None:
    up = upload(s3_repo, "zeros", {"pages.img": bytes(6 * CHUNK)})
    assert up.stats.chunks_uploaded == 1 and up.stats.bytes_uploaded == CHUNK


@pytest.mark.slow
def test_existing_image_is_refused_and_force_replaces(s3_repo: Repository) -> None:
    upload(s3_repo, "img", {"a": b"old"})
    with pytest.raises(ImageExists) as err:
        upload(s3_repo, "img", {"a": b"new"})
    assert "--force" in str(err.value)
    assert s3_repo.open_image("img").read_file("a") == b"old"
    upload(s3_repo, "img", {"a": b"new"}, force=True)
    assert s3_repo.open_image("img").read_file("a") == b"new"


@pytest.mark.slow
def test_conditional_create_refuses_a_manifest_written_meanwhile(s3_repo: Repository) -> None:
    """Two uploads of one name race: the second to commit must not overwrite the first
    (the pre-check passed for both; only the conditional create can tell)."""
    slow = s3_repo.upload("img", sandbox_id="slow")
    slow.start()
    try:
        slow.add_file("a", b"slow")
        upload(s3_repo, "img", {"a": b"fast"})
        with pytest.raises(ImageExists):
            slow.commit()
    finally:
        slow.abort()
    assert s3_repo.open_image("img").read_file("a") == b"fast"


KILLED_UPLOAD = """
import sys, time
from ckpt.storage.repository import Repository
repo = Repository.open(sys.argv[1])
up = repo.upload("victim", sandbox_id="s")
up.start()
out = up.open("pages.img")
out.write(bytes(range(256)) * 4096 * 6)  # 6 MiB: several chunks
print("written", flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_killed_upload_leaves_no_image(s3_url: str) -> None:
    repo = Repository.open(s3_url)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(KILLED_UPLOAD), s3_url],
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"written\n"
        deadline = time.monotonic() + 20
        while not any(True for _ in repo.store.list(CHUNKS)):
            assert time.monotonic() < deadline, "the upload stored no chunk"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert any(True for _ in repo.store.list(CHUNKS))  # it was mid-way...
    assert repo.images() == []  # ...and nothing is visible
    with pytest.raises(ObjectMissing):
        repo.open_image("victim")


@pytest.mark.slow
def test_tampered_chunk_is_refused_with_a_key(s3_url: str) -> None:
    repo = Repository.open(s3_url, KEY)
    data = payload(2 * CHUNK, 6)
    up = upload(repo, "img", {"pages.img": data})
    ref = up.manifest.files["pages.img"].chunks[1]
    key = repo.chunk_key(ref.digest)
    evil = bytearray(repo.store.get(key))
    evil[100] ^= 1
    repo.store.put(key, bytes(evil))
    reader = repo.open_image("img")
    assert reader.read_range("pages.img", 0, 10) == data[:10]  # chunk 0 is intact
    with pytest.raises(ChunkIntegrityError) as err:
        reader.read_file("pages.img")
    assert "\n" not in str(err.value) and "tampered" in str(err.value)
    with pytest.raises(ChunkIntegrityError):
        reader.read_range("pages.img", CHUNK + 5, 1)


@pytest.mark.slow
def test_edited_manifest_is_refused_with_a_key(s3_url: str) -> None:
    repo = Repository.open(s3_url, KEY)
    upload(repo, "img", {"a": b"data"})
    mkey = repo.manifest_key("img")
    raw = bytearray(repo.store.get(mkey))
    raw[20] ^= 1
    repo.store.put(mkey, bytes(raw))
    with pytest.raises(ChunkIntegrityError):
        repo.open_image("img")
    with pytest.raises(ManifestError):  # sealed: refused without its key too
        Repository.open(s3_url).open_image("img")
    with pytest.raises(ChunkIntegrityError):  # the wrong key
        Repository.open(s3_url, b"w" * 32).open_image("img")


@pytest.mark.slow
def test_deleted_chunk_is_one_line(s3_repo: Repository) -> None:
    up = upload(s3_repo, "img", {"pages.img": payload(CHUNK + 1, 7)})
    s3_repo.store.delete(s3_repo.chunk_key(up.manifest.files["pages.img"].chunks[0].digest))
    with pytest.raises(ObjectMissing) as err:
        s3_repo.open_image("img").read_file("pages.img")
    assert "missing" in str(err.value) and "\n" not in str(err.value)


def test_ls_sizes_unique_bytes_and_rm(repo_url: str) -> None:
    repo = Repository.open(repo_url)
    shared = payload(4 * CHUNK, 8)
    upload(repo, "a", {"pages.img": shared + payload(CHUNK, 9)})
    upload(repo, "b", {"pages.img": shared + payload(2 * CHUNK, 10)}, parent="a")
    infos = {i.name: i for i in repo.images()}
    assert set(infos) == {"a", "b"}
    assert infos["a"].size == 5 * CHUNK and infos["a"].unique == CHUNK
    assert infos["b"].size == 6 * CHUNK and infos["b"].unique == 2 * CHUNK
    assert infos["b"].parent == "a" and infos["b"].sandbox_id == "sb-1"
    assert infos["a"].created <= infos["b"].created
    with pytest.raises(ImageInUse, match="is the parent of b"):
        repo.remove("a")  # b would no longer restore
    assert repo.children("a") == ["b"] and repo.children("b") == []
    repo.remove("a", force=True)
    assert [i.name for i in repo.images()] == ["b"]
    assert repo.images()[0].unique == 6 * CHUNK
    with pytest.raises(ObjectMissing):
        repo.remove("a")


def test_upload_a_local_image_directory_and_download_it(repo_url: str, tmp_path: Path) -> None:
    source = tmp_path / "image"
    source.mkdir()
    files = {"checkpoint.img": payload(7000, 11), "pages.img": payload(CHUNK + 9, 12)}
    for name, data in files.items():
        (source / name).write_bytes(data)
    (source / "link").symlink_to(source / "pages.img")  # not a file of the image
    repo = Repository.open(repo_url)
    up = repo.upload_directory("img", source, sandbox_id="sb")
    assert set(up.manifest.files) == set(files)
    repo.open_image("img").download(tmp_path / "back")
    for name, data in files.items():
        assert (tmp_path / "back" / name).read_bytes() == data
    with pytest.raises(StorageError):  # never over files already there
        repo.open_image("img").download(tmp_path / "back")


@pytest.mark.slow
def test_a_manifest_copied_to_another_name_is_refused(s3_url: str) -> None:
    """A sealed manifest copied under another name still passes its HMAC: the name it
    carries must match where it was found."""
    repo = Repository.open(s3_url, KEY)
    upload(repo, "real", {"a": b"data"})
    repo.store.put(repo.manifest_key("copy"), repo.store.get(repo.manifest_key("real")))
    with pytest.raises(StorageError) as err:
        repo.open_image("copy")
    assert "names image 'real'" in str(err.value)
