"""Encrypted images (``--encrypt``): sealed pieces, refused tampering, keys and chains.

Most images here are a real simulated kernel written directly through the statefile
layer, with a marker in its memory pages and in an object field; no sandbox."""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckpt import state, statefile
from ckpt.errors import CkptError, IntegrityError, StatefileError
from ckpt.statefile import chain
from ckpt.statefile import pages as pages_mod
from ckpt.statefile.format import (
    CHECKPOINT_IMG,
    FLAG_ENCRYPTED,
    FLAG_KEYED,
    HEADER,
    PAGE_SIZE,
    PAGES_HEADER,
    PAGES_IMG,
    PAGES_META_IMG,
    STORED_RUN,
)
from ckpt.statefile.integrity import Sealer
from ckpt.statefile.seal import (
    AEAD_TAG_SIZE,
    ENC_HEADER,
    EncryptedImageError,
    KeyMismatchError,
    key_id,
)
from tests.statefile.conftest import KEY

kernel = pytest.importorskip("ckpt.kernel")

MARKER = b"TOPSECRET-7f3a9c-MARKER"
OTHER_KEY = b"fedcba9876543210fedcba9876543210"
FILES = (CHECKPOINT_IMG, PAGES_IMG, PAGES_META_IMG)


def _kernel() -> kernel.Kernel:
    """A paused kernel with the marker in an object field and in memory pages."""
    k = kernel.build_workload("nginx")
    k.run_for(2_000_000)
    k.pause()
    k.uts.hostname = MARKER.decode()
    mf = k.memory_file
    for frame in sorted(mf.refs)[:8]:
        mf.write(frame, 100, MARKER)
    return k


class Marked:
    """The marked kernel, behind a short repr: a failing test's traceback shows its
    arguments, and a kernel's dataclass repr walks the whole graph (gigabytes)."""

    def __init__(self) -> None:
        self.kernel = _kernel()

    def __repr__(self) -> str:
        return "<the marked kernel>"


@pytest.fixture(scope="module")
def marked() -> Marked:
    return Marked()


def _save(marked: Marked, path: Path, **opts) -> Path:
    opts.setdefault("key", KEY)
    with statefile.ImageWriter(path, metadata={"sandbox_id": MARKER.decode()}, **opts) as img:
        img.note_save(state.save(marked.kernel, img.state_file, engine="typed"), "typed")
        img.write_pages(marked.kernel.memory_file.pages())
    return path


def _load(path: Path, key: bytes | None = KEY, *, lazy: bool = False) -> Any:
    image = statefile.open_image(path, key)
    k = state.load(image.state_reader(), engine="typed")
    pages = image.open_pages(lazy=lazy)
    k.memory_file.restore_pages(pages)
    pages.wait()
    return k


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def _restore_everything(path: Path, key: bytes | None = KEY) -> None:
    """Open, read the stream and every page, as a restore would (eagerly)."""
    image = statefile.open_image(path, key)
    image.read_state()
    with image.open_pages() as pages:
        for i in pages.indices:
            pages.read_page(i)


# -- round trip and what is on disk ---------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_round_trip(tmp_path: Path, marked, compression: str, lazy: bool) -> None:
    before = marked.kernel.fingerprint()
    img = _save(marked, tmp_path / "img", encrypt=True, compression=compression)
    image = statefile.open_image(img, KEY)
    assert image.header.encrypted and image.header.key_id == key_id(KEY).hex()
    assert image.metadata["sandbox_id"] == MARKER.decode()
    assert image.metadata["_format"]["encryption"] == "aes-256-gcm"
    restored = _load(img, lazy=lazy)
    got, hostname = restored.fingerprint(), restored.uts.hostname  # no kernel in a repr
    assert got == before
    assert hostname == MARKER.decode()


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_known_plaintext_only_in_the_plain_image(tmp_path: Path, marked, compression) -> None:
    plain = _save(marked, tmp_path / "plain", compression=compression)
    sealed = _save(marked, tmp_path / "sealed", encrypt=True, compression=compression)
    found = {n for n in FILES if MARKER in (plain / n).read_bytes()}
    # The marker is there to find (zstd may Huffman-code the literals of a page run).
    assert found == {CHECKPOINT_IMG, PAGES_IMG} if compression == "none" else found
    for name in FILES:
        assert MARKER not in (sealed / name).read_bytes(), name
    # Nor is the page map in the clear: its file is a small header and sealed bytes.
    meta = (sealed / PAGES_META_IMG).read_bytes()
    assert meta[10] == FLAG_KEYED | FLAG_ENCRYPTED
    assert (plain / PAGES_META_IMG).read_bytes()[40:80] not in meta


