"""Encrypted images in a repository (ckpt/storage/sealing.py): chunks sealed
convergently, so one key deduplicates and two keys share nothing; addresses and
objects that a reader of the bucket cannot test a plaintext against; sealed manifests
that refuse a missing or wrong key, any changed byte and a substitute unsealed
manifest; chains under one key; ls, rm and prune without a key."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ckpt.errors import CkptError, IntegrityError
from ckpt.storage.chunkcache import ChunkCache
from ckpt.storage.errors import ChunkIntegrityError
from ckpt.storage.lazy import ChunkSource
from ckpt.storage.manifest import encode
from ckpt.storage.repository import CHUNKS, Repository
from ckpt.storage.sealing import EncryptedImage, KeyMismatch

from .test_repository import CHUNK, payload, upload

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))
SECRET = b"TOPSECRET-value-" * 64


def _files() -> dict[str, bytes]:
    pages = payload(3 * CHUNK, 7) + SECRET + payload(CHUNK // 2, 8)
    return {"checkpoint.img": SECRET + payload(10_000, 9), "pages.img": pages}


def _sealed(url: str, key: bytes = KEY) -> Repository:
    return Repository.open(url, key, sealed=True)


def _objects(repo: Repository) -> dict[str, bytes]:
    return {o.key: repo.store.get(o.key) for o in repo.store.list("")}


def _chunk_objects(repo: Repository) -> dict[str, bytes]:
    return {k: v for k, v in _objects(repo).items() if k.startswith(CHUNKS)}


def _hkdf(key: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(key)


def test_the_bucket_holds_no_plaintext_and_the_image_reads_back(repo_url: str) -> None:
    repo = _sealed(repo_url)
    files = _files()
    upload(repo, "img", files)
    for name, data in _objects(repo).items():
        assert SECRET[:32] not in data, name
        assert b"pages.img" not in data, name  # the layout is sealed too
    reader = Repository.open(repo_url, KEY).open_image("img")
    assert reader.sealed
    for name, data in files.items():
        assert reader.read_file(name) == data


def test_each_object_is_what_the_documented_derivation_gives(repo_url: str) -> None:
    """An independent implementation of the module's formulas: the address is a keyed
    MAC (never a plain hash), the AEAD key and nonce both derive from the plaintext's
    MAC, the address is bound as associated data."""
    repo = _sealed(repo_url)
    data = payload(CHUNK, 3)
    upload(repo, "img", {"pages.img": data})
    k_chunk, k_addr, k_nonce = (
        _hkdf(KEY, b"ckpt store chunk " + label) for label in (b"mac", b"address", b"nonce")
    )
    mac = hmac.new(k_chunk, data, hashlib.sha256).digest()
    address = hmac.new(k_addr, mac, hashlib.sha256).digest()
    nonce = hmac.new(k_nonce, mac, hashlib.sha256).digest()[:12]
    (key, stored), *rest = _chunk_objects(repo).items()
    assert not rest
    assert key == repo.chunk_key(address)
    assert address != hashlib.sha256(data).digest()
    assert stored == AESGCM(mac).encrypt(nonce, data, address)


@pytest.mark.parametrize("parallel", [1, 4])
def test_every_chunk_sealed_into_a_reused_buffer_is_stored_as_derived(
    repo_url: str, parallel: int
) -> None:
    """Each upload thread seals its chunks into one buffer of its own, reused: every
    object stored must still be its own chunk's, whatever the thread did next (one
    thread: each chunk overwrites the last's buffer; four: they run at once)."""
    repo = _sealed(repo_url)
    chunks = [payload(CHUNK, 100 + i) for i in range(12)] + [payload(CHUNK // 3, 99)]
    upload(repo, "img", {"pages.img": b"".join(chunks)}, parallel=parallel)
    k_chunk, k_addr, k_nonce = (
        _hkdf(KEY, b"ckpt store chunk " + label) for label in (b"mac", b"address", b"nonce")
    )
    expected = {}
    for data in chunks:
        mac = hmac.new(k_chunk, data, hashlib.sha256).digest()
        address = hmac.new(k_addr, mac, hashlib.sha256).digest()
        nonce = hmac.new(k_nonce, mac, hashlib.sha256).digest()[:12]
        expected[repo.chunk_key(address)] = AESGCM(mac).encrypt(nonce, data, address)
    assert _chunk_objects(repo) == expected
    reader = Repository.open(repo_url, KEY).open_image("img")
    assert reader.read_file("pages.img") == b"".join(chunks)


def test_one_key_uploads_an_unchanged_chunk_once_two_keys_share_nothing(
    repo_url: str,
) -> None:
    files = _files()
    first = upload(_sealed(repo_url), "a", files).stats
    assert first.bytes_uploaded == first.bytes_total > 0
    again = upload(_sealed(repo_url), "b", files).stats
    assert again.bytes_uploaded == 0 and again.chunks_total == first.chunks_total
    mine = set(_chunk_objects(_sealed(repo_url)))
    other = upload(_sealed(repo_url, OTHER), "c", files).stats
    assert other.bytes_uploaded == other.bytes_total
    theirs = set(_chunk_objects(_sealed(repo_url))) - mine
    assert len(theirs) == len(mine)
    plain = upload(Repository.open(repo_url), "d", files).stats
    assert plain.bytes_uploaded == plain.bytes_total  # not one object in common
    assert (
        Repository.open(repo_url, OTHER).open_image("c").read_file("pages.img")
        == (files["pages.img"])
    )


def test_a_missing_or_wrong_key_is_one_line(repo_url: str) -> None:
    upload(_sealed(repo_url), "img", _files())
    with pytest.raises(EncryptedImage, match=r"encrypted \(key id [0-9a-f]{16}\); pass its key"):
        Repository.open(repo_url).open_image("img")
    with pytest.raises(KeyMismatch, match="does not match this image") as info:
        Repository.open(repo_url, OTHER).open_image("img")
    assert "\n" not in str(info.value)


def test_every_changed_or_cut_byte_of_a_manifest_is_refused(tmp_path: Path) -> None:
    url = str(tmp_path / "repo")
    upload(_sealed(url), "img", {"pages.img": payload(2 * CHUNK, 1)})
    repo = Repository.open(url, KEY)
    good = repo.store.get("img/manifest")
    step = max(1, len(good) // 97)
    for offset in [*range(0, len(good), step), len(good) - 1]:
        bad = bytearray(good)
        bad[offset] ^= 0x40
        repo.store.put("img/manifest", bytes(bad))
        with pytest.raises(CkptError) as info:
            repo.open_image("img")
        assert "\n" not in str(info.value)
    for cut in (1, 16, len(good) // 2):
        repo.store.put("img/manifest", good[:-cut])
        with pytest.raises(CkptError):
            repo.open_image("img")
    repo.store.put("img/manifest", good)
    assert repo.open_image("img").read_file("pages.img") == payload(2 * CHUNK, 1)


def test_a_sealed_manifest_whose_index_disagrees_is_refused(tmp_path: Path) -> None:
    """Even under a valid tag (a writer's bug, or an old key's holder): the clear index
    that prune trusts must list exactly the sealed manifest's chunks, or prune could
    remove a chunk the image needs."""
    import msgspec

    from ckpt.storage import manifest as m

    url = str(tmp_path / "repo")
    up = upload(_sealed(url), "img", {"pages.img": payload(2 * CHUNK, 1)})
    assert up.manifest is not None
    real = m._index
    try:
        m._index = lambda mf, overhead: msgspec.structs.replace(  # type: ignore[assignment]
            real(mf, overhead), files={"chunks": m.FileEntry(size=0, chunks=[])}
        )
        forged = m.encode(up.manifest, KEY, up.chunks)
    finally:
        m._index = real
    repo = Repository.open(url, KEY)
    repo.store.put("img/manifest", forged)
    with pytest.raises(m.ManifestError, match="disagrees with its clear index"):
        repo.open_image("img")


def test_a_manifest_without_a_seal_is_refused_under_a_key(tmp_path: Path) -> None:
    """A bucket writer replaces the sealed manifest with a plain one naming chunks of
    its own; a reader with the key must refuse it, not read the forged bytes."""
    url = str(tmp_path / "repo")
    upload(_sealed(url), "img", {"pages.img": payload(CHUNK, 1)})
    forged = upload(Repository.open(url), "forged", {"pages.img": b"forged" * 100}).manifest
    assert forged is not None
    import msgspec

    plain = encode(msgspec.structs.replace(forged, name="img"), None)
    repo = Repository.open(url, KEY)
    repo.store.put("img/manifest", plain)
    with pytest.raises(ChunkIntegrityError, match="not sealed, but a key was given"):
        repo.open_image("img")


def test_a_changed_or_cut_chunk_is_refused(repo_url: str) -> None:
    repo = _sealed(repo_url)
    upload(repo, "img", {"pages.img": payload(2 * CHUNK, 5)})
    reader = Repository.open(repo_url, KEY).open_image("img")
    ref = reader.manifest.files["pages.img"].chunks[1]
    key = repo.chunk_key(ref.digest)
    good = repo.store.get(key)
    for bad in (good[:-1], good[:100], good[:-1] + bytes([good[-1] ^ 1]), b"x" + good[1:]):
        repo.store.put(key, bad)
        with pytest.raises(ChunkIntegrityError) as info:
            reader.read_chunk(ref)
        assert "\n" not in str(info.value)
        cut = len(bad) < len(good)
        assert ("truncated" if cut else "fails its aes-256-gcm tag") in str(info.value)
    # Another chunk's object under this address (a swap) fails its tag too.
    other = repo.chunk_key(reader.manifest.files["pages.img"].chunks[0].digest)
    repo.store.put(key, repo.store.get(other))
    with pytest.raises(ChunkIntegrityError, match="fails its aes-256-gcm tag"):
        reader.read_chunk(ref)


def test_the_chunk_cache_keeps_sealed_objects_and_drops_bad_ones(tmp_path: Path) -> None:
    url = str(tmp_path / "repo")
    upload(_sealed(url), "img", {"pages.img": SECRET * 200})
    reader = Repository.open(url, KEY).open_image("img")
    cache = ChunkCache(tmp_path / "cache")
    source = ChunkSource(reader, cache, readahead=0)
    (ref,) = reader.manifest.files["pages.img"].chunks
    assert source.chunk(ref) == SECRET * 200
    source.release()
    path = tmp_path / "cache" / ref.hex[:2] / ref.hex
    assert SECRET[:32] not in path.read_bytes()
    size = ref.size + reader.chunks.overhead
    opened = cache.get(ref, lambda raw: reader.open_stored(ref, raw), size)
    assert opened == SECRET * 200
    bad = bytearray(path.read_bytes())
    bad[5] ^= 1
    path.write_bytes(bytes(bad))
    assert cache.get(ref, lambda raw: reader.open_stored(ref, raw), size) is None
    assert not path.exists()


def test_a_chain_is_sealed_under_one_key_or_not_at_all(tmp_path: Path) -> None:
    url = str(tmp_path / "repo")
    upload(_sealed(url), "p", {"pages.img": payload(CHUNK, 1)})
    upload(Repository.open(url, KEY), "plain", {"pages.img": payload(CHUNK, 1)})
    upload(_sealed(url), "child", {"pages.img": b"x"}, parent="p")
    with pytest.raises(KeyMismatch, match="a chain uses one key"):
        upload(_sealed(url, OTHER), "c1", {"pages.img": b"x"}, parent="p")
    with pytest.raises(IntegrityError, match="encrypted throughout or not at all"):
        upload(Repository.open(url, KEY), "c2", {"pages.img": b"x"}, parent="p")
    with pytest.raises(IntegrityError, match="encrypted throughout or not at all"):
        upload(_sealed(url), "c3", {"pages.img": b"x"}, parent="plain")
    names = [i.name for i in Repository.open(url).images()]
    assert sorted(names) == ["child", "p", "plain"]
    # A restore stages the parents as sealed as the child, under its key.
    repo = Repository.open(url, KEY)
    reader = repo.open_image("child")
    repo.download_parents(reader.manifest, tmp_path / "stage", 16, chunks=reader.chunks)
    assert (tmp_path / "stage" / "p" / "pages.img").read_bytes() == payload(CHUNK, 1)


def test_ls_rm_and_prune_need_no_key(repo_url: str) -> None:
    files = _files()
    upload(_sealed(repo_url), "a", files)
    upload(_sealed(repo_url), "b", files)
    repo = Repository.open(repo_url)  # no key
    listing = repo.scan()
    assert [i.name for i in listing.images] == ["a", "b"] and not listing.bad
    a = listing.images[0]
    assert a.chunks == len(_chunk_objects(repo)) and a.unique == 0
    assert a.stored == sum(len(v) for v in _chunk_objects(repo).values())
    assert repo.prune(grace=0).removed_chunks == 0
    repo.remove("a")
    assert repo.prune(grace=0).removed_chunks == 0  # b still holds every chunk
    assert (
        Repository.open(repo_url, KEY).open_image("b").read_file("pages.img")
        == (files["pages.img"])
    )
    repo.remove("b")
    assert repo.prune(grace=0).removed_chunks == a.chunks
    assert not _chunk_objects(repo)


def test_plaintext_stays_out_of_the_key_material(tmp_path: Path) -> None:
    """The key file's bytes and the chunks' macs appear in no object."""
    url = str(tmp_path / "repo")
    repo = _sealed(url)
    up = upload(repo, "img", {"pages.img": payload(CHUNK, 4)})
    macs = list(up.chunks.secrets.values())
    assert macs
    for name, data in _objects(repo).items():
        assert KEY not in data, name
        for mac in macs:
            assert mac not in data, name
