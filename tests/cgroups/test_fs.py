"""The one read/write helper and the control-file parsers: errors name the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt import cgroups
from ckpt.cgroups import fs, v1
from ckpt.errors import CgroupError

from .fakefs import make_tree


def test_write_and_read_round_trip(tmp_path: Path) -> None:
    f = tmp_path / "cpu.max"
    f.write_text("")
    fs.CgroupFS().write(f, "25000 100000")
    assert fs.CgroupFS().read(f) == "25000 100000"


def test_write_to_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(
        CgroupError, match=rf"cannot open {tmp_path}/nope for writing: No such file"
    ):
        fs.CgroupFS().write(tmp_path / "nope", "1")


def test_read_of_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(CgroupError, match=rf"cannot read {tmp_path}/nope: No such file"):
        fs.CgroupFS().read(tmp_path / "nope")


def test_read_of_binary_garbage_is_malformed(tmp_path: Path) -> None:
    (tmp_path / "cgroup.events").write_bytes(b"\xff\xfe")
    with pytest.raises(CgroupError, match=r"malformed .*cgroup\.events"):
        fs.CgroupFS().read(tmp_path / "cgroup.events")


def test_mkdir_reports_existing_and_rmdir_tolerates_missing(tmp_path: Path) -> None:
    fsys = fs.CgroupFS()
    assert fsys.mkdir(tmp_path / "g") is True
    assert fsys.mkdir(tmp_path / "g") is False
    fsys.rmdir(tmp_path / "g")
    fsys.rmdir(tmp_path / "g")
    assert not (tmp_path / "g").exists()
    with pytest.raises(CgroupError, match=r"cannot create cgroup .*No such file"):
        fsys.mkdir(tmp_path / "missing" / "g")


def test_rmdir_of_a_non_empty_dir_names_it(tmp_path: Path) -> None:
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "x").write_text("")
    with pytest.raises(CgroupError, match=rf"cannot remove cgroup {tmp_path}/g"):
        fs.CgroupFS().rmdir(tmp_path / "g")


@pytest.mark.parametrize("text", ["", "x", "1 2", "0x10"])
def test_parse_int_rejects_garbage(text: str) -> None:
    with pytest.raises(CgroupError, match="malformed /f: expected an integer"):
        fs.parse_int(text, Path("/f"))


def test_parse_keyed_and_pids() -> None:
    assert fs.parse_keyed("populated 1\nfrozen 0\n\n", Path("/e")) == {
        "populated": "1",
        "frozen": "0",
    }
    with pytest.raises(CgroupError, match="malformed /e: line 'frozen' has no value"):
        fs.parse_keyed("frozen\n", Path("/e"))
    assert fs.parse_pids("12\n3\n12\n", Path("/p")) == [3, 12]
    with pytest.raises(CgroupError, match="malformed /p: expected one pid per line"):
        fs.parse_pids("12\nabc\n", Path("/p"))


def test_missing_cpu_max_names_the_file(tmp_path: Path) -> None:
    lay, fsys = make_tree(tmp_path / "t", "unified")
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    (mgr.paths["unified"] / "cpu.max").unlink()
    with pytest.raises(CgroupError, match=r"cannot read .*ckpt/a/cpu\.max"):
        mgr.cpu_quota()


def test_garbage_freezer_state_names_the_file(tmp_path: Path) -> None:
    lay, fsys = make_tree(tmp_path / "t", "legacy")
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    (mgr.paths["freezer"] / "freezer.state").write_text("MELTED\n")
    with pytest.raises(
        CgroupError, match=r"malformed .*ckpt/a/freezer\.state: unexpected state 'MELTED'"
    ):
        v1.freezer_state(fsys, mgr.paths["freezer"])