def test_nonces_never_repeat_within_or_across_images(tmp_path: Path) -> None:
    """Identical plaintexts at different places, or in two images under one key, seal
    to different bytes: a repeated nonce would make them equal."""
    stream = os.urandom(4096) * 6
    same = b"\x5a" * PAGE_SIZE
    pages = [(i * 2, same) for i in range(6)]  # six one-page runs of one content
    a = statefile.ImageWriter
    for name in ("a", "b"):
        with a(tmp_path / name, key=KEY, encrypt=True, compression="none", chunk_size=4096) as w:
            w.state_file.write(stream)
            w.write_pages(pages)
    bodies: list[bytes] = []
    for name in ("a", "b"):
        data = (tmp_path / name / CHECKPOINT_IMG).read_bytes()
        start = HEADER.size + ENC_HEADER.size + 32
        # The ciphertexts alone, without their 16-byte tags (which the associated
        # data, different at each place, would set apart even under a repeated nonce).
        bodies += [data[start + i * 4112 : start + i * 4112 + 4096] for i in range(6)]
        runs = (tmp_path / name / PAGES_IMG).read_bytes()[PAGES_HEADER.size :]
        bodies += [runs[i * 4112 : i * 4112 + 4096] for i in range(6)]
    assert len(set(bodies)) == 24


# -- keys -----------------------------------------------------------------------------


def test_missing_and_wrong_key_are_one_line(tmp_path: Path, marked) -> None:
    img = _save(marked, tmp_path / "img", encrypt=True)
    kid = key_id(KEY).hex()
    with pytest.raises(EncryptedImageError, match=rf"encrypted \(key id {kid}\)") as exc:
        statefile.open_image(img)
    assert "\n" not in str(exc.value)
    with pytest.raises(KeyMismatchError) as exc:
        statefile.open_image(img, OTHER_KEY)
    assert str(exc.value).endswith(f"the key file does not match this image (key id {kid})")
    # Unverified (inspect without a key): the header only, nothing of the contents.
    u = statefile.open_image_unverified(img)
    assert u.header.encrypted and u.metadata == {}
    with pytest.raises(EncryptedImageError):
        u.read_state()
    with pytest.raises(EncryptedImageError):
        u.open_pages()


def test_encrypt_needs_a_key(tmp_path: Path) -> None:
    with pytest.raises(StatefileError, match="--key-file"):
        statefile.ImageWriter(tmp_path / "img", encrypt=True)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "ckpt", *args], capture_output=True, text=True, env=env, timeout=60
    )


def _key_file(path: Path, key: bytes) -> Path:
    path.write_bytes(key)
    path.chmod(0o600)
    return path


def test_inspect_without_and_with_the_key(tmp_path: Path, marked) -> None:
    img = _save(marked, tmp_path / "img", encrypt=True)
    kid = key_id(KEY).hex()
    proc = _cli("inspect", "statefile", str(img))
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"error: {img / CHECKPOINT_IMG}: encrypted (key id {kid}); pass its key with --key-file"
    ]
    proc = _cli(
        "inspect", "statefile", str(img), "--key-file", str(_key_file(tmp_path / "o", OTHER_KEY))
    )
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"error: {img / CHECKPOINT_IMG}: the key file does not match this image (key id {kid})"
    ]
    report = statefile.inspect_image(img, KEY, verify=True)
    assert report["integrity"]["ok"] is True and report["verify"]["complete"] is True
    assert report["header"]["encryption"] == f"aes-256-gcm (key id {kid})"


def test_checkpoint_cli_refusals(tmp_path: Path) -> None:
    proc = _cli("checkpoint", "nosuch", "--image-path", "s3://b/p/x", "--encrypt")
    assert proc.returncode != 0 and len(proc.stderr.splitlines()) == 1
    assert "--key-file" in proc.stderr
    proc = _cli("checkpoint", "nosuch", "--image-path", str(tmp_path / "i"), "--encrypt")
    assert proc.returncode != 0 and len(proc.stderr.splitlines()) == 1
    assert "--key-file" in proc.stderr


