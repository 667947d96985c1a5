"""Fault campaign: SIGKILL of the CLI, of the sandbox and of the template at named steps
of ``run``, ``checkpoint`` (with and without ``--force``) and ``restore``.  After each,
``ckpt list`` shows the sandbox as it really is (stopped exactly when nothing of it is
alive) and ``ckpt delete --force`` leaves no process, cgroup, socket, temporary image
directory or record.

The CLI stops itself (SIGSTOP) at a step named by ``CKPT_FAULT=pause:VERB:STEP``
(``testhooks.pause_point``), where the test kills it, or kills the sandbox or the template
and lets it go on.  Mid-checkpoint, the sandbox stalls through ``CKPT_FAULT``.
Kill points and cases are counted in ``CASES`` below (printed with ``-s``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from ckpt.sandbox.client import template_client
from ckpt.sandbox.wire.paths import Root

from .conftest import CGROUP_ROOT, Cli
from .waiting import gone, wait_for

pytestmark = pytest.mark.slow

RUN_STEPS = ("record", "cgroup", "spawned", "ready", "served")
STEP_WAIT_S = 60.0


def new_id(tag: str) -> str:
    return f"fc-{tag}-{uuid.uuid4().hex[:6]}"


# -- what is left of a sandbox, seen from outside ckpt -------------------------------------


def group_dirs(root: Path, sandbox_id: str) -> list[Path]:
    """This root's cgroup directories for the sandbox, in every hierarchy."""
    name = Root(root).cgroup_name(sandbox_id)
    found = [p for p in CGROUP_ROOT.glob(f"*/{name}") if p.is_dir()]
    return found + ([CGROUP_ROOT / name] if (CGROUP_ROOT / name).is_dir() else [])


def live_pids(root: Path, sandbox_id: str, recorded: dict | None) -> set[int]:
    """Processes of the sandbox: its cgroup's members, and its recorded pid if that is
    still the process it names (same start time)."""
    pids: set[int] = set()
    for d in group_dirs(root, sandbox_id):
        pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
    if recorded and recorded.get("pid"):
        try:
            proc = psutil.Process(recorded["pid"])
            if abs(proc.create_time() - recorded["pid_start"]) < 0.05:
                pids.add(proc.pid)
        except psutil.NoSuchProcess:
            pass
    return {p for p in pids if not gone(p)}


