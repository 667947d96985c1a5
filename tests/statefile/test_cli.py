"""``ckpt inspect statefile`` and ``ckpt bench statefile`` through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ckpt import state, statefile
from ckpt.cli import app
from ckpt.errors import StatefileError
from tests.statefile.conftest import KEY, sample_pages

runner = CliRunner()


@state.savable
@dataclass(eq=False)
class SfInspectNode:
    label: str
    peer: SfInspectNode | None = None


@pytest.fixture
def image(tmp_path: Path) -> Path:
    a = SfInspectNode("alpha")
    b = SfInspectNode("[bold]beta[/bold]", a)
    a.peer = b
    with statefile.ImageWriter(tmp_path / "img", metadata={"workload": "test"}) as img:
        img.note_save(state.save(a, img.state_file, engine="typed"), "typed")
        img.write_pages(sample_pages())
    return tmp_path / "img"


def test_inspect_human(image: Path) -> None:
    res = runner.invoke(app, ["inspect", "statefile", str(image), "--objects", "2", "--verify"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "integrity: OK (crc32" in out
    assert "SfInspectNode" in out and "test" in out
    assert "→#1" in out and "→#2" in out  # references
    assert "[bold]beta[/bold]" in out  # user data is not read as markup
    assert "stream: every record decoded" in out
    assert "scanned" in out and "10 pages" in out


def test_inspect_json(image: Path) -> None:
    res = runner.invoke(app, ["inspect", "statefile", str(image / "checkpoint.img"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert {"metadata", "types", "pages", "integrity"} <= doc.keys()
    assert doc["integrity"]["ok"] is True
    assert doc["metadata"]["engine"] == "typed"
    (row,) = [t for t in doc["types"] if t["name"].endswith("SfInspectNode")]
    assert row["count"] == 2 and row["fields"] == ["label", "peer"] and row["bytes"] > 0
    assert doc["pages"]["scanned"] == 10 and doc["pages"]["zero"] == 3
    assert doc["objects"] == []


def test_inspect_json_objects(image: Path) -> None:
    res = runner.invoke(app, ["inspect", "statefile", str(image), "--json", "--objects", "5"])
    objs = json.loads(res.output)["objects"]
    assert [o["fields"]["label"] for o in objs] == ["alpha", "[bold]beta[/bold]"]
    assert objs[0]["fields"]["peer"] == f"→#{objs[1]['id']}"


def test_inspect_signed_image(tmp_path: Path) -> None:
    with statefile.ImageWriter(tmp_path / "img", key=KEY) as img:
        state.save(SfInspectNode("x"), img.state_file)
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    key_file.chmod(0o600)
    res = runner.invoke(app, ["inspect", "statefile", str(tmp_path / "img"), "--json"])
    assert res.exit_code == 0
    assert json.loads(res.output)["integrity"]["ok"] is None  # not verifiable without key
    args = ["inspect", "statefile", str(tmp_path / "img"), "--key-file", str(key_file)]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0
    assert json.loads(res.output)["integrity"] == {
        "algorithm": "hmac-sha256",
        "keyed": True,
        "checked": True,
        "ok": True,
        "detail": "header, metadata and 1 chunks",
    }
    key_file.write_bytes(b"x" * 32)
    key_file.chmod(0o600)
    res = runner.invoke(app, args)
    assert res.exit_code == 1
    assert "integrity: FAILED" in res.output


def test_inspect_corrupt_pages_fails(image: Path) -> None:
    f = image / "pages.img"
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    f.write_bytes(data)
    res = runner.invoke(app, ["inspect", "statefile", str(image)])
    assert res.exit_code == 0  # pages not read without --verify
    res = runner.invoke(app, ["inspect", "statefile", str(image), "--verify", "--json"])
    assert res.exit_code == 1
    doc = json.loads(res.output)
    assert doc["integrity"]["ok"] is False and "pages.img" in doc["pages"]["error"]


def test_inspect_not_a_statefile_raises(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"hello")
    res = runner.invoke(app, ["inspect", "statefile", str(junk)])
    assert res.exit_code != 0
    assert isinstance(res.exception, StatefileError)


def test_inspect_not_a_statefile_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk [x]"
    junk.write_bytes(b"hello, not an image")
    # Wide COLUMNS: the CLI's error console wraps long lines at the terminal width.
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), COLUMNS="500")
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt", "inspect", "statefile", str(junk)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"error: {junk}: not a ckpt statefile (bad magic at offset 0)"
    assert "Traceback" not in proc.stderr + proc.stdout


def test_bench_statefile_small(tmp_path: Path) -> None:
    args = ["bench", "statefile", "--size-mib", "1", "--pages-mib", "1", "--count", "1"]
    res = runner.invoke(app, [*args, "--no-memory", "--json", "--dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    names = {(r["name"], r["variant"]) for r in doc["results"]}
    assert ("Write/incompressible", "copy") in names
    assert ("Read/compressible", "zstd+hmac") in names
    assert ("Write/compressible", "zstd+aead") in names
    assert ("Pages/write", "zstd") in names
    assert all(r["wall_ns"] > 0 for r in doc["results"])
    assert doc["pages"]["zero"] * 2 == doc["pages"]["scanned"]
    assert doc["pages"]["zero_pages_cost_bytes"] == 32  # the pages.img header only
    assert list(tmp_path.iterdir()) == []  # the suite cleans up after itself
