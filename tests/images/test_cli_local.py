"""``ckpt image ls|rm|prune`` on a local directory of image directories, as on a
bucket: the same columns, the same refusal of a parent, removal of image files only."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner, Result

from ckpt.cli import app
from ckpt.errors import CkptError
from ckpt.statefile import open_image

from .conftest import SID, write

runner = CliRunner()


def _error(res: Result) -> tuple[int, str]:
    """The CkptError a command raised (``ckpt``'s main renders it as one line and
    exits with its code): that code and its message."""
    exc = res.exception
    assert isinstance(exc, CkptError), res.output
    assert "\n" not in str(exc)
    return exc.exit_code, str(exc)


def _chain(tmp_path: Path) -> tuple[Path, Path, Path]:
    repo = tmp_path / "repo"
    n0 = write(repo / "n0")
    n1 = write(repo / "n1", parent=n0)
    return repo, n0, n1


def test_ls_lists_a_directory_of_images(tmp_path: Path) -> None:
    repo, n0, _ = _chain(tmp_path)
    (repo / "not-an-image").mkdir()
    (repo / "link").symlink_to(n0)  # a link is never followed into an image
    res = runner.invoke(app, ["image", "ls", str(repo), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["repository"] == str(repo) and doc["unreadable"] == []
    rows = {i["name"]: i for i in doc["images"]}
    assert sorted(rows) == ["n0", "n1"]
    assert rows["n1"]["parent"] == "n0"
    assert rows["n1"]["parent_id"] == open_image(n0).header.image_id.hex()
    assert rows["n0"]["parent"] is None and rows["n0"]["sandbox_id"] == SID
    assert rows["n0"]["image_id"] == open_image(n0).header.image_id.hex()
    size = sum(p.stat().st_size for p in n0.iterdir() if p.is_file())
    assert rows["n0"]["size"] == size > 0 and rows["n0"]["unique"] == size


def test_ls_table_and_file_url(tmp_path: Path) -> None:
    repo, _, _ = _chain(tmp_path)
    res = runner.invoke(app, ["image", "ls", f"file://{repo}"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "images in" in res.stdout and "file:" not in res.stdout
    lines = [line for line in res.stdout.splitlines() if "n0" in line or "n1" in line]
    assert len(lines) == 2 and "NAME" in res.stdout and "PARENT" in res.stdout


def test_ls_says_which_image_is_unreadable(tmp_path: Path) -> None:
    repo, _, n1 = _chain(tmp_path)
    (n1 / "checkpoint.img").write_bytes(b"garbage")
    res = runner.invoke(app, ["image", "ls", str(repo), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [i["name"] for i in doc["images"]] == ["n0"]
    assert [b["name"] for b in doc["unreadable"]] == ["n1"]


def test_ls_of_an_empty_directory(tmp_path: Path) -> None:
    res = runner.invoke(app, ["image", "ls", str(tmp_path)])
    assert res.exit_code == 0 and f"no images in {tmp_path}" in res.output


def test_rm_refuses_a_parent_unless_forced(tmp_path: Path) -> None:
    repo, n0, n1 = _chain(tmp_path)
    code, said = _error(runner.invoke(app, ["image", "rm", str(n0)]))
    assert code == 4 and "is the parent of n1" in said and "--force" in said
    assert n0.is_dir()
    res = runner.invoke(app, ["image", "rm", str(n1), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"removed": str(n1)}
    assert not n1.exists()
    res = runner.invoke(app, ["image", "rm", str(n0)])
    assert res.exit_code == 0, res.output
    assert not n0.exists() and repo.is_dir()


def test_rm_force_removes_a_parent(tmp_path: Path) -> None:
    _, n0, n1 = _chain(tmp_path)
    res = runner.invoke(app, ["image", "rm", str(n0), "--force"])
    assert res.exit_code == 0, res.output
    assert not n0.exists() and n1.is_dir()


def test_rm_removes_image_files_only(tmp_path: Path) -> None:
    _, n0, _ = _chain(tmp_path)
    outside = tmp_path / "precious"
    outside.write_text("keep")
    (n0 / "notes.txt").write_text("mine")
    code, said = _error(runner.invoke(app, ["image", "rm", str(n0), "--force"]))
    assert code == 1 and "notes.txt" in said and "by hand" in said
    assert sorted(os.listdir(n0)) == ["notes.txt"]  # the image's own files went
    assert outside.read_text() == "keep"


def test_rm_of_what_is_not_an_image(tmp_path: Path) -> None:
    _, n0, _ = _chain(tmp_path)
    (tmp_path / "repo" / "link").symlink_to(n0)
    for target in ("link", "missing"):
        res = runner.invoke(app, ["image", "rm", str(tmp_path / "repo" / target), "--force"])
        code, said = _error(res)
        assert code == 3 and "no such image" in said
    assert (n0 / "checkpoint.img").is_file()


def test_prune_collects_only_dead_writers_leftovers(tmp_path: Path) -> None:
    repo, n0, _ = _chain(tmp_path)
    dead = repo / ".n2.tmp-999999999-abc"
    live = repo / f".n3.tmp-{os.getpid()}-abc"
    for d in (dead, live):
        d.mkdir()
        (d / "checkpoint.img").write_bytes(b"half")
    res = runner.invoke(app, ["image", "prune", str(repo), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["removed_leftovers"] == [str(dead)] and doc["left"] == []
    assert not dead.exists() and live.is_dir() and n0.is_dir()
    res = runner.invoke(app, ["image", "prune", str(repo)])
    assert res.exit_code == 0 and "nothing to collect" in res.output


def test_bad_locations_are_one_line_errors(tmp_path: Path) -> None:
    for url in ("http://host/x", "s3://", ""):
        code, said = _error(runner.invoke(app, ["image", "ls", url]))
        assert code == 2, (url, said)


def test_rm_and_prune_take_a_file_url_as_ls_does(tmp_path: Path) -> None:
    repo, n0, n1 = _chain(tmp_path)
    dead = repo / ".n2.tmp-999999999-abc"
    dead.mkdir()
    res = runner.invoke(app, ["image", "prune", f"file://{repo}", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["removed_leftovers"] == [str(dead)]
    code, said = _error(runner.invoke(app, ["image", "rm", f"file://{n0}"]))
    assert code == 4 and "is the parent of n1" in said  # the local rules, not a bucket's
    res = runner.invoke(app, ["image", "rm", f"file://{n1}", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"removed": str(n1)}
    assert not n1.exists() and n0.is_dir() and not Path("file:").exists()
