"""Prune removes unreferenced, old chunks, and never one a live upload counts on."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from ckpt.storage import lease as leases
from ckpt.storage.errors import StoreBusy
from ckpt.storage.manifest import ManifestError
from ckpt.storage.repository import CHUNKS, Repository

from .test_repository import CHUNK, payload, upload


def chunk_keys(repo: Repository) -> set[str]:
    return {info.key for info in repo.store.list(CHUNKS)}


def test_prune_keeps_referenced_and_young_chunks(repo_url: str) -> None:
    repo = Repository.open(repo_url)
    upload(repo, "keep", {"pages.img": payload(2 * CHUNK, 1)})
    upload(repo, "gone", {"pages.img": payload(3 * CHUNK, 2)})
    kept = chunk_keys(repo)
    assert len(kept) == 5
    repo.remove("gone")
    young = repo.prune(grace=3600)
    assert young.removed_chunks == 0 and young.kept_young == 3 and young.kept_referenced == 2
    assert chunk_keys(repo) == kept
    repo.store.put(CHUNKS + "ab/not-a-chunk", b"x")  # not a name ckpt writes
    repo.store.put(CHUNKS + "ab/abcd", b"x")
    old = repo.prune(grace=0)
    assert old.removed_chunks == 3 and old.removed_bytes == 3 * CHUNK
    assert repo.store.head(CHUNKS + "ab/abcd") is not None
    repo.store.delete(CHUNKS + "ab/not-a-chunk")
    repo.store.delete(CHUNKS + "ab/abcd")
    assert len(chunk_keys(repo)) == 2
    assert repo.open_image("keep").read_file("pages.img") == payload(2 * CHUNK, 1)


@pytest.mark.slow
def test_prune_never_removes_a_chunk_a_live_upload_reuses(s3_repo: Repository) -> None:
    """The upload finds the chunks of a removed image present and does not send them;
    a prune meanwhile must not remove them (it refuses while the upload's lease lives),
    and after the commit they are referenced."""
    data = payload(4 * CHUNK, 3)
    upload(s3_repo, "old", {"pages.img": data})
    s3_repo.remove("old")  # its chunks are now unreferenced, and grace=0 makes them old
    with s3_repo.upload("new", sandbox_id="s") as up:
        up.add_file("pages.img", data)
        for writer in up._files.values():
            for future in writer.futures:
                future.result()
        assert up.stats.bytes_uploaded == 0  # it counts on the old chunks
        with pytest.raises(StoreBusy) as err:
            s3_repo.prune(grace=0)
        assert "upload is in progress" in str(err.value)
        up.commit()
    result = s3_repo.prune(grace=0)
    assert result.removed_chunks == 0 and result.kept_referenced == 4
    assert s3_repo.open_image("new").read_file("pages.img") == data


@pytest.mark.slow
def test_upload_waits_for_a_live_prune_then_gives_up(s3_repo: Repository) -> None:
    held = leases.Lease(s3_repo.store, leases.PRUNE, ttl=60)
    held.acquire(excludes=leases.UPLOAD)
    try:
        with pytest.raises(StoreBusy) as err:
            s3_repo.upload("img", sandbox_id="s", wait=1.0).start()
        assert "prune is in progress" in str(err.value)
    finally:
        held.release()
    upload(s3_repo, "img", {"a": b"x"})  # the prune is over: uploads proceed
    assert [i.name for i in s3_repo.images()] == ["img"]
    assert not list(s3_repo.store.list(leases.PREFIX))  # both leases are gone


@pytest.mark.slow
def test_a_dead_upload_lease_expires_and_prune_removes_its_chunks(s3_url: str) -> None:
    repo = Repository.open(s3_url, lease_ttl=1.0)
    up = repo.upload("dead", sandbox_id="s")
    up.start()
    up.add_file("pages.img", payload(2 * CHUNK, 4))
    for future in up._files["pages.img"].futures:
        future.result()
    up._lease._stop.set()  # as if its process were killed: no more renewals, no release
    up._pool.shutdown()
    with pytest.raises(StoreBusy):
        repo.prune(grace=0)
    time.sleep(2.5)  # the store's clock moves past the lease's ttl
    result = repo.prune(grace=0)
    assert result.removed_leases == 1 and result.removed_chunks == 2
    assert chunk_keys(repo) == set()
    with pytest.raises(StoreBusy):  # the stalled upload must not publish now
        up.commit()
    assert repo.images() == []


@pytest.mark.slow
def test_prune_refuses_when_a_manifest_cannot_be_read(s3_repo: Repository) -> None:
    """It cannot know what an unreadable manifest references, so it removes nothing."""
    upload(s3_repo, "a", {"pages.img": payload(CHUNK, 5)})
    upload(s3_repo, "b", {"pages.img": payload(CHUNK, 6)})
    s3_repo.store.put(s3_repo.manifest_key("b"), b"CKPTMANI edited by hand")
    before = chunk_keys(s3_repo)
    with pytest.raises(ManifestError) as err:
        s3_repo.prune(grace=0)
    assert "\n" not in str(err.value)
    assert chunk_keys(s3_repo) == before
    assert not list(s3_repo.store.list(leases.PREFIX))


def _race(repo: Repository, name: str, data: bytes) -> tuple[bool, bool]:
    """One upload and one prune started together; whether each went through."""
    barrier = threading.Barrier(2, timeout=30)
    done = {"upload": False, "prune": False}

    def do_upload() -> None:
        barrier.wait()
        with contextlib.suppress(StoreBusy):
            upload(repo, name, {"pages.img": data}, wait=0.0)
            done["upload"] = True

    def do_prune() -> None:
        barrier.wait()
        with contextlib.suppress(StoreBusy):
            repo.prune(grace=0)
            done["prune"] = True

    threads = [threading.Thread(target=do_upload), threading.Thread(target=do_prune)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return done["upload"], done["prune"]


@pytest.mark.slow
def test_prune_racing_uploads_never_breaks_a_published_image(s3_repo: Repository) -> None:
    """Uploads that reuse unreferenced chunks and prunes start together, round after
    round: either may be refused (StoreBusy), but an image that was published always
    reads back whole."""
    data = payload(64 * CHUNK, 7)
    for round_ in range(4):
        upload(s3_repo, "old", {"pages.img": data})
        s3_repo.remove("old")
        uploaded, _ = _race(s3_repo, "new", data)
        if uploaded:
            assert s3_repo.open_image("new").read_file("pages.img") == data, round_
            s3_repo.remove("new")
    assert not list(s3_repo.store.list(leases.PREFIX))