# -- tampering, swapping, truncation --------------------------------------------------


@pytest.fixture(scope="module")
def sealed_image(tmp_path_factory, marked) -> Path:
    """An encrypted image of several chunks and page runs, stored raw."""
    path = tmp_path_factory.mktemp("sealed") / "img"
    return _save(marked, path, encrypt=True, compression="none", chunk_size=16384)


def _regions(img: Path) -> dict[str, tuple[str, int]]:
    """One byte offset in each region of each file."""
    image = statefile.open_image(img, KEY)
    r = image._reader
    t = r.chunks_table
    meta = image.pages_meta()
    size = (img / CHECKPOINT_IMG).stat().st_size
    assert len(t) >= 3 and len(meta.runs) >= 3
    return {
        "magic": (CHECKPOINT_IMG, 1),
        "header flags": (CHECKPOINT_IMG, 10),
        "image id": (CHECKPOINT_IMG, 30),
        "key id": (CHECKPOINT_IMG, HEADER.size + 9),
        "salt": (CHECKPOINT_IMG, HEADER.size + 20),
        "header tag": (CHECKPOINT_IMG, HEADER.size + ENC_HEADER.size + 3),
        "chunk 0": (CHECKPOINT_IMG, t[0].offset + 5),
        "chunk 1 seal tag": (CHECKPOINT_IMG, t[1].offset + t[1].stored_len - 1),
        "last chunk": (CHECKPOINT_IMG, t[-1].offset + 2),
        "chunk table": (CHECKPOINT_IMG, r.header.table_offset + 1),
        "metadata": (CHECKPOINT_IMG, r.header.metadata_offset + 10),
        "footer": (CHECKPOINT_IMG, size - 60),
        "end magic": (CHECKPOINT_IMG, size - 2),
        "pages header": (PAGES_IMG, 20),
        "page run 0": (PAGES_IMG, meta.runs[0].offset + 7),
        "page run 2": (PAGES_IMG, meta.runs[2].offset + 4000),
        "map header": (PAGES_META_IMG, 20),
        "map body": (PAGES_META_IMG, 60),
        "map seal tag": (PAGES_META_IMG, (img / PAGES_META_IMG).stat().st_size - 3),
    }


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for name in FILES:
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


def test_a_flipped_byte_anywhere_is_refused(tmp_path: Path, sealed_image: Path) -> None:
    regions = _regions(sealed_image)
    for i, (what, (name, offset)) in enumerate(regions.items()):
        img = _copy(sealed_image, tmp_path / f"t{i}")
        _flip(img / name, offset)
        with pytest.raises(CkptError) as exc:
            _restore_everything(img)
        assert "\n" not in str(exc.value), what
        assert MARKER.decode() not in str(exc.value)


def test_truncated_files_are_refused(tmp_path: Path, sealed_image: Path) -> None:
    for i, name in enumerate(FILES):
        for cut in (1, 17, 5000):
            img = _copy(sealed_image, tmp_path / f"t{i}-{cut}")
            data = (img / name).read_bytes()
            (img / name).write_bytes(data[: len(data) - cut])
            with pytest.raises(CkptError):
                _restore_everything(img)


@pytest.fixture
def forged_tags(monkeypatch):
    """Accept every HMAC tag, as one who could forge them: what is left to refuse a
    moved piece is the AEAD and its associated data alone."""
    monkeypatch.setattr(Sealer, "check", lambda self, expected, got, what: None)


def _swap(path: Path, a: int, b: int, n: int) -> None:
    data = bytearray(path.read_bytes())
    data[a : a + n], data[b : b + n] = data[b : b + n], data[a : a + n]
    path.write_bytes(bytes(data))


def test_swapped_chunks_fail_their_seal(tmp_path: Path, sealed_image: Path, forged_tags) -> None:
    t = statefile.open_image(sealed_image, KEY)._reader.chunks_table
    assert t[0].stored_len == t[1].stored_len
    img = _copy(sealed_image, tmp_path / "img")
    _swap(img / CHECKPOINT_IMG, t[0].offset, t[1].offset, t[0].stored_len)
    with pytest.raises(IntegrityError, match="aes-256-gcm tag mismatch"):
        statefile.open_image(img, KEY).read_state()


