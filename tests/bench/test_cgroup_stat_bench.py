"""The cgroup-stat benchmark: its naive reader agrees with stat(), and the command runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ckpt import cgroups
from ckpt.bench import cgroup_stat
from ckpt.bench.cgroup_stat import naive_stat
from ckpt.bench.harness import BenchError
from ckpt.cgroups.stat import StatReader
from ckpt.cli import app
from tests.cgroups.fakefs import SIZES, make_tree


@pytest.mark.parametrize("kind", ["unified", "hybrid", "legacy"])
def test_naive_reader_agrees_with_stat(tmp_path: Path, kind: str) -> None:
    lay, fsys = make_tree(tmp_path / "t", kind)
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    paths = mgr.paths
    unified = paths.get("unified")
    v1 = {k: v for k, v in paths.items() if k != "unified"}
    for d in set(paths.values()):
        if (d / "pids.current").exists():
            (d / "pids.current").write_text("4\n")
        if (d / "cpuacct.usage").exists():
            (d / "cpuacct.usage").write_text("123456789\n")
        if (d / "hugetlb.2MB.current").exists():
            (d / "hugetlb.2MB.current").write_text("2097152\n")
    lean = StatReader(unified, v1, sizes=SIZES).read().as_dict()
    assert naive_stat(unified, v1).as_dict() == lean
    assert lean["pids_current"] == 4


def _root_ok() -> bool:
    return os.geteuid() == 0 and cgroups.available_for_quota()[0]


@pytest.mark.skipif(not _root_ok(), reason="needs root and a cgroup filesystem")
def test_bench_command_json_and_cleanup(monkeypatch: pytest.MonkeyPatch) -> None:
    # cgroups are host-wide: another ``ckpt bench cgroup-stat`` on this host (or one a
    # crashed run left behind) has bench-stat-* groups too, so check exactly the groups
    # this run made, recorded as the bench creates them.
    made: list[Path] = []
    create = cgroup_stat.create

    def recording_create(name: str, *args: object, **kwargs: object) -> object:
        mgr = create(name, *args, **kwargs)
        made.extend(Path(p) for p in getattr(mgr, "paths", {}).values())
        return mgr

    monkeypatch.setattr(cgroup_stat, "create", recording_create)
    result = CliRunner().invoke(
        app, ["bench", "cgroup-stat", "--count", "2", "--batch", "5", "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    variants = {r["variant"]: r for r in doc["results"]}
    assert set(variants) == {"naive", "lean"}
    assert variants["lean"]["n"] == 2 and variants["lean"]["wall_ns"] > 0
    assert doc["time_ratio"] > 0 and doc["blocks_ratio"] >= 0
    assert made and all(p.name.startswith("bench-stat-") for p in made)
    assert [p for p in made if p.exists()] == []


def test_bench_command_rejects_bad_batch() -> None:
    result = CliRunner().invoke(app, ["bench", "cgroup-stat", "--batch", "0"])
    assert result.exit_code != 0
    assert isinstance(result.exception, BenchError)
    assert "--batch must be at least 1" in str(result.exception)
