"""A hostile manifest gets nothing from a restore: a file name no image has, a name
that climbs out of the stage, or sizes beyond the free space are refused in one line
before a byte is fetched, whether or not the manifest is sealed with the right key."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import pytest

from ckpt.errors import CkptError
from ckpt.sandbox.host import remote_image
from ckpt.storage.manifest import MAX_CHUNK, ChunkRef, FileEntry, Manifest, encode
from ckpt.storage.repository import FREE_RESERVE, Repository
from ckpt.storage.s3 import S3Store

from .test_repository import KEY, payload, upload


@pytest.fixture
def chunk_gets(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every chunk the S3 client fetches (the real client, counted)."""
    fetched: list[str] = []
    real_get = S3Store.get

    def get(self: S3Store, key: str, *args: Any) -> bytes:
        if key.startswith(".chunks/"):
            fetched.append(key)
        return real_get(self, key, *args)

    monkeypatch.setattr(S3Store, "get", get)
    return fetched


def _hostile(real: Manifest, case: str, stage: Path) -> dict[str, FileEntry]:
    files = dict(real.files)
    if case == "climbs":
        files["../x"] = files["checkpoint.img"]
    elif case == "unknown":
        files["evil.bin"] = files["checkpoint.img"]
    else:  # beyond the free space: chunks of the largest size, digests of nothing
        fs = os.statvfs(stage.parent)
        count = (fs.f_bavail * fs.f_frsize + FREE_RESERVE) // MAX_CHUNK + 2
        refs = [ChunkRef(secrets.token_bytes(32), MAX_CHUNK) for _ in range(count)]
        files["checkpoint.img"] = FileEntry(size=count * MAX_CHUNK, chunks=refs)
    return files


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "background"])
@pytest.mark.parametrize("keyed", [True, False], ids=["sealed", "unkeyed"])
@pytest.mark.parametrize("case", ["climbs", "unknown", "huge"])
def test_a_hostile_manifest_is_refused_before_any_fetch(
    s3_url: str,
    s3_env: dict[str, str],
    tmp_path: Path,
    chunk_gets: list[str],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    keyed: bool,
    lazy: bool,
) -> None:
    import msgspec

    monkeypatch.setenv("CKPT_CHUNK_CACHE_DIR", str(tmp_path / "cache"))
    key = KEY if keyed else None
    repo = Repository.open(s3_url, key)
    files = {"checkpoint.img": payload(5000, 1), "pages.img": payload(9000, 2)}
    files["pages_meta.img"] = payload(100, 3)
    upload(repo, "img", files)
    stage = tmp_path / "stage"
    real = repo.read_manifest("img")
    forged = msgspec.structs.replace(real, files=_hostile(real, case, stage))
    repo.store.put(repo.manifest_key("img"), encode(forged, key))
    params = {
        "image": f"{s3_url}/img",
        "store_env": s3_env,
        "stage_dir": str(stage),
        "background": lazy,
    }
    chunk_gets.clear()
    with pytest.raises(CkptError) as err:
        remote_image.StagedImage(params, key, lazy=lazy)
    message = str(err.value)
    assert "\n" not in message and len(message) < 400, message
    assert "../x" not in message
    assert chunk_gets == []  # not a byte of any chunk fetched
    assert not stage.exists()  # nothing written
    assert not any((tmp_path / "cache").rglob("*")) if (tmp_path / "cache").exists() else True


def test_inspect_refuses_a_file_no_image_has(s3_url: str, s3_env: dict[str, str]) -> None:
    """``inspect statefile`` stages an image as a restore does, with the same checks."""
    import msgspec

    from .test_cli_image import ckpt

    repo = Repository.open(s3_url)
    upload(repo, "img", {"checkpoint.img": payload(5000, 1)})
    real = repo.read_manifest("img")
    files = {**real.files, "evil.bin": real.files["checkpoint.img"]}
    repo.store.put(
        repo.manifest_key("img"), encode(msgspec.structs.replace(real, files=files), None)
    )
    res = ckpt("inspect", "statefile", f"{s3_url}/img", env=s3_env)
    lines = res.stderr.splitlines()
    assert res.returncode != 0 and len(lines) == 1, res.stderr
    assert "no image has" in lines[0] and "refused before downloading" in lines[0]
