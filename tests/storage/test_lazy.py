"""Reading an image's file by chunk on demand (ckpt/storage/lazy.py) and the local chunk
cache (ckpt/storage/chunkcache.py), against the real S3 server: ranges across chunk
boundaries, each chunk fetched once, read-ahead, the cache reused and never trusted."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from ckpt.storage.chunkcache import ChunkCache
from ckpt.storage.errors import ChunkIntegrityError, ObjectMissing
from ckpt.storage.lazy import ChunkSource
from ckpt.storage.repository import Repository
from tests.storage.test_repository import CHUNK, payload, upload

SIZE = 5 * CHUNK + 777


def _image(url: str) -> tuple[Repository, bytes]:
    repo = Repository.open(url)
    data = payload(SIZE, 7)
    upload(repo, "img", {"pages.img": data, "checkpoint.img": payload(1000, 8)})
    return repo, data


@pytest.mark.slow
def test_ranges_across_chunks_each_chunk_fetched_once(s3_url: str, tmp_path: Path) -> None:
    repo, data = _image(s3_url)
    source = ChunkSource(repo.open_image("img"), ChunkCache(tmp_path / "cache"), readahead=2)
    f = source.open("pages.img")
    assert f.size == SIZE
    rng = random.Random(1)
    cases = [(0, 1), (CHUNK - 3, 7), (2 * CHUNK + 5, CHUNK + 100), (SIZE - 10, 100), (0, SIZE)]
    cases += [(rng.randrange(SIZE), rng.randrange(2 * CHUNK)) for _ in range(20)]
    for offset, length in cases:
        assert f.pread(length, offset) == data[offset : offset + length], (offset, length)
    # Many threads asking for the same chunks at once: each chunk is fetched once.
    threads = [threading.Thread(target=f.pread, args=(SIZE, 0)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    f.close()
    source.release()
    assert source.stats.from_store == len(repo.read_manifest("img").files["pages.img"].chunks)
    assert source.stats.from_cache == 0


@pytest.mark.slow
def test_read_ahead_fetches_the_next_chunks(s3_url: str, tmp_path: Path) -> None:
    repo, data = _image(s3_url)
    cache = ChunkCache(tmp_path / "cache")
    source = ChunkSource(repo.open_image("img"), cache, readahead=3)
    f = source.open("pages.img")
    assert f.pread(10, 0) == data[:10]
    refs = repo.read_manifest("img").files["pages.img"].chunks
    from tests.sandbox.waiting import wait_for

    # Chunks 1..3 arrive without being read: the read-ahead put them in the cache.
    wait_for(lambda: all(cache.get(r) is not None for r in refs[1:4]), "the read-ahead")
    assert all(cache.get(r) is None for r in refs[4:])
    f.close()
    source.release()


@pytest.mark.slow
def test_cache_is_reused_and_a_bad_cache_file_is_refetched(s3_url: str, tmp_path: Path) -> None:
    repo, data = _image(s3_url)
    cache = ChunkCache(tmp_path / "cache")
    first = ChunkSource(repo.open_image("img"), cache, readahead=0)
    with_file = first.open("pages.img")
    assert with_file.pread(SIZE, 0) == data
    with_file.close()
    first.release()
    refs = repo.read_manifest("img").files["pages.img"].chunks
    # Damage one cached chunk (same length, one bit): it is refused, removed, refetched.
    bad = tmp_path / "cache" / refs[1].hex[:2] / refs[1].hex
    raw = bytearray(bad.read_bytes())
    raw[10] ^= 1
    bad.write_bytes(bytes(raw))
    second = ChunkSource(repo.open_image("img"), cache, readahead=0)
    f = second.open("pages.img")
    assert f.pread(SIZE, 0) == data
    assert (second.stats.from_store, second.stats.from_cache) == (1, len(refs) - 1)
    assert bad.read_bytes() != bytes(raw)  # replaced by the store's good copy
    f.close()
    second.release()


@pytest.mark.slow
def test_tampered_or_missing_chunk_is_refused_and_never_cached(s3_url: str, tmp_path: Path) -> None:
    repo, data = _image(s3_url)
    refs = repo.read_manifest("img").files["pages.img"].chunks
    key = repo.chunk_key(refs[2].digest)
    raw = bytearray(repo.store.get(key))
    raw[5] ^= 1
    repo.store.put(key, bytes(raw))
    repo.store.delete(repo.chunk_key(refs[4].digest))
    cache = ChunkCache(tmp_path / "cache")
    source = ChunkSource(repo.open_image("img"), cache, readahead=0)
    f = source.open("pages.img")
    assert f.pread(CHUNK, 0) == data[:CHUNK]
    with pytest.raises(ChunkIntegrityError, match="does not match its digest"):
        f.pread(10, 2 * CHUNK)
    with pytest.raises(ObjectMissing, match="missing from the store"):
        f.pread(10, 4 * CHUNK)
    assert cache.get(refs[2]) is None
    assert not (tmp_path / "cache" / refs[2].hex[:2] / refs[2].hex).exists()
    f.close()
    source.release()


def test_trim_removes_the_least_recently_read(tmp_path: Path) -> None:
    import hashlib
    import os

    from ckpt.storage.manifest import ChunkRef

    cache = ChunkCache(tmp_path, limit=2500)
    refs = []
    for i in range(4):
        blob = bytes([i]) * 1000
        ref = ChunkRef(hashlib.sha256(blob).digest(), len(blob))
        cache.put(ref, blob)
        path = tmp_path / ref.hex[:2] / ref.hex
        os.utime(path, (1000 + i, 1000 + i))
        refs.append(ref)
    assert cache.get(refs[0]) is not None  # read now: the most recent
    assert cache.trim() == 2
    assert [cache.get(r) is not None for r in refs] == [True, False, False, True]
