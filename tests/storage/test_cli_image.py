"""``ckpt image ls|rm|prune`` against the real SeaweedFS: through typer's CliRunner (the
command's own output) and through a real subprocess (the console script's one-line
errors and exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ckpt.cli import app
from ckpt.cli.image import human_bytes, parse_duration
from ckpt.storage.repository import CHUNK_SIZE, Repository
from tests.storage.conftest import BUCKET

runner = CliRunner()


def upload(repo: Repository, name: str, pages: bytes, **options: object) -> None:
    with repo.upload(name, sandbox_id=f"sb-{name}", **options) as up:
        up.add_file("checkpoint.img", b"state of " + name.encode())
        up.add_file("pages.img", pages)
        up.commit()


def ckpt(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a real process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "ckpt", *args],
        capture_output=True,
        text=True,
        timeout=50,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_parse_duration_and_sizes() -> None:
    assert parse_duration("90") == 90 and parse_duration("15m") == 900
    assert parse_duration("1h") == 3600 and parse_duration("0.5d") == 43200
    assert human_bytes(512) == "512 B" and human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3 << 30) == "3.0 GiB"


@pytest.mark.slow
def test_ls_json_shows_size_unique_sandbox_and_parent(s3_url: str) -> None:
    repo = Repository.open(s3_url)
    shared = os.urandom(2 * CHUNK_SIZE)
    upload(repo, "base", shared)
    upload(repo, "child", shared + os.urandom(CHUNK_SIZE), parent="base")
    res = runner.invoke(app, ["image", "ls", s3_url, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    by_name = {i["name"]: i for i in doc["images"]}
    assert set(by_name) == {"base", "child"}
    child = by_name["child"]
    assert child["parent"] == "base" and child["sandbox_id"] == "sb-child"
    assert child["size"] == 3 * CHUNK_SIZE + len(b"state of child")
    assert child["unique"] == CHUNK_SIZE + len(b"state of child")  # the shared chunks are not
    assert by_name["base"]["unique"] == len(b"state of base")


@pytest.mark.slow
def test_ls_table_fits_80_columns(s3_url: str) -> None:
    repo = Repository.open(s3_url)
    upload(repo, "an-image-with-a-rather-long-name-for-a-table", os.urandom(1000))
    res = runner.invoke(app, ["image", "ls", s3_url], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, res.stdout
    assert "SANDBOX" in res.stdout and "UNIQUE" in res.stdout and "PARENT" in res.stdout
    assert "sb-an-image" in res.stdout


@pytest.mark.slow
def test_rm_then_prune_removes_its_chunks(s3_url: str) -> None:
    repo = Repository.open(s3_url)
    upload(repo, "keep", os.urandom(1000))
    upload(repo, "gone", os.urandom(CHUNK_SIZE + 5))
    res = runner.invoke(app, ["image", "rm", f"{s3_url}/gone", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"removed": f"{s3_url}/gone"}
    assert [i.name for i in repo.images()] == ["keep"]
    res = runner.invoke(app, ["image", "prune", s3_url, "--grace", "0s", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["removed_chunks"] == 3  # gone's statefile chunk and its two page chunks
    assert doc["removed_bytes"] == CHUNK_SIZE + 5 + len(b"state of gone")
    assert doc["kept_referenced"] == 2
    assert repo.open_image("keep").read_file("pages.img")  # keep is intact


@pytest.mark.slow
def test_prune_keeps_young_chunks_within_the_grace(s3_url: str) -> None:
    repo = Repository.open(s3_url)
    upload(repo, "gone", os.urandom(1000))
    repo.remove("gone")
    res = runner.invoke(app, ["image", "prune", s3_url])  # default grace: 1 h
    assert res.exit_code == 0, res.output
    assert "removed 0 chunks" in res.stdout and "kept 0 referenced and 2 younger" in res.stdout


@pytest.mark.slow
def test_subprocess_ls_table_and_one_line_errors(s3_url: str, s3_env: dict[str, str]) -> None:
    repo = Repository.open(s3_url)
    upload(repo, "img", os.urandom(1000))
    res = ckpt("image", "ls", s3_url)
    assert res.returncode == 0, res.stderr
    assert "img" in res.stdout and "sb-img" in res.stdout
    cases = {
        "rm-missing": (["image", "rm", f"{s3_url}/nope"], {}, "no such image"),
        "bad-grace": (["image", "prune", s3_url, "--grace", "soon"], {}, "give a duration"),
        "wrong-key": (
            ["image", "ls", s3_url],
            {"AWS_SECRET_ACCESS_KEY": "wrong-secret"},
            "refused the credentials",
        ),
        "no-bucket": (["image", "ls", "s3://no-such-bucket-here/x"], {}, "no such bucket"),
        "bad-url": (["image", "rm", f"s3://{BUCKET}"], {}, "name the image"),
    }
    for case, (args, env, expected) in cases.items():
        res = ckpt(*args, env=env)
        not_found = case in ("rm-missing", "no-bucket")
        assert res.returncode == (3 if not_found else 1), (case, res.stdout, res.stderr)
        lines = res.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (case, res.stderr)
        assert expected in lines[0], (case, lines[0])
    assert [i.name for i in repo.images()] == ["img"]  # nothing was touched


@pytest.mark.parametrize("command", ["ls", "prune"])
def test_local_directory_repository(command: str, tmp_path: os.PathLike[str]) -> None:
    repo = Repository.open(str(tmp_path))
    upload(repo, "img", os.urandom(1000))
    res = runner.invoke(app, ["image", command, str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    if command == "ls":
        assert [i["name"] for i in doc["images"]] == ["img"]
    else:
        assert doc["removed_chunks"] == 0 and doc["kept_referenced"] == 2