def read_record(root: Path, sandbox_id: str) -> dict | None:
    try:
        return json.loads((root / sandbox_id / "state.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def one_line_error(rc: int, err: str) -> None:
    """A failed command says so in one ``error:`` line (notes aside), no traceback."""
    if rc == 0:
        return
    lines = [line for line in err.splitlines() if not line.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err


def assert_accounted(cli: Cli, sandbox_id: str, image: Path | None = None) -> None:
    """``list`` tells the truth about the sandbox; ``delete --force`` leaves nothing."""
    recorded = read_record(cli.root, sandbox_id)
    listed = {d["id"]: d for d in json.loads(cli("list", "--json").stdout)}
    assert sandbox_id in listed, f"{sandbox_id} missing from `ckpt list`: {sorted(listed)}"
    status = listed[sandbox_id]["status"]
    live = live_pids(cli.root, sandbox_id, recorded)
    if live:
        assert status != "stopped", f"list says stopped, but {sorted(live)} live"
    else:
        assert status == "stopped", f"list says {status}, but nothing of it is alive"
    out = cli("delete", "--force", sandbox_id, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"sandbox {sandbox_id} deleted"
    assert not any(not gone(p) for p in live), f"processes left: {sorted(live)}"
    assert live_pids(cli.root, sandbox_id, recorded) == set()
    assert group_dirs(cli.root, sandbox_id) == []
    assert not (cli.root / sandbox_id).exists()
    assert not Root(cli.root).socket_path(sandbox_id).exists()
    if image is not None:
        temps = [p.name for p in image.parent.iterdir() if p.name.startswith(f".{image.name}.")]
        assert temps == [], f"temporary image directories left: {temps}"


# -- driving the CLI -----------------------------------------------------------------------


def paused(cli: Cli, step: str, *args: str) -> subprocess.Popen[str]:
    """Start ``ckpt ARGS`` and return once it has stopped itself at ``step``."""
    proc = cli.popen(*args, env={"CKPT_FAULT": f"pause:{step}"})

    def stopped() -> str | None:
        if proc.poll() is not None:
            return "exited"
        try:
            return "stopped" if psutil.Process(proc.pid).status() == "stopped" else None
        except psutil.NoSuchProcess:
            return "exited"

    if wait_for(stopped, f"ckpt {args[0]} to stop at {step}", STEP_WAIT_S) == "exited":
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"ckpt {args[0]} exited {proc.returncode} before {step}: {err}")
    return proc


def kill_cli(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.communicate(timeout=30)


def go_on(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """Let a paused CLI finish; its exit code and stderr."""
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def settle(cli: Cli, sandbox_id: str, step: str) -> None:
    """A sandbox whose CLI died before it wrote its ``ready`` line exits when it writes
    it (EPIPE); one that wrote it first waits for a boot that never comes.  Wait until
    it is one or the other, so what ``list`` sees is not about to change."""
    if step == "spawned":
        pid = read_record(cli.root, sandbox_id)["pid"]
        log = cli.root / sandbox_id / "sandbox.log"
        wait_for(
            lambda: gone(pid) or f"sandbox {sandbox_id} ready on" in log.read_text(),
            "the unready sandbox to exit or be ready",
            30,
        )


def kill_sandbox(cli: Cli, sandbox_id: str) -> None:
    pid = read_record(cli.root, sandbox_id)["pid"]
    assert pid, "no pid recorded yet"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: gone(pid), f"sandbox pid {pid} to die", 30)


def kill_template(cli: Cli) -> None:
    assert template_client.kill(cli.root), "no template to kill"


def cold(cli: Cli) -> Cli:
    cli.env["CKPT_TEMPLATE"] = "0"
    return cli


@pytest.fixture(params=["cold", "template"])
def mcli(request: pytest.FixtureRequest, tcli: Cli) -> Cli:
    """The CLI, starting sandboxes cold or from the template (started up front)."""
    if request.param == "cold":
        return cold(tcli)
    tcli("template", "start")
    return tcli


@pytest.fixture(params=["cgroup", "no-cgroup"])
def group_args(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """Sandboxes in their cgroup, or without one: found then by pid and socket only."""
    return () if request.param == "cgroup" else ("--ignore-cgroups",)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An http sandbox's image, restored (with --port 0) by the restore cases."""
    base = tmp_path_factory.mktemp("campaign")
    env = {**os.environ, "CKPT_TEMPLATE": "0"}
    env.pop("CKPT_FAULT", None)
    maker = Cli(base / "root", env, set())
    sandbox_id = new_id("src")
    maker("run", sandbox_id, "--workload", "http")
    maker("checkpoint", sandbox_id, "--image-path", str(base / "img"))
    maker("delete", sandbox_id)
    yield base / "img"


# -- SIGKILL of the CLI ----------------------------------------------------------------


@pytest.mark.parametrize("step", RUN_STEPS)
def test_cli_killed_during_run(mcli: Cli, group_args: tuple[str, ...], step: str) -> None:
    sandbox_id = new_id("run")
    kill_cli(paused(mcli, f"run:{step}", "run", sandbox_id, "--workload", "http", *group_args))
    settle(mcli, sandbox_id, step)
    assert_accounted(mcli, sandbox_id)


@pytest.mark.parametrize("step", RUN_STEPS)
def test_cli_killed_during_restore(
    mcli: Cli, group_args: tuple[str, ...], image: Path, step: str
) -> None:
    sandbox_id = new_id("rst")
    args = ("restore", sandbox_id, "--image-path", str(image), "--port", "0", *group_args)
    kill_cli(paused(mcli, f"restore:{step}", *args))
    settle(mcli, sandbox_id, step)
    assert_accounted(mcli, sandbox_id)


@pytest.mark.parametrize("force", [False, True], ids=["new", "force"])
@pytest.mark.parametrize("step", ["sending", "replied"])
def test_cli_killed_during_checkpoint(
    cli: Cli, image: Path, tmp_path: Path, step: str, force: bool
) -> None:
    cold(cli)
    sandbox_id = new_id("ckp")
    cli("run", sandbox_id, "--workload", "http")
    pid = cli.state(sandbox_id)["pid"]
    target = tmp_path / "out.img"
    args = ["checkpoint", sandbox_id, "--image-path", str(target)]
    if force:
        subprocess.run(["cp", "-a", str(image), str(target)], check=True)
        args.append("--force")
    kill_cli(paused(cli, f"checkpoint:{step}", *args))
    if step == "replied":  # the sandbox was told to stop: let it, so the truth is settled
        wait_for(lambda: gone(pid), "the checkpointed sandbox to exit", 30)
    assert_accounted(cli, sandbox_id, target)
    if step == "replied":
        assert (target / "checkpoint.img").is_file()


def _stalled_checkpoint(cli: Cli, tmp_path: Path, force: bool, image: Path) -> tuple:
    """A sandbox stalled half-way through writing its image, and the CLI waiting on it."""
    release = tmp_path / "release"
    cold(cli)
    sandbox_id = new_id("stl")
    cli(
        "run",
        sandbox_id,
        "--workload",
        "http",
        env={"CKPT_FAULT": f"checkpoint-stall:60:{release}"},
    )
    target = tmp_path / "out.img"
    args = ["checkpoint", sandbox_id, "--image-path", str(target)]
    if force:
        subprocess.run(["cp", "-a", str(image), str(target)], check=True)
        args.append("--force")
    proc = cli.popen(*args)
    log = cli.root / sandbox_id / "sandbox.log"
    wait_for(lambda: "stalling" in log.read_text(), "the sandbox to stall mid-checkpoint", 60)
    return sandbox_id, target, release, proc


@pytest.mark.parametrize("then", ["sandbox-finishes", "sandbox-killed"])
def test_cli_killed_mid_checkpoint(cli: Cli, image: Path, tmp_path: Path, then: str) -> None:
    sandbox_id, target, release, proc = _stalled_checkpoint(cli, tmp_path, False, image)
    pid = cli.state(sandbox_id)["pid"]
    kill_cli(proc)
    if then == "sandbox-finishes":
        release.touch()
    else:
        kill_sandbox(cli, sandbox_id)
    wait_for(lambda: gone(pid), "the sandbox to exit", 30)
    assert_accounted(cli, sandbox_id, target)
    assert (target / "checkpoint.img").is_file() == (then == "sandbox-finishes")


# -- SIGKILL of the sandbox --------------------------------------------------------------


@pytest.mark.parametrize("verb", ["run", "restore"])
@pytest.mark.parametrize("step", ["spawned", "ready"])
def test_sandbox_killed_during_start(mcli: Cli, image: Path, verb: str, step: str) -> None:
    sandbox_id = new_id("sbx")
    if verb == "run":
        args = ("run", sandbox_id, "--workload", "http")
    else:
        args = ("restore", sandbox_id, "--image-path", str(image), "--port", "0")
    proc = paused(mcli, f"{verb}:{step}", *args)
    kill_sandbox(mcli, sandbox_id)
    rc, err = go_on(proc)
    assert rc != 0, "the command reported success for a sandbox that was killed"
    one_line_error(rc, err)
    assert not (mcli.root / sandbox_id).exists()  # a failed start leaves nothing
    assert group_dirs(mcli.root, sandbox_id) == []


@pytest.mark.parametrize("force", [False, True], ids=["new", "force"])
def test_sandbox_killed_mid_checkpoint(cli: Cli, image: Path, tmp_path: Path, force: bool) -> None:
    sandbox_id, target, _release, proc = _stalled_checkpoint(cli, tmp_path, force, image)
    before = (target / "checkpoint.img").stat().st_ino if force else None
    kill_sandbox(cli, sandbox_id)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    one_line_error(proc.returncode, err)
    assert "no image was committed" in err
    assert_accounted(cli, sandbox_id, target)
    if force:  # the previous image is still there, untouched
        assert (target / "checkpoint.img").stat().st_ino == before
        assert "the previous image there is unchanged" in err
    else:
        assert not target.exists()


def test_sandbox_killed_before_checkpoint_is_sent(cli: Cli, tmp_path: Path) -> None:
    cold(cli)
    sandbox_id = new_id("snd")
    cli("run", sandbox_id, "--workload", "http")
    target = tmp_path / "out.img"
    proc = paused(cli, "checkpoint:sending", "checkpoint", sandbox_id, "--image-path", str(target))
    kill_sandbox(cli, sandbox_id)
    rc, err = go_on(proc)
    assert rc != 0
    one_line_error(rc, err)
    assert_accounted(cli, sandbox_id, target)


# -- SIGKILL of the template -------------------------------------------------------------


@pytest.mark.parametrize(
    "verb,step",
    [("run", "cgroup"), ("run", "spawned"), ("restore", "cgroup"), ("restore", "spawned")],
)
def test_template_killed_during_start(tcli: Cli, image: Path, verb: str, step: str) -> None:
    tcli("template", "start")
    sandbox_id = new_id("tpl")
    if verb == "run":
        args = ("run", sandbox_id, "--workload", "http")
    else:
        args = ("restore", sandbox_id, "--image-path", str(image), "--port", "0")
    proc = paused(tcli, f"{verb}:{step}", *args)
    kill_template(tcli)
    rc, err = go_on(proc)
    one_line_error(rc, err)
    assert_accounted(tcli, sandbox_id)


def test_template_killed_between_checkpoint_and_restore(tcli: Cli, tmp_path: Path) -> None:
    tcli("template", "start")
    sandbox_id = new_id("tpc")
    tcli("run", sandbox_id, "--workload", "http")
    target = tmp_path / "out.img"
    proc = paused(tcli, "checkpoint:replied", "checkpoint", sandbox_id, "--image-path", str(target))
    kill_template(tcli)
    rc, err = go_on(proc)
    one_line_error(rc, err)
    out = tcli("restore", sandbox_id, "--image-path", str(target), check=False)
    one_line_error(out.returncode, out.stderr)
    assert_accounted(tcli, sandbox_id, target)


CASES = {
    "cli killed during run": len(RUN_STEPS) * 2 * 2,  # cold/template x cgroup/none
    "cli killed during restore": len(RUN_STEPS) * 2 * 2,
    "cli killed during checkpoint": 4,
    "cli killed mid-checkpoint": 2,
    "sandbox killed during run/restore": 8,
    "sandbox killed during checkpoint": 3,
    "template killed": 5,
}
