"""What a repository must refuse to lose: a parent removed under a child's upload, a
forced image replaced twice at once, chunks pruned by a prune past its lease, images
past the first page of a listing, and the rest of a repository behind one bad
manifest; and what a key must refuse to read: a manifest stripped of its seal."""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from ckpt.storage import lease as leases
from ckpt.storage import repository as repository_mod
from ckpt.storage.errors import (
    ChunkIntegrityError,
    ImageChanged,
    ObjectMissing,
    StoreBusy,
    StoreUnreachable,
)
from ckpt.storage.manifest import (
    HEADER,
    ChunkRef,
    FileEntry,
    Manifest,
    ManifestError,
    decode,
    encode,
)
from ckpt.storage.repository import CHUNKS, Repository
from ckpt.storage.store import ObjectInfo, Store

from .test_repository import CHUNK, KEY, payload, upload


def _manifest(name: str, files: dict[str, FileEntry], **fields: Any) -> Manifest:
    return Manifest(
        image_id=hashlib.md5(name.encode()).hexdigest(),  # an id, not a hash
        name=name,
        sandbox_id="sb-crafted",
        created=fields.pop("created", time.time()),
        chunk_size=CHUNK,
        files=files,
        **fields,
    )


# A: a key reads only sealed manifests


def test_a_key_refuses_a_manifest_stripped_of_its_seal(s3_url: str) -> None:
    """Flipping bytes under the seal is caught by the HMAC; stripping the seal (flag
    cleared, tag dropped) must be caught too, or an unsealed manifest naming forged
    chunks reads back as the forged bytes."""
    repo = Repository.open(s3_url, KEY)
    upload(repo, "img", {"pages.img": payload(CHUNK, 1)})
    key = repo.manifest_key("img")
    sealed = repo.store.get(key)
    magic, version, _, length = HEADER.unpack_from(sealed)
    stripped = HEADER.pack(magic, version, 0, length) + sealed[HEADER.size : HEADER.size + length]
    with pytest.raises(ChunkIntegrityError, match="not sealed"):
        decode(stripped, KEY, "img")
    repo.store.put(key, stripped)
    with pytest.raises(ChunkIntegrityError, match="not sealed"):
        repo.open_image("img")
    # The attack itself: forged chunks, named by an unsealed manifest.
    forged = b"forged " * 1000
    ref = ChunkRef(hashlib.sha256(forged).digest(), len(forged))
    repo.store.put(repo.chunk_key(ref.digest), forged)
    entry = FileEntry(size=len(forged), chunks=[ref])
    repo.store.put(key, encode(_manifest("img", {"pages.img": entry}), None))
    with pytest.raises(ChunkIntegrityError, match="not sealed"):
        repo.open_image("img").read_file("pages.img")


# 2: image rm against a child's upload


def test_rm_is_refused_while_an_upload_is_live(s3_url: str) -> None:
    """An rm takes a prune's lease, so it cannot remove the parent a live upload
    names (that upload found the parent and is about to commit a child of it)."""
    repo = Repository.open(s3_url, KEY)
    upload(repo, "p", {"pages.img": payload(2 * CHUNK, 2)})
    with repo.upload("c", sandbox_id="sb-1", parent="p") as up:
        up.add_file("pages.img", payload(CHUNK, 3))
        with pytest.raises(StoreBusy, match="upload is in progress") as err:
            repo.remove("p", force=True)
        assert "\n" not in str(err.value)
        up.commit()
    assert repo.store.head(repo.manifest_key("p")) is not None
    reader = repo.open_image("c")
    assert reader.manifest.parent == "p"
    assert repo.open_image("p").read_file("pages.img") == payload(2 * CHUNK, 2)
    assert not list(repo.store.list(leases.PREFIX))  # every lease released


def test_a_commit_rechecks_its_parent(s3_url: str) -> None:
    """A parent removed behind the lease (by hand, or by an rm that took none) fails
    the child's commit: no child is published whose chain is broken."""
    repo = Repository.open(s3_url, KEY)
    upload(repo, "p", {"pages.img": payload(CHUNK, 4)})
    with repo.upload("c", sandbox_id="sb-1", parent="p") as up:
        up.add_file("pages.img", payload(CHUNK, 5))
        repo.store.delete(repo.manifest_key("p"))
        with pytest.raises(ObjectMissing, match="was removed while this checkpoint ran"):
            up.commit()
    assert repo.store.head(repo.manifest_key("c")) is None
    # A parent replaced (same name, another image) is refused the same way.
    upload(repo, "p", {"pages.img": payload(CHUNK, 6)})
    with repo.upload("c", sandbox_id="sb-1", parent="p") as up:
        up.add_file("pages.img", payload(CHUNK, 7))
        upload(repo, "p", {"pages.img": payload(CHUNK, 8)}, force=True)
        with pytest.raises(ImageChanged, match="was replaced while"):
            up.commit()
    assert repo.store.head(repo.manifest_key("c")) is None


