"""``ckpt image rekey``: an encrypted image, local or in ``s3://``, rewritten under a
new key without a sandbox; afterwards the old key no longer opens it and the new one
does, with the same content; the old key is found among several by its key id; a
chain and an unencrypted image are refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt.errors import CkptError, IntegrityError
from ckpt.images import Location
from ckpt.images.rekey import NotEncrypted, rekey
from ckpt.statefile import open_image
from ckpt.statefile.image import ImageWriter
from ckpt.storage.repository import CHUNKS, Repository
from ckpt.storage.sealing import KeyMismatch

from .test_repository import CHUNK, payload, upload

OLD, NEW, SPARE = (bytes([i]) * 32 for i in (1, 2, 3))
STATE = payload(300_000, 11)
PAGES = [(i, payload(4096, 100 + i)) for i in (0, 1, 2, 7, 300)]


def _local_image(path: Path, key: bytes | None, **extra: object) -> bytes:
    with ImageWriter(path, key=key, encrypt=key is not None, compression="none",
                     metadata={"sandbox_id": "sb"}, **extra) as img:  # type: ignore[arg-type]  # fmt: skip
        img.state_file.write(STATE)
        img.write_pages(PAGES)
        img.write_stats({"checkpoint": {"x": 1}})
    return img.image_id


def _content(path: Path, key: bytes) -> tuple[bytes, list[tuple[int, bytes]]]:
    image = open_image(path, key=key)
    pages = image.open_pages()
    return image.read_state(), [(i, pages.read_page(i)) for i, _ in PAGES]


def _write_key(path: Path, key: bytes) -> Path:
    path.write_bytes(key)
    path.chmod(0o600)
    return path


def test_a_local_image_opens_with_the_new_key_only(tmp_path: Path) -> None:
    path = tmp_path / "img"
    image_id = _local_image(path, OLD)
    keys = [_write_key(tmp_path / n, k) for n, k in (("spare", SPARE), ("old", OLD))]
    new = _write_key(tmp_path / "new", NEW)
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt", "image", "rekey", str(path),
         "--key-file", str(keys[0]), "--key-file", str(keys[1]), "--new-key-file", str(new)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "re-keyed" in proc.stdout
    with pytest.raises(IntegrityError, match="does not match this image"):
        open_image(path, key=OLD)
    assert _content(path, NEW) == (STATE, PAGES)
    image = open_image(path, key=NEW)
    assert image.header.image_id == image_id and image.stats() == {"checkpoint": {"x": 1}}
    assert image.metadata["sandbox_id"] == "sb"
    for p in path.iterdir():
        assert STATE[:64] not in p.read_bytes()
    # Neither given key is the image's now: one line naming the key ids.
    with pytest.raises(CkptError, match="no --key-file given has it") as info:
        rekey(Location.parse(str(path)), [OLD, SPARE], NEW, {})
    assert "\n" not in str(info.value)


def test_an_unencrypted_or_chained_local_image_is_refused(tmp_path: Path) -> None:
    _local_image(tmp_path / "plain", None)
    with pytest.raises(NotEncrypted, match="not encrypted"):
        rekey(Location.parse(str(tmp_path / "plain")), [OLD], NEW, {})


def _store_image(url: str) -> dict[str, bytes]:
    files = {"checkpoint.img": payload(50_000, 1), "pages.img": payload(3 * CHUNK + 99, 2)}
    upload(Repository.open(url, OLD, sealed=True), "img", files)
    return files


def test_a_store_image_opens_with_the_new_key_only(s3_url: str, s3_env: dict[str, str]) -> None:
    files = _store_image(s3_url)
    before = Repository.open(s3_url, OLD).read_manifest("img")
    done = rekey(Location.parse(f"{s3_url}/img"), [SPARE, OLD], NEW, s3_env)
    assert done.bytes_rewritten == sum(len(v) for v in files.values())
    with pytest.raises(KeyMismatch, match="does not match this image"):
        Repository.open(s3_url, OLD).open_image("img")
    reader = Repository.open(s3_url, NEW).open_image("img")
    for name, data in files.items():
        assert reader.read_file(name) == data
    after = reader.manifest
    assert [len(c.chunks) for c in after.files.values()] == [
        len(c.chunks) for c in before.files.values()
    ]
    # The old key's chunks go at the next prune; then no object opens with it.
    repo = Repository.open(s3_url)
    assert repo.prune(grace=0).removed_chunks == len(before.chunk_refs())
    keys = {o.key for o in repo.store.list(CHUNKS)}
    assert keys == {repo.chunk_key(d) for d in after.chunk_refs()}


def test_a_store_chain_or_unencrypted_image_is_refused(s3_url: str, s3_env: dict[str, str]) -> None:
    _store_image(s3_url)
    upload(Repository.open(s3_url, OLD, sealed=True), "child", {"pages.img": b"x"}, parent="img")
    upload(Repository.open(s3_url, OLD), "plain", {"pages.img": b"x"})
    for name, expected in (("img", "part of a chain"), ("child", "part of a chain"),
                           ("plain", "not encrypted")):  # fmt: skip
        with pytest.raises(CkptError, match=expected):
            rekey(Location.parse(f"{s3_url}/{name}"), [OLD], NEW, s3_env)
    assert Repository.open(s3_url, OLD).open_image("img").read_file("pages.img")
