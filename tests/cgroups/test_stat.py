"""The lean stat reader against fake trees: values, units, missing and malformed files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt import cgroups
from ckpt.cgroups.stat import CgroupStat, StatReader, hugepage_sizes, parse_hugepage_dirs
from ckpt.errors import CgroupError

from .fakefs import SIZES, make_tree


def write(path: Path, text: str) -> None:
    path.write_text(text)


def test_hugepage_directory_names_become_size_names() -> None:
    names = ["hugepages-1048576kB", "hugepages-2048kB", "junk", "hugepages-64kB", "hugepages-xkB"]
    assert parse_hugepage_dirs(names) == ("64KB", "2MB", "1GB")


def test_hugepage_sizes_are_computed_once_per_process(tmp_path: Path) -> None:
    (tmp_path / "hugepages-2048kB").mkdir()
    first = hugepage_sizes(tmp_path)
    (tmp_path / "hugepages-1048576kB").mkdir()
    assert hugepage_sizes(tmp_path) is first == ("2MB",)
    assert hugepage_sizes(tmp_path / "missing") == ()


def test_unified_stat_reads_cpu_memory_pids_hugetlb(tmp_path: Path) -> None:
    lay, fsys = make_tree(tmp_path / "t", "unified")
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    d = mgr.paths["unified"]
    write(
        d / "cpu.stat",
        "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\ncore_sched.force_idle_usec 0\n"
        "nr_periods 40\nnr_throttled 7\nthrottled_usec 123456\nnr_bursts 0\nburst_usec 0\n",
    )
    write(d / "memory.current", "8192000\n")
    write(d / "memory.peak", "9000000\n")
    write(d / "pids.current", "3\n")
    write(d / "hugetlb.2MB.current", "4194304\n")
    st = StatReader(d, {}, sizes=SIZES).read()
    assert (st.usage_usec, st.user_usec, st.system_usec) == (1_500_000, 1_000_000, 500_000)
    assert (st.nr_periods, st.nr_throttled, st.throttled_usec) == (40, 7, 123456)
    assert (st.memory_current, st.memory_peak, st.pids_current) == (8192000, 9000000, 3)
    assert st.hugetlb == {"2MB": 4194304, "1GB": 0}
    assert mgr.cpu_usage_usec() == 1_500_000


def test_v1_stat_converts_nanoseconds(tmp_path: Path) -> None:
    lay, fsys = make_tree(tmp_path / "t", "legacy")
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    p = mgr.paths
    write(p["cpuacct"] / "cpuacct.usage", "2500000999\n")
    write(p["cpuacct"] / "cpuacct.usage_user", "2000000000\n")
    write(p["cpuacct"] / "cpuacct.usage_sys", "500000000\n")
    write(
        p["cpu"] / "cpu.stat",
        "nr_periods 10\nnr_throttled 4\nthrottled_time 3000000\nnr_bursts 0\n",
    )
    write(p["memory"] / "memory.usage_in_bytes", "4096\n")
    write(p["memory"] / "memory.max_usage_in_bytes", "8192\n")
    write(p["pids"] / "pids.current", "2\n")
    st = mgr.stat()
    assert st.usage_usec == 2_500_000 and st.user_usec == 2_000_000 and st.system_usec == 500_000
    assert (st.nr_periods, st.nr_throttled, st.throttled_usec) == (10, 4, 3000)
    assert (st.memory_current, st.memory_peak, st.pids_current) == (4096, 8192, 2)
    assert mgr.cpu_usage_usec() == 2_500_000


def test_hybrid_takes_cpu_from_v1_and_hugetlb_from_cgroup2(tmp_path: Path) -> None:
    lay, fsys = make_tree(tmp_path / "t", "hybrid")
    mgr = cgroups.create("ckpt/a", layout=lay, fsys=fsys)
    write(mgr.paths["cpuacct"] / "cpuacct.usage", "7000\n")
    write(mgr.paths["unified"] / "cpu.stat", "usage_usec 999\nuser_usec 1\nsystem_usec 2\n")
    write(mgr.paths["unified"] / "hugetlb.1GB.current", "1073741824\n")
    st = StatReader(
        mgr.paths["unified"], {k: v for k, v in mgr.paths.items() if k != "unified"}, SIZES
    ).read()
    assert st.usage_usec == 7  # from cpuacct.usage (ns), not cgroup2's cpu.stat
    assert st.hugetlb == {"2MB": 0, "1GB": 1073741824}


def test_key_is_matched_only_at_a_line_start(tmp_path: Path) -> None:
    write(tmp_path / "cpu.stat", "xnr_periods 5\nnr_periods 6\nusage_usec 1\n")
    st = StatReader(tmp_path, {}, sizes=()).read()
    assert st.nr_periods == 6


def test_figures_without_files_are_none(tmp_path: Path) -> None:
    write(tmp_path / "cpu.stat", "usage_usec 10\nuser_usec 6\nsystem_usec 4\n")
    st = StatReader(tmp_path, {}, sizes=SIZES).read()
    assert st.usage_usec == 10
    assert st.nr_periods is None and st.memory_current is None and st.pids_current is None
    assert st.hugetlb == {}


@pytest.mark.parametrize("content", ["garbage\n", "", "12 34\n", "1.5\n"])
def test_malformed_single_value_names_the_file(tmp_path: Path, content: str) -> None:
    write(tmp_path / "cpu.stat", "usage_usec 1\n")
    write(tmp_path / "pids.current", "1\n")
    reader = StatReader(tmp_path, {}, sizes=())
    write(tmp_path / "pids.current", content)
    with pytest.raises(CgroupError, match=r"malformed .*pids\.current"):
        reader.read()


def test_malformed_keyed_value_names_the_file(tmp_path: Path) -> None:
    write(tmp_path / "cpu.stat", "usage_usec lots\n")
    with pytest.raises(CgroupError, match=r"malformed .*cpu\.stat"):
        StatReader(tmp_path, {}, sizes=()).read()


def test_file_vanishing_after_the_plan_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "cpu.stat", "usage_usec 1\n")
    write(tmp_path / "memory.current", "1\n")
    reader = StatReader(tmp_path, {}, sizes=())
    (tmp_path / "memory.current").unlink()
    with pytest.raises(CgroupError, match=r"cannot read .*memory\.current"):
        reader.read()


def test_oversized_file_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "cpu.stat", "usage_usec 1\n" + "x" * 9000)
    with pytest.raises(CgroupError, match="larger than"):
        StatReader(tmp_path, {}, sizes=()).read()


def test_cpu_usage_without_accounting_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CgroupError, match="no CPU accounting file"):
        StatReader(tmp_path, {}, sizes=()).cpu_usage_usec()


def test_snapshots_are_independent(tmp_path: Path) -> None:
    write(tmp_path / "cpu.stat", "usage_usec 1\n")
    reader = StatReader(tmp_path, {}, sizes=())
    first = reader.read()
    write(tmp_path / "cpu.stat", "usage_usec 2\n")
    second = reader.read()
    assert (first.usage_usec, second.usage_usec) == (1, 2)
    assert first != second


def test_cgroupstat_from_values_and_dict() -> None:
    st = CgroupStat.from_values(SIZES, {"2MB": 5}, usage_usec=3, pids_current=1)
    assert st.as_dict()["usage_usec"] == 3 and st.hugetlb == {"2MB": 5}
    assert st.memory_peak is None
    assert st == CgroupStat.from_values(SIZES, {"2MB": 5}, usage_usec=3, pids_current=1)
    assert "usage_usec=3" in repr(st)
    with pytest.raises(TypeError, match="unknown figure"):
        CgroupStat.from_values(bogus=1)