# 11: two forced writers of one name


@pytest.mark.parametrize("existing", [True, False], ids=["replacing", "creating"])
def test_two_forced_uploads_of_one_name_one_wins(repo_url: str, existing: bool) -> None:
    """Both started against the same manifest (or none); the first to commit wins and
    the second is refused at its commit (a compare-and-swap), writing nothing."""
    repo = Repository.open(repo_url, KEY)
    if existing:
        upload(repo, "img", {"pages.img": payload(CHUNK, 10)})
    first = repo.upload("img", sandbox_id="sb-a", force=True)
    second = repo.upload("img", sandbox_id="sb-b", force=True)
    with first, second:
        first.add_file("pages.img", payload(CHUNK, 11))
        second.add_file("pages.img", payload(CHUNK, 12))
        first.commit()
        with pytest.raises(ImageChanged, match="written by another checkpoint") as err:
            second.commit()
        assert "\n" not in str(err.value)
    reader = repo.open_image("img")
    assert reader.manifest.sandbox_id == "sb-a"
    assert reader.read_file("pages.img") == payload(CHUNK, 11)
    # A forced upload that started after the first committed replaces it.
    upload(repo, "img", {"pages.img": payload(CHUNK, 13)}, force=True)
    assert repo.open_image("img").read_file("pages.img") == payload(CHUNK, 13)


# B: a prune past its lease


class StallingStore:
    """The real store, with slow deletes, and a prune's lease renewals that stall (as a
    prune process stopped by a debugger, or starved, would): its lease lapses while
    its deletes go on."""

    def __init__(self, store: Store, delete_s: float) -> None:
        self.inner = store
        self.url = store.url
        self.delete_s = delete_s
        self.lease_puts = 0
        self.resume = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put(self, key: str, data: bytes | memoryview) -> None:
        if key.startswith(leases.PREFIX + leases.PRUNE):
            self.lease_puts += 1
            if self.lease_puts > 1:  # the first write takes the lease; renewals stall
                self.resume.wait(30)
                raise StoreUnreachable("renewal stalled")
        self.inner.put(key, data)

    def delete(self, key: str) -> None:
        if key.startswith(CHUNKS):
            time.sleep(self.delete_s)
        self.inner.delete(key)

    def list(self, prefix: str) -> Any:
        return self.inner.list(prefix)

    def head(self, key: str) -> ObjectInfo | None:
        return self.inner.head(key)


