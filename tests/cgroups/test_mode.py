"""Mode detection from mountinfo: unified, hybrid, legacy, unavailable."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt.cgroups import detect as cgmode
from ckpt.cgroups.detect import Layout, Mode, detect_layout, parse_mountinfo, parse_self_cgroup
from ckpt.errors import CgroupError

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""

UNIFIED = """\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
"""

LEGACY = """\
31 23 0:28 / /sys/fs/cgroup ro,relatime - tmpfs tmpfs ro,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
37 31 0:34 / /sys/fs/cgroup/freezer ro,relatime - cgroup cgroup rw,freezer
"""


def test_hybrid_host_is_detected_with_every_mount() -> None:
    lay = parse_mountinfo(HYBRID)
    assert lay.mode is Mode.HYBRID
    assert lay.unified == Path("/sys/fs/cgroup/unified")
    assert lay.v1["cpu"] == Path("/sys/fs/cgroup/cpu")
    assert lay.v1["pids"] == Path("/sys/fs/cgroup/pids")
    assert "name=systemd" not in lay.v1 and "systemd" not in lay.v1


def test_unified_host_has_no_v1_controllers() -> None:
    lay = parse_mountinfo(UNIFIED)
    assert lay.mode is Mode.UNIFIED
    assert lay.unified == Path("/sys/fs/cgroup")
    assert dict(lay.v1) == {}


def test_legacy_host_with_comounted_cpu_and_cpuacct() -> None:
    lay = parse_mountinfo(LEGACY)
    assert lay.mode is Mode.LEGACY
    assert lay.unified is None
    assert lay.v1["cpu"] == lay.v1["cpuacct"] == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert Path("/sys/fs/cgroup/freezer") in lay.read_only


def test_no_cgroup_mounts_means_unavailable() -> None:
    assert parse_mountinfo(UNIFIED.splitlines()[0]).mode is Mode.UNAVAILABLE
    assert parse_mountinfo("").mode is Mode.UNAVAILABLE


def test_cgroup2_elsewhere_without_v1_is_unified() -> None:
    text = "30 22 0:26 / /mnt/cg2 rw - cgroup2 none rw\n"
    lay = parse_mountinfo(text)
    assert lay.mode is Mode.UNIFIED and lay.unified == Path("/mnt/cg2")


def test_escaped_mount_point() -> None:
    text = r"30 22 0:26 / /tmp/my\040cgroup rw - cgroup2 none rw" + "\n"
    assert parse_mountinfo(text, root=Path("/tmp/my cgroup")).unified == Path("/tmp/my cgroup")


@pytest.mark.parametrize("line", ["garbage", "1 2 3 / /x rw", "1 2 3 / /x rw - cgroup2"])
def test_malformed_mountinfo_is_an_error(line: str) -> None:
    with pytest.raises(CgroupError, match="malformed mountinfo line 1"):
        parse_mountinfo(line)


def test_self_cgroup_parsing() -> None:
    own = parse_self_cgroup("4:memory:/process_api/x\n2:cpu,cpuacct:/\n0::/user.slice\n")
    assert own == {"memory": "/process_api/x", "cpu": "/", "cpuacct": "/", "": "/user.slice"}
    lay = Layout(Mode.HYBRID, own=own)
    assert lay.is_nested("memory") and not lay.is_nested("cpu") and not lay.is_nested("pids")


def test_missing_mountinfo_is_unavailable(tmp_path: Path) -> None:
    assert detect_layout(tmp_path / "nope", tmp_path / "nope2").mode is Mode.UNAVAILABLE


def test_detect_layout_reads_files(tmp_path: Path) -> None:
    (tmp_path / "mountinfo").write_text(HYBRID)
    (tmp_path / "cgroup").write_text("4:memory:/limited\n0::/\n")
    lay = detect_layout(tmp_path / "mountinfo", tmp_path / "cgroup")
    assert lay.mode is Mode.HYBRID and lay.is_nested("memory")


def test_mode_is_detected_once_and_matches_this_host() -> None:
    assert cgmode.mode() is detect_layout().mode
    assert cgmode.layout() is cgmode.layout()
