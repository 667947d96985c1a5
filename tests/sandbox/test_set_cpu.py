"""``lifecycle.set_cpu``: the one verb that changes a running sandbox's CPU quota (``ckpt
cycle`` uses it between quotas).  It acts on this root's own cgroup for the ID, writes
the quota and records it; a sandbox without a cgroup can only stay uncapped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt.errors import CgroupError, SandboxError
from ckpt.sandbox.client import lifecycle
from ckpt.sandbox.wire.paths import Root

from .conftest import cgroup_dirs, quota_allowed

pytestmark = pytest.mark.slow


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Root]:
    r = Root(tmp_path / "root")
    yield r
    for sandbox_id in r.ids():
        lifecycle.delete(r, sandbox_id, force=True)


def _quota_us(sandbox_id: str) -> str | None:
    """cpu.cfs_quota_us (v1) or cpu.max (v2) of the sandbox's group, as the kernel says."""
    for d in cgroup_dirs(sandbox_id):
        for name in ("cpu.cfs_quota_us", "cpu.max"):
            if (d / name).exists():
                return (d / name).read_text().split()[0]
    return None


def test_without_a_cgroup_only_uncapped_is_accepted(root: Root) -> None:
    lifecycle.run(root, "bare", "empty", ignore_cgroups=True, template=False)
    assert lifecycle.set_cpu(root, "bare", None).cgroup is None
    with pytest.raises(CgroupError, match=r"runs without a cgroup, so quota 0\.5 cannot be"):
        lifecycle.set_cpu(root, "bare", 0.5)
    assert lifecycle.state(root, "bare").cpu is None


def test_a_stopped_sandbox_is_refused(root: Root) -> None:
    lifecycle.run(root, "gone", "empty", ignore_cgroups=True, template=False)
    lifecycle.kill(root, "gone")
    with pytest.raises(SandboxError, match="it is stopped"):
        lifecycle.set_cpu(root, "gone", None)


def test_the_quota_reaches_the_sandbox_s_own_cgroup_and_its_record(root: Root) -> None:
    ok, reason = quota_allowed()
    if not ok:
        pytest.skip(f"needs root and a cpu controller: {reason}")
    lifecycle.run(root, "capped", "empty", template=False)
    st = lifecycle.set_cpu(root, "capped", 0.25)
    assert st.cpu == 0.25 and lifecycle.state(root, "capped").cpu == 0.25
    assert _quota_us("capped") == "25000"
    assert lifecycle.set_cpu(root, "capped", None).cpu is None
    assert _quota_us("capped") in ("-1", "max")
    assert lifecycle.state(root, "capped").cpu is None