def test_a_prune_stops_once_its_lease_lapses(s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prune whose lease lapses stops deleting (with a clear error), and an upload
    that starts after the lapse, reusing chunks the prune meant to remove, keeps
    them: its image reads back whole."""
    ttl, small = 2.0, 4096
    repo = Repository.open(s3_url, chunk_size=small)
    data = payload(60 * small, 20)
    upload(repo, "old", {"pages.img": data})
    repo.remove("old")  # 60 unreferenced chunks, old enough with grace=0
    monkeypatch.setattr(repository_mod, "PRUNE_PARALLEL", 2)  # 60 deletes: 15 s
    stalling = StallingStore(repo.store, delete_s=0.5)
    pruner = Repository(stalling, chunk_size=small, lease_ttl=ttl)  # type: ignore[arg-type]
    outcome: dict[str, BaseException | None] = {}

    def prune() -> None:
        try:
            pruner.prune(grace=0)
            outcome["error"] = None
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=prune)
    thread.start()
    try:
        uploader = Repository.open(s3_url, chunk_size=small, lease_ttl=ttl)
        for _ in range(200):  # until the prune's lease is dead by the store's clock
            try:
                up = upload(uploader, "new", {"pages.img": data}, wait=0.0)
                break
            except StoreBusy:
                time.sleep(0.1)
        else:
            pytest.fail("the prune's lease never lapsed")
        assert up.stats.chunks_uploaded < up.stats.chunks_total  # it reused some
        thread.join(40)
    finally:
        stalling.resume.set()
        thread.join(40)
    error = outcome["error"]
    assert isinstance(error, StoreBusy) and "lost its lease" in str(error), error
    assert "\n" not in str(error)
    assert uploader.open_image("new").read_file("pages.img") == data


# listings past one page


def test_every_listing_sees_past_a_thousand_objects(s3_url: str) -> None:
    """A listing page holds 1000 keys: 1100 images and 1100 chunks are all seen by
    names, ls and prune, and prune keeps every chunk a listed image references."""
    repo = Repository.open(s3_url)
    count = 1100

    def one(i: int) -> None:
        data = f"chunk {i}".encode()
        ref = ChunkRef(hashlib.sha256(data).digest(), len(data))
        repo.store.put(repo.chunk_key(ref.digest), data)
        entry = FileEntry(size=len(data), chunks=[ref])
        manifest = _manifest(f"img{i:05d}", {"pages.img": entry})
        repo.store.put(repo.manifest_key(manifest.name), encode(manifest, None))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))
    assert len(repo.names()) == count
    assert sum(1 for _ in repo.store.list(CHUNKS)) == count
    assert len(repo.images()) == count
    result = repo.prune(grace=0)
    assert result.kept_referenced == count and result.removed_chunks == 0


# ls and prune past bad manifests


def test_ls_and_prune_go_past_unreadable_manifests(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-finite time, a garbage body and an oversized object each make one image
    unreadable, reported with its reason; the rest are listed and pruned as ever.  An
    image is listed under the name it is stored as, not the one its manifest says."""
    repo = Repository.open(s3_url)
    upload(repo, "good", {"pages.img": payload(CHUNK, 30)})
    entry = repo.read_manifest("good").files["pages.img"]
    for name, created in (("nan", math.nan), ("inf", math.inf)):
        bad = _manifest(name, {"pages.img": entry}, created=created)
        repo.store.put(repo.manifest_key(name), encode(bad, None))
    garbage = HEADER.pack(b"CKPTMANI", 1, 0, 5) + b"\xc1junk"
    repo.store.put(repo.manifest_key("junk"), garbage)
    copied = _manifest("original", {"pages.img": entry})
    repo.store.put(repo.manifest_key("copied"), encode(copied, None))
    many = FileEntry(size=100 * entry.size, chunks=entry.chunks * 100)
    big = _manifest("big", {"pages.img": entry, "stats.json": many})
    repo.store.put(repo.manifest_key("big"), encode(big, None))
    sizes = [repo.store.head(repo.manifest_key(n)).size for n in ("good", "copied")]  # type: ignore[union-attr]
    monkeypatch.setattr(repository_mod, "MAX_OBJECT", max(sizes) + 100)
    listing = repo.scan()
    assert sorted(i.name for i in listing.images) == ["copied", "good"]
    reasons = {b.name: b.error for b in listing.bad}
    assert set(reasons) == {"nan", "inf", "junk", "big"}
    assert all("\n" not in r for r in reasons.values())
    assert "over the" in reasons["big"] and "limit" in reasons["big"]
    result = repo.prune(grace=0)
    assert sorted(result.bad) == ["big", "inf", "junk", "nan"]
    assert result.kept_referenced == 1
    assert repo.open_image("good").read_file("pages.img") == payload(CHUNK, 30)


def test_a_manifest_too_big_is_refused_before_it_is_read(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = Repository.open(s3_url)
    upload(repo, "img", {"pages.img": payload(CHUNK, 31)})
    size = repo.store.head(repo.manifest_key("img")).size  # type: ignore[union-attr]
    monkeypatch.setattr(repository_mod, "MAX_OBJECT", size - 1)
    reads: list[str] = []
    real_get = repo.store.get
    monkeypatch.setattr(repo.store, "get", lambda key, *a: reads.append(key) or real_get(key, *a))
    with pytest.raises(ManifestError, match=r"over the .*-byte limit"):
        repo.open_image("img")
    assert reads == []


def test_cli_ls_prune_and_rm_past_bad_manifests_and_live_uploads(s3_url: str) -> None:
    """As a user sees it: ls and prune list the rest and report the unreadable image in
    a line of its own, never a traceback; rm under a live upload is one line."""
    from .test_cli_image import ckpt

    repo = Repository.open(s3_url)
    upload(repo, "good", {"pages.img": payload(1000, 40)})
    entry = repo.read_manifest("good").files["pages.img"]
    nan = _manifest("nan", {"pages.img": entry}, created=math.nan)
    repo.store.put(repo.manifest_key("nan"), encode(nan, None))
    repo.store.put(repo.manifest_key("junk"), HEADER.pack(b"CKPTMANI", 1, 0, 1) + b"\xc1")
    ls = ckpt("image", "ls", s3_url)
    assert ls.returncode == 0 and ls.stderr == "", ls.stderr
    assert "good" in ls.stdout and "sb-1" in ls.stdout
    assert f"unreadable image {s3_url}/nan: " in ls.stdout
    assert f"unreadable image {s3_url}/junk: " in ls.stdout
    doc = json.loads(ckpt("image", "ls", s3_url, "--json").stdout)
    assert [i["name"] for i in doc["images"]] == ["good"]
    assert sorted(b["name"] for b in doc["unreadable"]) == ["junk", "nan"]
    pruned = ckpt("image", "prune", s3_url, "--grace", "0s")
    assert pruned.returncode == 0 and pruned.stderr == "", pruned.stderr
    assert f"skipped {s3_url}/junk" in pruned.stdout and "kept 1 referenced" in pruned.stdout
    with repo.upload("child", sandbox_id="sb-1", parent="good") as up:
        up.add_file("pages.img", payload(1000, 41))
        refused = ckpt("image", "rm", f"{s3_url}/good", "--force")
        up.commit()
    lines = refused.stderr.splitlines()
    assert refused.returncode == 1 and len(lines) == 1, refused.stderr
    assert "upload is in progress" in lines[0]
    assert repo.open_image("good").read_file("pages.img") == payload(1000, 40)