def test_swapped_page_runs_fail_their_seal(tmp_path: Path, forged_tags) -> None:
    pages = [(i * 2, bytes([i + 1]) * PAGE_SIZE) for i in range(4)]  # one-page runs
    with statefile.ImageWriter(tmp_path / "a", key=KEY, encrypt=True, compression="none") as w:
        w.write_pages(pages)
    runs = statefile.open_image(tmp_path / "a", KEY).pages_meta().runs
    _swap(tmp_path / "a" / PAGES_IMG, runs[0].offset, runs[1].offset, runs[0].stored_len)
    with pytest.raises(IntegrityError, match="aes-256-gcm tag mismatch"):
        statefile.open_image(tmp_path / "a", KEY).open_pages().read_page(0)


def test_a_piece_of_another_image_fails_its_seal(tmp_path: Path, forged_tags) -> None:
    """Same key, same place, same lengths: only the image (id and salt) differs."""
    for name in ("a", "b"):
        with statefile.ImageWriter(tmp_path / name, key=KEY, encrypt=True, compression="none") as w:
            w.state_file.write(name.encode() * 5000)
            w.write_pages([(0, bytes([7]) * PAGE_SIZE)])
    ra = statefile.open_image(tmp_path / "a", KEY)._reader.chunks_table[0]
    data_b = bytearray((tmp_path / "b" / CHECKPOINT_IMG).read_bytes())
    data_a = (tmp_path / "a" / CHECKPOINT_IMG).read_bytes()
    data_b[ra.offset : ra.offset + ra.stored_len] = data_a[ra.offset : ra.offset + ra.stored_len]
    (tmp_path / "b" / CHECKPOINT_IMG).write_bytes(bytes(data_b))
    with pytest.raises(IntegrityError, match="aes-256-gcm tag mismatch"):
        statefile.open_image(tmp_path / "b", KEY).read_state()
    pa = (tmp_path / "a" / PAGES_IMG).read_bytes()
    pb = (tmp_path / "b" / PAGES_IMG).read_bytes()
    (tmp_path / "b" / PAGES_IMG).write_bytes(pb[: PAGES_HEADER.size] + pa[PAGES_HEADER.size :])
    with pytest.raises(IntegrityError, match="aes-256-gcm tag mismatch"):
        statefile.open_image(tmp_path / "b", KEY).open_pages().read_page(0)


def test_map_and_statefile_must_agree_on_encryption(tmp_path: Path) -> None:
    for name, enc in (("plain", False), ("sealed", True)):
        with statefile.ImageWriter(tmp_path / name, key=KEY, encrypt=enc) as w:
            w.write_pages([(0, bytes([7]) * PAGE_SIZE)])
    (tmp_path / "sealed" / PAGES_META_IMG).write_bytes(
        (tmp_path / "plain" / PAGES_META_IMG).read_bytes()
    )
    with pytest.raises(IntegrityError, match=r"not encrypted, unlike checkpoint\.img"):
        statefile.open_image(tmp_path / "sealed", KEY).pages_meta()


# -- chains ---------------------------------------------------------------------------


def _link(path: Path, parent: Path, key: bytes) -> dict:
    return chain.link_metadata(path, statefile.open_image(parent, key))


def _pre_dump(path: Path, key: bytes, encrypt: bool, parent: Path | None = None) -> Path:
    link = _link(path, parent, key) if parent else {}
    meta = {"sandbox_id": "sb", "kind": chain.PRE_DUMP, **link}
    with statefile.ImageWriter(path, key=key, encrypt=encrypt, metadata=meta) as w:
        w.write_pages([(0, bytes([len(path.name)]) * PAGE_SIZE)])
    return path


def test_chain_with_one_key_restores(tmp_path: Path) -> None:
    a = _pre_dump(tmp_path / "a", KEY, True)
    b = _pre_dump(tmp_path / "bb", KEY, True, a)
    images = chain.open_chain(statefile.open_image(b, KEY), KEY)
    with chain.open_pages(images) as pages:
        assert pages.read_page(0) == bytes([2]) * PAGE_SIZE


