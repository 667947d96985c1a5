"""A crafted chain cannot reach outside its repository.

Whoever can write one image directory can write any parent link into an unkeyed
image.  The adversary here plants a child whose parent link names another root's image
(by absolute path, by ``..`` climbing out, through a symbolic link beside it or in place
of its ``rounds``), with the victim's real image id and with a wrong one.  Every such
chain is refused before the victim is opened, and no message carries the victim's id."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ckpt.cli import app
from ckpt.errors import CkptError, StatefileError
from ckpt.sandbox.client import precopy_options
from ckpt.statefile import ImageWriter, chain, open_image
from ckpt.statefile.format import PAGE_SIZE

SID = "victim-sb"
SECRET_PAGE = b"s3cr3t!!" * (PAGE_SIZE // 8)


def _image(path: Path, meta: dict, pages: dict[int, bytes]) -> Path:
    metadata = {"sandbox_id": SID, "kind": chain.PRE_DUMP, **meta}
    with ImageWriter(path, metadata=metadata) as img:
        img.write_pages(sorted(pages.items()))
    return path


@pytest.fixture
def victim(tmp_path: Path) -> tuple[Path, str]:
    """Another root's image holding a secret page, and its image id."""
    path = _image(tmp_path / "other-root" / "images" / "r0", {}, {0: SECRET_PAGE})
    return path, open_image(path).header.image_id.hex()


def _crafted(tmp_path: Path, link_path: str, image_id: str) -> Path:
    meta = {"parent": {"image_id": image_id, "path": link_path}, "chain_depth": 1}
    return _image(tmp_path / "attacker" / "repo" / "child", meta, {1: bytes(PAGE_SIZE)})


def _escapes(tmp_path: Path, victim: Path) -> dict[str, str]:
    """Each way a link could name ``victim``, set up beside the crafted child."""
    repo = tmp_path / "attacker" / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "link").symlink_to(victim)
    return {
        "absolute": str(victim),
        "climbing": os.path.relpath(victim, repo / "child"),
        "dotdot-dotdot": "../../../other-root/images/r0",
        "symlink-beside": "../link",
        "dot-dot-name": "../..",
    }


@pytest.mark.parametrize(
    "how", ["absolute", "climbing", "dotdot-dotdot", "symlink-beside", "dot-dot-name"]
)
@pytest.mark.parametrize("right_id", [True, False], ids=["victim-id", "wrong-id"])
def test_a_link_out_of_the_repository_is_refused(
    tmp_path: Path, victim: tuple[Path, str], how: str, right_id: bool
) -> None:
    path, victim_id = victim
    link = _escapes(tmp_path, path)[how]
    child = _crafted(tmp_path, link, victim_id if right_id else "ab" * 16)
    with pytest.raises(CkptError) as info:
        chain.open_chain(open_image(child), None)
    assert victim_id not in str(info.value)
    assert "\n" not in str(info.value)
    entries = chain.describe(open_image(child), None, verify=True)
    assert len(entries) == 1 and "error" in entries[0]
    assert victim_id not in repr(entries)


def test_rounds_replaced_by_a_symlink_is_refused(tmp_path: Path, victim: tuple[Path, str]) -> None:
    path, victim_id = victim
    child = _crafted(tmp_path, "rounds/r0", victim_id)
    (child / "rounds").symlink_to(path.parent)
    with pytest.raises(StatefileError, match="rounds") as info:
        chain.open_chain(open_image(child), None)
    assert victim_id not in str(info.value)


def test_an_old_absolute_link_says_how_to_go_on(tmp_path: Path, victim: tuple[Path, str]) -> None:
    path, victim_id = victim
    child = _crafted(tmp_path, str(path), victim_id)
    with pytest.raises(StatefileError, match="leaves the image's directory") as info:
        chain.open_chain(open_image(child), None)
    assert "../NAME" in str(info.value) and "full one" in str(info.value)


def test_a_replaced_sibling_parent_never_shows_its_id(tmp_path: Path) -> None:
    a = _image(tmp_path / "a", {}, {0: SECRET_PAGE})
    b = _image(tmp_path / "b", chain.link_metadata(tmp_path / "b", open_image(a)), {})
    _image(tmp_path / "a2", {}, {0: bytes(PAGE_SIZE)})
    os.rename(tmp_path / "a", tmp_path / "a-old")
    os.rename(tmp_path / "a2", tmp_path / "a")
    planted = open_image(tmp_path / "a").header.image_id.hex()
    with pytest.raises(CkptError, match="another image") as info:
        chain.open_chain(open_image(b), None)
    assert planted not in str(info.value)


def test_links_are_written_relative_and_beside(tmp_path: Path) -> None:
    a = _image(tmp_path / "repo" / "a", {}, {0: SECRET_PAGE})
    link = chain.link_metadata(tmp_path / "repo" / "b", open_image(a))
    assert link["parent"]["path"] == "../a"
    b = _image(tmp_path / "repo" / "b", link, {})
    assert [i.dir for i in chain.open_chain(open_image(b), None)] == [b, a]


def test_a_parent_elsewhere_is_refused_when_the_child_is_written(tmp_path: Path) -> None:
    a = _image(tmp_path / "one" / "a", {}, {0: SECRET_PAGE})
    with pytest.raises(StatefileError, match="not beside") as info:
        chain.link_metadata(tmp_path / "two" / "b", open_image(a))
    assert str(tmp_path / "one" / "b") in str(info.value)  # where to write it instead
    with pytest.raises(StatefileError, match="not beside"):
        precopy_options.cli_options(True, str(a), False, str(tmp_path / "two" / "b"))
    assert precopy_options.cli_options(True, str(a), False, str(tmp_path / "one" / "b")) == {
        "pre_dump": True,
        "parent": str(a),
    }


def test_inspect_of_a_crafted_chain_shows_nothing_of_the_victim(
    tmp_path: Path, victim: tuple[Path, str]
) -> None:
    path, victim_id = victim
    runner = CliRunner()
    for i, link in enumerate((str(path), "../link")):
        child = _crafted(tmp_path / str(i), link, "ab" * 16)
        if link == "../link":
            (child.parent / "link").symlink_to(path)
        for extra in ([], ["--json"]):
            res = runner.invoke(app, ["inspect", "statefile", str(child), "--verify", *extra])
            flat = "".join(res.output.split())  # rich wraps long paths anywhere
            assert "thechainisbroken" in flat or "leavestheimage's" in flat
            assert victim_id not in flat
