"""``inspect statefile`` says what is wrong in one line, and never more than it knows:
deep metadata, an unsized or oversized zstd frame, a signed image read without its key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from typer.testing import CliRunner

from ckpt import state, statefile
from ckpt.errors import StatefileError
from ckpt.statefile import image as image_mod
from ckpt.statefile.chunks import decompress_chunk
from ckpt.statefile.format import CODEC_ZSTD
from tests.statefile.conftest import KEY, sample_pages, write_image

runner = CliRunner()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckpt", "inspect", "statefile", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )


@pytest.mark.parametrize("depth", [100, 100_000], ids=["over-the-limit", "past-recursion"])
def test_deeply_nested_metadata_is_one_line(
    tmp_path: Path, monkeypatch, depth: int, watchdog: None
) -> None:
    deep = b'{"workload":' + b"[" * depth + b"]" * depth + b"}"
    monkeypatch.setattr(image_mod, "encode_metadata", lambda meta: deep)
    write_image(tmp_path / "img", b"state", sample_pages())
    monkeypatch.undo()
    with pytest.raises(StatefileError, match="nested"):
        statefile.open_image(tmp_path / "img")
    res = _cli(str(tmp_path / "img"))
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "nested" in res.stderr, res.stderr


def test_a_statefile_linked_to_proc_self_mem_is_one_line(tmp_path: Path) -> None:
    img = write_image(tmp_path / "img", b"state", sample_pages())
    (img / "checkpoint.img").unlink()
    (img / "checkpoint.img").symlink_to("/proc/self/mem")
    res = _cli(str(img))
    assert res.returncode == 1
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_a_zstd_frame_without_its_size_says_so() -> None:
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"x" * 10_000)
    with pytest.raises(StatefileError) as err:
        decompress_chunk(frame, CODEC_ZSTD, 4096, "f: chunk 0")
    msg = str(err.value)
    assert "does not declare" in msg and "4096" in msg and "-1" not in msg


def test_a_zstd_frame_declaring_too_much_names_the_limit() -> None:
    frame = zstandard.ZstdCompressor().compress(bytes(1 << 24))
    with pytest.raises(StatefileError) as err:
        decompress_chunk(frame, CODEC_ZSTD, 4096, "f: chunk 0")
    assert "declares 16777216 bytes, more than the 4096" in str(err.value)


def test_verify_without_the_key_is_not_reported_verified(tmp_path: Path) -> None:
    from ckpt.cli import app

    with statefile.ImageWriter(tmp_path / "img", key=KEY) as img:
        state.save({"plain": [1, 2, 3]}, img.state_file)
        img.write_pages(sample_pages())
    res = runner.invoke(app, ["inspect", "statefile", str(tmp_path / "img"), "--verify"])
    assert res.exit_code == 1, res.output
    assert "NOT VERIFIED" in res.output and "pass --key-file" in res.output
    assert not any(line.split()[:2] == ["verified", "yes"] for line in res.output.splitlines()), (
        res.output
    )
    args = ["inspect", "statefile", str(tmp_path / "img"), "--verify", "--json"]
    doc = json.loads(runner.invoke(app, args).output)
    assert doc["verify"] == {
        "requested": True,
        "complete": False,
        "detail": "the image is signed: pass --key-file to verify it",
    }
    assert doc["pages"]["verified"] is False
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    key_file.chmod(0o600)
    res = runner.invoke(app, [*args, "--key-file", str(key_file)])
    assert res.exit_code == 0
    doc = json.loads(res.output)
    assert doc["verify"]["complete"] is True and doc["pages"]["verified"] is True
    # Without --verify nothing was asked: a signed image shows, exit 0, as before.
    res = runner.invoke(app, ["inspect", "statefile", str(tmp_path / "img")])
    assert res.exit_code == 0 and "not verified" in res.output