def test_chain_key_mismatch_is_refused(tmp_path: Path) -> None:
    a = _pre_dump(tmp_path / "a", OTHER_KEY, True)
    link = _link(tmp_path / "b", a, OTHER_KEY)
    meta = {"sandbox_id": "sb", "kind": chain.PRE_DUMP, **link}
    with statefile.ImageWriter(tmp_path / "b", key=KEY, encrypt=True, metadata=meta) as w:
        w.write_pages([])
    with pytest.raises(KeyMismatchError, match="does not match this image") as exc:
        chain.open_chain(statefile.open_image(tmp_path / "b", KEY), KEY)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("parent_encrypted", [True, False])
def test_a_chain_is_encrypted_throughout_or_not_at_all(tmp_path: Path, parent_encrypted) -> None:
    a = _pre_dump(tmp_path / "a", KEY, parent_encrypted)
    b = _pre_dump(tmp_path / "b", KEY, not parent_encrypted, a)
    with pytest.raises(IntegrityError, match="encrypted throughout or not at all"):
        chain.open_chain(statefile.open_image(b, KEY), KEY)


def test_a_changed_chunk_frame_fails_its_seal(tmp_path: Path, forged_tags) -> None:
    """The seal binds how a chunk is read (its codec, raw length), not only where it is."""
    with statefile.ImageWriter(tmp_path / "a", key=KEY, encrypt=True, compression="none") as w:
        w.state_file.write(os.urandom(5000))
    table = statefile.open_image(tmp_path / "a", KEY)._reader.header.table_offset
    data = bytearray((tmp_path / "a" / CHECKPOINT_IMG).read_bytes())
    data[table + 8] = 1  # the codec byte of chunk 0: zstd instead of none
    (tmp_path / "a" / CHECKPOINT_IMG).write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="aes-256-gcm tag mismatch"):
        statefile.open_image(tmp_path / "a", KEY).read_state()


# -- what a page run's HMAC covers ----------------------------------------------------


def _run_pages() -> list[tuple[int, bytes]]:
    """Three runs (pages 0-2, 5, 9-10) of distinct contents."""
    return [(i, bytes([i + 1]) * PAGE_SIZE) for i in (0, 1, 2, 5, 9, 10)]


def test_an_encrypted_runs_hmac_covers_its_aead_tag_not_the_run_again(tmp_path: Path) -> None:
    """A second pass over every run for its HMAC was 0.17 s of a memory:512
    checkpoint; the run's AEAD tag, which readers check, already covers it."""
    with statefile.ImageWriter(tmp_path / "a", key=KEY, encrypt=True, compression="none") as w:
        w.write_pages(_run_pages())
    image = statefile.open_image(tmp_path / "a", KEY)
    data = (tmp_path / "a" / PAGES_IMG).read_bytes()
    runs = image.pages_meta().runs
    assert [r.npages for r in runs] == [3, 1, 2]
    for r in runs:
        aead_tag = data[r.offset + r.stored_len - AEAD_TAG_SIZE : r.offset + r.stored_len]
        fields = STORED_RUN.pack(r.first_page, r.npages, r.codec, 0, r.stored_len)
        covered = image.header.image_id + fields + aead_tag
        assert r.tag == hmac.new(KEY, covered, hashlib.sha256).digest()


@pytest.mark.parametrize("how", ["eager", "lazy", "iter_stored", "check_pages"])
def test_an_image_whose_run_hmacs_cover_whole_runs_still_reads(
    tmp_path: Path, monkeypatch, how: str
) -> None:
    """Encrypted images written before the change tag each run over all its bytes."""

    def whole_run_tag(sealer, image_id, first, npages, codec, data) -> bytes:
        return sealer.mac((image_id, STORED_RUN.pack(first, npages, codec, 0, len(data)), data))

    monkeypatch.setattr(pages_mod, "_run_tag", whole_run_tag)
    with statefile.ImageWriter(tmp_path / "a", key=KEY, encrypt=True, compression="zstd") as w:
        w.write_pages(_run_pages())
    monkeypatch.undo()
    image = statefile.open_image(tmp_path / "a", KEY)
    expected = dict(_run_pages())
    if how == "iter_stored":
        assert [run[:2] for run in image.iter_stored()] == [(0, 3), (5, 1), (9, 2)]
    elif how == "check_pages":
        assert image.check_pages() == len(expected)
    else:
        with image.open_pages(lazy=how == "lazy") as pages:
            assert {i: pages.read_page(i) for i in expected} == expected
