"""A full disk under the root: every failed write is one line and leaves no temp file;
read-only commands write nothing; a restore whose last write fails kills what it made.

The library half injects ENOSPC into the state writer; the end-to-end half fills a small
tmpfs mounted as the root (root only).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt.errors import SandboxError
from ckpt.sandbox.client import lifecycle, template_client
from ckpt.sandbox.wire import paths
from ckpt.sandbox.wire.paths import CREATING, Root, SandboxState

from .conftest import CGROUP_ROOT, Cli, sandbox_processes
from .test_fault_campaign import paused
from .waiting import gone

# -- the writer itself, ENOSPC injected ---------------------------------------------------


def _state(sandbox_id: str) -> SandboxState:
    return SandboxState(
        id=sandbox_id, pid=0, status=CREATING, workload="http", cgroup=None, created="now"
    )


def test_a_failed_state_write_is_one_line_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = Root(tmp_path / "root")
    root.write(_state("a"))
    before = (root.dir("a") / "state.json").read_text()

    def full(path: Path, data: bytes) -> None:
        path.write_bytes(b"")  # the temp file exists, as after a real failed write
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(paths, "_write_new", full)
    changed = _state("a")
    changed.workload = "nginx"
    with pytest.raises(SandboxError, match=r"cannot write .*state.json: No space left"):
        root.write(changed)
    assert sorted(p.name for p in root.dir("a").iterdir()) == ["state.json"]
    assert (root.dir("a") / "state.json").read_text() == before


def test_root_naming_a_file_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(SandboxError, match="is not a directory"):
        Root(afile).check()
    with pytest.raises(SandboxError, match="is not a directory"):
        Root(afile).ids()


# -- a real full file system ----------------------------------------------------------------


def new_id(tag: str) -> str:
    return f"fd-{tag}-{uuid.uuid4().hex[:6]}"


def fill(where: Path) -> Path:
    """Write a file until the file system takes not one more byte (unbuffered, in
    chunks that shrink to one byte, so no partial page is left free)."""
    path = where / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        chunk = 1 << 16
        while chunk:
            try:
                os.write(fd, b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                chunk //= 2
    finally:
        os.close(fd)
    assert os.statvfs(where).f_bavail == 0
    return path


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Cli]:
    """A CLI whose root is on a 2 MiB tmpfs; everything is removed and unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "CKPT_TEMPLATE": "0"}
    env.pop("CKPT_FAULT", None)
    runner = Cli(mnt / "root", env, set())
    try:
        yield runner
    finally:
        (mnt / "filler").unlink(missing_ok=True)
        root = Root(runner.root)
        for sandbox_id in root.ids():
            lifecycle.delete(root, sandbox_id, force=True)
        template_client.stop(runner.root)
        left = sandbox_processes(runner.root)
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        assert left == []


def one_line(out: subprocess.CompletedProcess[str], *words: str) -> None:
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = [line for line in out.stderr.splitlines() if not line.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    for word in words:
        assert word in lines[0], lines[0]


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob(".state.json.*")]


def nothing_of(cli: Cli, sandbox_id: str, pid: int | None = None) -> None:
    assert not (cli.root / sandbox_id).exists()
    name = Root(cli.root).cgroup_name(sandbox_id)
    assert not list(CGROUP_ROOT.glob(f"*/{name}")) and not (CGROUP_ROOT / name).exists()
    assert pid is None or gone(pid)


@pytest.mark.slow
def test_full_root(small: Cli, tmp_path: Path) -> None:
    x, y, z = new_id("x"), new_id("y"), new_id("z")
    small("run", x, "--workload", "http")
    image = tmp_path / "img"  # outside the small file system
    small("checkpoint", x, "--image-path", str(image), "--leave-running")
    record = (small.root / x / "state.json").read_text()
    fill(small.root.parent)

    # read-only commands work and write nothing
    assert json.loads(small("list", "--json").stdout)[0]["id"] == x
    assert small("state", x).returncode == 0
    assert small("template", "status").returncode == 0
    assert (small.root / x / "state.json").read_text() == record

    # commands that must write say so in one line and leave nothing
    one_line(small("run", y, "--workload", "http", check=False), "No space left")
    nothing_of(small, y)
    one_line(
        small("restore", z, "--image-path", str(image), "--port", "0", check=False),
        "No space left",
    )
    nothing_of(small, z)
    assert temp_files(small.root) == []

    # the disk fills between a restore's start and its last write: it kills what it made
    (small.root.parent / "filler").unlink()
    proc = paused(small, "restore:served", "restore", z, "--image-path", str(image), "--port", "0")
    pid = json.loads((small.root / z / "state.json").read_text())["pid"]
    assert pid and not gone(pid)
    fill(small.root.parent)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    one_line(subprocess.CompletedProcess([], proc.returncode, "", err), "No space left")
    nothing_of(small, z, pid)
    assert temp_files(small.root) == []

    # kill stops it and says its record could not be updated; delete writes no record
    x_pid = json.loads(record)["pid"]
    fill(small.root.parent)  # what z's discarded files freed
    one_line(small("kill", x, check=False), f"sandbox {x} was stopped", "No space left")
    assert gone(x_pid)
    small("delete", "--force", x)
    nothing_of(small, x, x_pid)
    assert temp_files(small.root) == []
