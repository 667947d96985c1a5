"""ckpt acts only on what it made: cgroups scoped per root, and records checked before use.

Two roots holding the same sandbox ID have their own groups; a record whose ``cgroup``
names another group, whose pid is an unrelated process's, or whose ``ctl.sock`` is a link
to another sandbox's socket makes ckpt refuse or ignore it, never act on the other one.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from ckpt.sandbox.wire.paths import Root

from .conftest import CGROUP_ROOT, Cli, quota_allowed
from .waiting import gone

pytestmark = pytest.mark.slow


def new_id(tag: str) -> str:
    return f"tr-{tag}-{uuid.uuid4().hex[:6]}"


def edit(cli: Cli, sandbox_id: str, **fields: object) -> dict:
    """Rewrite fields of a sandbox's state.json as a local user with write access could;
    returns the original record."""
    path = cli.root / sandbox_id / "state.json"
    original = json.loads(path.read_text())
    path.write_text(json.dumps({**original, **fields}))
    return original


def put_back(cli: Cli, sandbox_id: str, original: dict) -> None:
    (cli.root / sandbox_id / "state.json").write_text(json.dumps(original))


def one_line_error(out: subprocess.CompletedProcess[str], *words: str) -> None:
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    for word in words:
        assert word in lines[0], lines[0]


def serving(cli: Cli, sandbox_id: str) -> bool:
    return cli.get(sandbox_id)["requests"] >= 0


@pytest.fixture
def sleeper() -> Iterator[psutil.Process]:
    """An unrelated process that must survive whatever ckpt is told."""
    proc = subprocess.Popen(["sleep", "120"])
    yield psutil.Process(proc.pid)
    proc.kill()
    proc.wait()


@pytest.fixture
def cold(cli: Cli) -> Cli:
    cli.env["CKPT_TEMPLATE"] = "0"
    return cli


def quota_of(root: Path, sandbox_id: str) -> str:
    """The group's CPU quota as the kernel holds it (v1 cfs_quota_us, or v2 cpu.max)."""
    name = Root(root).cgroup_name(sandbox_id)
    for path in (CGROUP_ROOT / "cpu" / name / "cpu.cfs_quota_us", CGROUP_ROOT / name / "cpu.max"):
        if path.exists():
            return path.read_text().split()[0]
    raise AssertionError(f"no quota file for {name}")


# -- two roots, one ID --------------------------------------------------------------------


def test_two_roots_same_id_have_their_own_cgroups(cold: Cli, tmp_path: Path) -> None:
    ok, reason = quota_allowed()
    if not ok:
        pytest.skip(f"needs a CPU quota (root and a cgroup fs): {reason}")
    other = Cli(tmp_path / "root2", cold.env, set())
    sandbox_id = new_id("two")
    cold("run", sandbox_id, "--workload", "http", "--cpu", "0.25")
    try:
        other("run", sandbox_id, "--workload", "http", "--cpu", "0.5")
        first, second = cold.state(sandbox_id), other.state(sandbox_id)
        assert first["cgroup"] != second["cgroup"]
        assert first["cgroup"] == Root(cold.root).cgroup_name(sandbox_id)
        assert quota_of(cold.root, sandbox_id) == "25000"
        assert quota_of(other.root, sandbox_id) == "50000"
        assert serving(cold, sandbox_id) and serving(other, sandbox_id)
        other("kill", sandbox_id)
        assert gone(second["pid"])
        assert serving(cold, sandbox_id)  # the first root's sandbox is untouched
        assert cold.state(sandbox_id)["status"] == "running"
        assert quota_of(cold.root, sandbox_id) == "25000"
        assert first["pid"] in [int(p) for p in _procs(cold.root, sandbox_id)]
    finally:
        if (other.root / sandbox_id).exists():
            other("delete", "--force", sandbox_id)
    assert not list(CGROUP_ROOT.glob(f"*/{Root(other.root).cgroup_parent()}"))


def _procs(root: Path, sandbox_id: str) -> list[str]:
    name = Root(root).cgroup_name(sandbox_id)
    for d in [CGROUP_ROOT / "unified" / name, CGROUP_ROOT / name]:
        if (d / "cgroup.procs").exists():
            return (d / "cgroup.procs").read_text().split()
    return []


# -- records edited by someone else ---------------------------------------------------------


def test_cgroup_field_naming_another_sandbox_is_refused(cold: Cli) -> None:
    x, y = new_id("x"), new_id("y")
    cold("run", x, "--workload", "http")
    cold("run", y, "--workload", "http")
    y_state = cold.state(y)
    if not y_state["cgroup"]:
        pytest.skip("sandboxes run without a cgroup here (not root)")
    original = edit(cold, x, cgroup=y_state["cgroup"])
    for verb in (("kill", x), ("delete", "--force", x), ("pause", x)):
        one_line_error(cold(*verb, check=False), "refusing", y_state["cgroup"])
    assert not gone(y_state["pid"]) and serving(cold, y)
    assert cold.state(y)["status"] == "running"
    edit(cold, x, cgroup="system.slice")  # a group that is no sandbox's at all
    one_line_error(cold("delete", "--force", x, check=False), "refusing", "system.slice")
    put_back(cold, x, original)
    cold("delete", "--force", x)
    assert serving(cold, y)


@pytest.mark.parametrize("cgroups", ["cgroup", "no-cgroup"])
def test_pid_of_an_unrelated_process_is_never_killed(
    cold: Cli, sleeper: psutil.Process, cgroups: str
) -> None:
    x = new_id("pid")
    cold("run", x, "--workload", "http", *(["--ignore-cgroups"] if cgroups == "no-cgroup" else []))
    real = cold.state(x)["pid"]
    edit(cold, x, pid=sleeper.pid, pid_start=sleeper.create_time())
    assert cold.state(x)["status"] == "running"  # its real process still serves
    one_line_error(cold("pause", x, check=False), "not by sandbox")  # its socket's peer
    out = cold("kill", x)
    assert out.stdout.strip() == f"sandbox {x} stopped"
    assert sleeper.is_running() and sleeper.status() != psutil.STATUS_ZOMBIE
    assert gone(real)  # the sandbox itself was found (cgroup, or its socket) and killed
    cold("delete", x)
    assert sleeper.is_running()


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_socket_leading_to_another_sandbox_is_refused(cold: Cli, tmp_path: Path, how: str) -> None:
    x, y = new_id("sx"), new_id("sy")
    cold("run", x, "--workload", "http")
    cold("run", y, "--workload", "http")
    sock_x, sock_y = Root(cold.root).socket_path(x), Root(cold.root).socket_path(y)
    os.unlink(sock_x)
    (os.symlink if how == "symlink" else os.link)(sock_y, sock_x)
    words = ("symlink",) if how == "symlink" else ("not by sandbox",)
    one_line_error(cold("pause", x, check=False), *words)
    image = tmp_path / "img"
    one_line_error(cold("checkpoint", x, "--image-path", str(image), check=False), *words)
    assert not image.exists()
    y_state = cold.state(y)
    assert y_state["status"] == "running" and serving(cold, y)
    assert cold.state(x)["status"] == "running"
