"""Whole-kernel scenarios: checkpoint, restore, and the restored kernel behaves the same."""

from __future__ import annotations

import pytest

from ckpt import kernel, state, statefile
from ckpt.errors import CkptError

from .conftest import (
    MS,
    MemoryPages,
    assert_same_state,
    checkpoint,
    resume_same_instant,
    through_image,
)


@pytest.mark.parametrize("workload", ["empty", "http", "nginx", "files:200"])
def test_workload_restores_to_the_same_fingerprint_and_runs_in_lockstep(workload, engine):
    k = kernel.build_workload(workload)
    k.run_for(120 * MS)
    r, _ = checkpoint(k, engine)
    resume_same_instant(k, r)
    for kk in (k, r):
        kk.run_for(700 * MS)
    assert_same_state(k, r)


@pytest.mark.parametrize("seed", range(8))
def test_random_graph_restores_and_runs_in_lockstep(seed, engine):
    k = kernel.build_workload("graph:150", seed=seed)
    r, _ = checkpoint(k, engine)
    resume_same_instant(k, r)
    for kk in (k, r):
        kk.run_for(40 * MS)
    assert_same_state(k, r)


def test_engines_write_streams_the_other_engine_loads():
    k = kernel.build_workload("graph:80", seed=9)
    k.pause()
    for writer, reader in (("typed", "reflect"), ("reflect", "typed")):
        restored = state.loads(state.dumps(k, engine=writer), engine=reader)
        restored.memory_file.restore_pages(MemoryPages(dict(k.memory_file.pages())))
        assert restored.fingerprint() == k.fingerprint()


def test_http_restore_through_a_real_image_counts_the_restore(tmp_path, engine):
    k = kernel.build_workload("http", id="sb-9")
    k.set_http_listen_address("127.0.0.1", 40000)
    k.http_request("GET", "/")
    r = through_image(k, engine, tmp_path / "img")
    r.resume()
    r.note_restored()
    status, body = r.http_request("GET", "/after")
    assert status == 200 and (body["id"], body["requests"], body["restores"]) == ("sb-9", 2, 1)
    assert r.http_listen_address() == ("127.0.0.1", 40000)


def test_nginx_pages_survive_a_real_compressed_image(tmp_path):
    k = kernel.build_workload("nginx")
    k.pause()
    with statefile.ImageWriter(tmp_path / "img") as img:
        state.save(k, img.state_file)
        summary = img.write_pages(k.memory_file.pages())
    image = statefile.open_image(tmp_path / "img")
    r = state.load(image.state_reader())
    pages = image.open_pages(lazy=False)
    r.memory_file.restore_pages(pages)
    assert r.memory_file.materialize() > 0
    assert dict(r.memory_file.pages()) == dict(k.memory_file.pages())
    assert summary is not None


def test_truncated_and_corrupted_streams_are_errors_not_crashes(engine):
    k = kernel.build_workload("empty", rootfs="minimal")
    k.pause()
    data = state.dumps(k, engine=engine)
    with pytest.raises(CkptError):
        state.loads(data[: len(data) // 2], engine=engine)
    flipped = bytearray(data)
    flipped[len(flipped) // 3] ^= 0xFF
    try:
        loaded = state.loads(bytes(flipped), engine=engine)
    except CkptError:
        return
    # A flip that still decodes must not be mistaken for the original state.
    assert loaded.fingerprint() != k.fingerprint() or bytes(flipped) == data


def test_describe_reports_tasks_files_and_memory():
    k = kernel.build_workload("nginx")
    text = k.describe()
    assert "workload=nginx" in text and "frames" in text and "locked inodes" in text
    assert text.count("nginx [S]") == 5


def test_a_restored_kernel_checkpoints_and_restores_again(engine):
    k = kernel.build_workload("nginx", rootfs="minimal")
    k.run_for(300 * MS)
    r1, _ = checkpoint(k, engine)
    resume_same_instant(k, r1)
    for kk in (k, r1):
        kk.run_for(450 * MS)
    r2, _ = checkpoint(r1, engine)  # r1's pages are still partly in the first page file
    k.pause()
    resume_same_instant(k, r2)
    for kk in (k, r2):
        kk.run_for(450 * MS)
    assert_same_state(k, r2)
    assert dict(r2.memory_file.pages()) == dict(k.memory_file.pages())
