"""The warm sandbox template through the real CLI: present, absent, killed, wedged and
from another version; cgroup membership and quota of a forked sandbox; 20 parallel
restores; the request count across restores; the ``ckpt template`` verbs.

Every wait is bounded and ends as soon as the event happens; no test asserts a timing.
The ``cli`` fixture asserts that no process (template included) and no cgroup is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from ckpt.sandbox.client import template_client
from ckpt.sandbox.client.childenv import child_env
from ckpt.sandbox.host.http import get_json
from ckpt.sandbox.wire import handover
from ckpt.sandbox.wire import template_proto as proto
from ckpt.sandbox.wire.paths import Root

from .conftest import CGROUP_ROOT, Cli, cgroup_dirs, quota_allowed, sandbox_processes
from .waiting import gone, wait_for

pytestmark = pytest.mark.slow

T = TypeVar("T")
WAIT_S = 90.0  # for waits that decide an outcome; each ends as soon as the event happens
TAG = os.getpid()  # cgroups are host-wide: IDs unique to this test run
TEMPLATE_CMD = (sys.executable, "-m", "ckpt.sandbox.template")


def sid(name: str) -> str:
    return f"tpl{name}-{TAG}"


@pytest.fixture
def tcli(cli: Cli) -> Cli:
    """``cli`` with the template enabled whatever the caller's environment says."""
    for key in ("CKPT_TEMPLATE", "CKPT_TEMPLATE_IDLE_S"):
        cli.env.pop(key, None)
    return cli


def serving(root: Path, *, not_pid: int | None = None) -> dict[str, Any]:
    """Wait for a template of the current code version (other than ``not_pid``)."""

    def ready() -> dict[str, Any] | None:
        info = template_client.status(root)
        if info and info["pid"] != not_pid and info["version"] == proto.version():
            return info
        return None

    return wait_for(ready, f"a template serving {root}")


def info_pid(root: Path) -> int:
    """The template pid recorded in ROOT/template.json, checked to be a template."""
    info = json.loads((root / proto.INFO_FILE).read_text())
    pid = info["pid"]
    cmd = psutil.Process(pid).cmdline()
    assert cmd[0] == f"ckpt template {root.absolute()}" and not any(cmd[1:]), cmd
    return pid


def template_pids(root: Path) -> list[int]:
    """Live template processes of ``root``: processes with a template's title or
    command line that are no sandbox's (a forked sandbox has the template's command
    line until it names itself)."""
    sandboxes = set()
    for d in root.iterdir() if root.is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            sandboxes.add(json.loads((d / "state.json").read_text()).get("pid"))
    return sorted(
        p.pid
        for p in sandbox_processes(root)
        if _is_template(p.cmdline(), root) and p.pid not in sandboxes
    )


def _is_template(cmd: list[str], root: Path) -> bool:
    return "ckpt.sandbox.template" in cmd or cmd[:1] == [f"ckpt template {root.absolute()}"]


def started(out: subprocess.CompletedProcess[str]) -> tuple[str, str, dict[str, Any]]:
    """``(sandbox_start, cold_reason, whole JSON)`` from ``run/restore --json``."""
    data = json.loads(out.stdout)
    counters = data["timings"]["counters"]
    return counters["sandbox_start"], counters.get("cold_reason", ""), data


def requests(cli: Cli, sandbox_id: str) -> int:
    return cli.get(sandbox_id)["requests"]


def run_http(
    cli: Cli, sandbox_id: str, *extra: str, pre: tuple[str, ...] = ()
) -> tuple[str, str, dict[str, Any]]:
    """``ckpt [PRE] run ID --workload http [EXTRA]``; PRE are global options."""
    cli.ids.add(sandbox_id)  # tracked for the leak check even after global options
    args = ["run", sandbox_id, "--workload", "http", "--port", "0", "--json", *extra]
    return started(cli(*pre, *args, timeout=120))


def restore(
    cli: Cli,
    sandbox_id: str,
    image: Path,
    *extra: str,
    pre: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> tuple[str, str, dict[str, Any]]:
    cli.ids.add(sandbox_id)
    args = ["restore", sandbox_id, "--image-path", str(image), "--port", "0", "--json", *extra]
    return started(cli(*pre, *args, env=env, timeout=120))


# -- present, absent, killed, wedged, another version ----------------------------------


def test_absent_then_present_for_restore_and_run(tcli: Cli, tmp_path: Path) -> None:
    a, b, c = sid("a"), sid("b"), sid("c")
    how, why, _ = run_http(tcli, a, pre=("--no-template",))
    assert (how, why) == ("cold", "--no-template")
    image = tmp_path / "img"
    tcli("checkpoint", a, "--image-path", str(image))
    assert not (tcli.root / proto.INFO_FILE).exists()  # --no-template starts none
    assert template_pids(tcli.root) == []

    how, why, _ = restore(tcli, a, image)  # the first command that wants one
    assert (how, why) == ("cold", "no template running")
    first = requests(tcli, a)
    info = serving(tcli.root)
    assert info["spawned"] == 0
    assert info_pid(tcli.root) == info["pid"]

    how, _, _ = run_http(tcli, b)
    assert how == "template"
    assert requests(tcli, b) == 1  # a fresh http workload
    how, _, _ = restore(tcli, c, image)
    assert how == "template"
    assert requests(tcli, c) == first  # the image's count, one more request each
    assert tcli.get(c)["restores"] == 1
    after = template_client.status(tcli.root)
    assert after is not None and after["pid"] == info["pid"] and after["spawned"] == 2


def test_killed_template_means_cold_start_then_a_fresh_one(tcli: Cli) -> None:
    a, b, c, d = sid("a"), sid("b"), sid("c"), sid("d")
    how, why, _ = run_http(tcli, a)
    assert (how, why) == ("cold", "no template running")
    old = serving(tcli.root)["pid"]
    how, _, _ = run_http(tcli, b)  # b is forked from the template about to die
    assert how == "template"
    before = {x: requests(tcli, x) for x in (a, b)}

    pid = info_pid(tcli.root)
    assert pid == old
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: gone(pid), "the killed template to exit")
    for x in (a, b):  # killing the template never kills a sandbox
        assert requests(tcli, x) == before[x] + 1

    how, why, _ = run_http(tcli, c)
    assert how == "cold" and "not running" in why
    assert requests(tcli, c) >= 1
    fresh = serving(tcli.root, not_pid=old)
    how, _, _ = run_http(tcli, d)
    assert how == "template"
    assert template_client.status(tcli.root)["pid"] == fresh["pid"]
    assert template_pids(tcli.root) == [fresh["pid"]]


def test_wedged_template_is_killed_and_the_command_starts_cold(tcli: Cli) -> None:
    a, b = sid("a"), sid("b")
    tcli("template", "start")
    old = serving(tcli.root)["pid"]
    how, _, _ = run_http(tcli, a)
    assert how == "template"
    os.kill(old, signal.SIGSTOP)
    try:
        how, why, _ = run_http(tcli, b)  # waits out the client's reply timeout
    finally:
        if not gone(old):
            os.kill(old, signal.SIGCONT)
    assert how == "cold" and "wedged" in why
    wait_for(lambda: gone(old), "the wedged template to be gone")  # the client killed it
    assert requests(tcli, a) >= 1 and requests(tcli, b) >= 1
    fresh = serving(tcli.root, not_pid=old)
    assert template_pids(tcli.root) == [fresh["pid"]]


def _start_stale(root: Path) -> subprocess.Popen:
    """A template of another code version for ``root``, serving."""
    root.mkdir(parents=True, mode=0o700, exist_ok=True)
    sock = proto.socket_path(str(root))
    with open(root / proto.LOG_FILE, "ab") as log:
        stale = subprocess.Popen(
            [*TEMPLATE_CMD, "--root", str(root.absolute()), "--socket", sock, "--version", "old"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=child_env(),
        )
    wait_for(
        lambda: (
            (proto.read_info(str(root)) or {}).get("state") == "serving" and os.path.exists(sock)
        ),
        "the stale template to serve",
    )
    return stale


def test_template_of_another_version_exits_and_the_command_starts_cold(tcli: Cli) -> None:
    a, b = sid("a"), sid("b")
    stale = _start_stale(tcli.root)
    try:
        assert proto.read_info(str(tcli.root))["version"] == "old"
        how, why, _ = run_http(tcli, a)
        assert how == "cold" and "another version" in why
        assert stale.wait(timeout=WAIT_S) == 0  # it exits by itself once told
        fresh = serving(tcli.root)
        assert fresh["version"] == proto.version() != "old"
        how, _, _ = run_http(tcli, b)
        assert how == "template"
        assert requests(tcli, a) >= 1 and requests(tcli, b) >= 1
    finally:
        if stale.poll() is None:
            stale.kill()
        stale.wait(timeout=WAIT_S)


def test_a_stale_template_holding_sockets_gives_way_to_a_fresh_one(tcli: Cli) -> None:
    """A checkpoint taken before ckpt was upgraded left its listener with the old
    template; the next command must still get a fresh template of the new code (and
    not start cold, every time, until the old one's holds expire)."""
    a, b = sid("a"), sid("b")
    stale = _start_stale(tcli.root)
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30)
        sock.connect(proto.socket_path(str(tcli.root)))
        held = json.dumps({"op": "hold", "id": sid("old"), "kinds": ["listen"]}) + "\n"
        socket.send_fds(sock, [held.encode()], [listener.fileno()])
        assert json.loads(sock.makefile().readline())["ok"] is True
        sock.close()

        how, why, _ = run_http(tcli, a)
        assert how == "cold" and "another version" in why

        def settled() -> str | None:  # the command has started its fresh one, if any
            info = template_client.status(tcli.root)
            if info and info["version"] == proto.version():
                return "fresh"
            if not [p for p in template_pids(tcli.root) if p != stale.pid]:
                return "no fresh template runs beside the stale one"
            return None

        assert wait_for(settled, "a fresh template, or its exit") == "fresh"
        fresh = template_client.status(tcli.root)
        assert fresh["held"].get(sid("old"), {}).get("sockets") == 1  # taken over
        assert stale.wait(timeout=WAIT_S) == 0
        how, _, _ = run_http(tcli, b)
        assert how == "template"
    finally:
        listener.close()
        if stale.poll() is None:
            stale.kill()
        stale.wait(timeout=WAIT_S)


def test_no_template_flag_and_env_force_cold_starts(tcli: Cli, tmp_path: Path) -> None:
    a, b, c = sid("a"), sid("b"), sid("c")
    tcli("template", "start")
    info = serving(tcli.root)
    how, why, _ = run_http(tcli, a, pre=("--no-template",))
    assert (how, why) == ("cold", "--no-template")
    image = tmp_path / "img"
    tcli("checkpoint", a, "--image-path", str(image))
    how, why, _ = restore(tcli, b, image, env={"CKPT_TEMPLATE": "0"})
    assert (how, why) == ("cold", "--no-template")
    how, why, _ = restore(tcli, c, image, pre=("--no-template",))
    assert (how, why) == ("cold", "--no-template")
    assert requests(tcli, b) == requests(tcli, c)  # both from the same image
    after = template_client.status(tcli.root)
    assert after["pid"] == info["pid"] and after["spawned"] == 0


# -- cgroups and quota -----------------------------------------------------------------


def _cgroup_lines(pid: int) -> dict[str, str]:
    """``/proc/PID/cgroup`` as {controllers: path} (``""`` for the unified hierarchy)."""
    out = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        out[controllers] = path
    return out


def _cpu_ticks_s(pid: int) -> float:
    """User + system CPU seconds of the whole process (all threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cgroup_usage_s(dirs: list[Path]) -> float | None:
    for d in dirs:
        if (d / "cpuacct.usage").is_file():
            return int((d / "cpuacct.usage").read_text()) / 1e9
    for d in dirs:
        if (d / "cpu.stat").is_file():
            for line in (d / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
    return None


def _quota(dirs: list[Path]) -> float | None:
    for d in dirs:
        if (d / "cpu.cfs_quota_us").is_file():
            quota = int((d / "cpu.cfs_quota_us").read_text())
            return quota / int((d / "cpu.cfs_period_us").read_text())
        if (d / "cpu.max").is_file():
            quota, period = (d / "cpu.max").read_text().split()
            return int(quota) / int(period)
    return None


def test_forked_sandbox_is_in_its_cgroup_under_its_quota(tcli: Cli, tmp_path: Path) -> None:
    ok, reason = quota_allowed()
    if not ok:
        pytest.skip(f"no CPU quota here: {reason}")
    a, b = sid("a"), sid("b")
    tcli("template", "start")
    tpl = serving(tcli.root)["pid"]
    run_http(tcli, a)
    image = tmp_path / "img"
    tcli("checkpoint", a, "--image-path", str(image))
    how, _, data = restore(tcli, b, image, "--cpu", "0.25")
    assert how == "template" and data["cpu"] == 0.25
    pid, group = data["pid"], data["cgroup"]
    assert group == Root(tcli.root).cgroup_name(b)
    depth = len(group.split("/"))  # the group's directory is this far below its mount

    dirs = cgroup_dirs(b)
    assert dirs, "no cgroup directory for the sandbox"
    for d in dirs:  # in every hierarchy's group, alone
        assert (d / "cgroup.procs").read_text().split() == [str(pid)], d
    # /proc/PID/cgroup agrees, hierarchy by hierarchy ("" is the unified one)
    lines = {("unified" if k == "" else k): v for k, v in _cgroup_lines(pid).items()}
    for d in dirs:
        real = d.resolve()  # "cpu" may be a link to "cpu,cpuacct"
        hierarchy = "unified" if real.parents[depth - 1] == CGROUP_ROOT else real.parts[-depth - 1]
        assert lines.get(hierarchy) == f"/{group}", (d, lines)
    assert all(path != f"/{group}" for path in _cgroup_lines(tpl).values())  # not the template
    assert _quota(dirs) == pytest.approx(0.25)

    # Its CPU is charged to the group: the group has used at least what the process
    # has (it joined before running anything), and keeps counting as it works.
    used0, own0 = _cgroup_usage_s(dirs), _cpu_ticks_s(pid)
    assert used0 is not None
    assert used0 >= own0 - 0.011  # /proc counts whole clock ticks, rounded down
    host, _, port = data["address"].rpartition(":")

    def worked() -> bool:
        for _ in range(20):
            assert get_json(host, int(port))[0] == 200
        return _cpu_ticks_s(pid) - own0 >= 0.1

    wait_for(worked, "the sandbox to use 0.1 s of CPU")
    used1, own1 = _cgroup_usage_s(dirs), _cpu_ticks_s(pid)
    # Across two readings, one tick each way: own0 was rounded down (the process delta
    # can read a tick high), and the group's counter may not yet hold the tick of a
    # thread running as it is read.
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert used1 - used0 >= (own1 - own0) - 2 * tick - 0.001
    assert used1 >= own1 - 0.011
    assert "forked from the warm template" in (tcli.root / b / "sandbox.log").read_text()


# -- many at once, and across restores ------------------------------------------------


def test_twenty_parallel_restores_from_one_template(tcli: Cli, tmp_path: Path) -> None:
    src = sid("src")
    tcli("template", "start")
    before = serving(tcli.root)
    run_http(tcli, src)
    image = tmp_path / "img"
    tcli("checkpoint", src, "--image-path", str(image))
    ids = [sid(f"p{i:02d}") for i in range(20)]
    tcli.ids.update(ids)
    procs = {
        x: tcli.popen("restore", x, "--image-path", str(image), "--port", "0", "--json")
        for x in ids
    }
    results: dict[str, dict[str, Any]] = {}
    for x, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        assert proc.returncode == 0, f"restore {x}: {out}\n{err}"
        results[x] = json.loads(out)
    hows = {x: r["timings"]["counters"]["sandbox_start"] for x, r in results.items()}
    assert set(hows.values()) == {"template"}, hows
    pids = [r["pid"] for r in results.values()]
    assert len(set(pids)) == 20
    # The checkpoint handed src's listening socket to the template: at most one of the
    # restores may serve on it, or several sandboxes accept from one socket.
    adopted = sorted(
        x for x, r in results.items() if r["timings"]["counters"].get("listener") == "handed over"
    )
    assert len(adopted) <= 1, f"{len(adopted)} sandboxes adopted one listener: {adopted}"
    after = template_client.status(tcli.root)
    assert after["pid"] == before["pid"] and after["spawned"] == 20 + 1  # + src

    counts = []
    for x, r in results.items():
        assert r["status"] == "running"
        dirs = cgroup_dirs(x)
        assert dirs
        for d in dirs:
            assert (d / "cgroup.procs").read_text().split() == [str(r["pid"])]
        host, _, port = r["address"].rpartition(":")
        status, body = get_json(host, int(port))
        assert status == 200
        counts.append((body["requests"], body["restores"]))
    assert len({r["address"] for r in results.values()}) == 20
    assert set(counts) == {(counts[0][0], 1)}  # each continues from the same image

    deleters = [tcli.popen("delete", "--force", x) for x in ids]
    for x, proc in zip(ids, deleters, strict=True):
        out, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, f"delete {x}: {out}\n{err}"
    for x, pid in zip(ids, pids, strict=True):
        assert not (tcli.root / x).exists()
        assert cgroup_dirs(x) == []
        wait_for(lambda pid=pid: gone(pid), f"sandbox {x} to exit")
    assert {p.pid for p in sandbox_processes(tcli.root)} == {before["pid"]}


def test_a_held_listener_is_lent_to_one_restore_at_a_time(
    tcli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between a restored sandbox adopting the held listener and its CLI releasing it,
    a second restore of the same image (``--port 0``: any free port) must bind its own
    port, not serve on the listener the first one already serves on.  Here the test
    plays the first restore, to hold that window open."""
    a, c = sid("a"), sid("c")
    tcli("template", "start")
    info = serving(tcli.root)
    run_http(tcli, a)
    image = tmp_path / "img"
    tcli("checkpoint", a, "--image-path", str(image))
    assert template_client.status(tcli.root)["held"].get(a, {}).get("sockets") == 1
    monkeypatch.setenv(handover.ENV, info["socket"])
    first, conns, _, why = handover.adopt(a)  # what the first restored sandbox does
    assert first is not None, why
    try:
        _, _, data = restore(tcli, c, image)
        port = int(data["address"].rpartition(":")[2])
        assert port != first.getsockname()[1], "two sandboxes serve on one listening socket"
        assert data["timings"]["counters"].get("listener") != "handed over"
    finally:
        first.close()
        for conn in conns:
            conn.close()


def test_request_count_continues_across_template_restores(tcli: Cli, tmp_path: Path) -> None:
    a = sid("a")
    tcli("template", "start")
    serving(tcli.root)
    run_http(tcli, a)
    counts = [requests(tcli, a) for _ in range(3)]
    assert counts == [counts[0], counts[0] + 1, counts[0] + 2]
    last = counts[-1]
    for n in (1, 2):
        image = tmp_path / f"img{n}"
        tcli("checkpoint", a, "--image-path", str(image))
        assert tcli.state(a)["status"] == "stopped"
        how, _, _ = started(tcli("restore", a, "--image-path", str(image), "--json", timeout=120))
        assert how == "template"
        body = tcli.get(a)
        assert body["requests"] == last + 1
        assert body["restores"] == n
        last = body["requests"]


# -- the template's own life -----------------------------------------------------------


def test_stopping_the_template_leaves_sandboxes_serving_and_nothing_else(tcli: Cli) -> None:
    a, b = sid("a"), sid("b")
    tcli("template", "start")
    pid = serving(tcli.root)["pid"]
    run_http(tcli, a)
    run_http(tcli, b)
    counts = {x: requests(tcli, x) for x in (a, b)}
    out = tcli("template", "stop")
    assert out.stdout.strip() == f"template of {tcli.root} stopped"
    assert gone(pid)
    assert template_pids(tcli.root) == []
    assert not os.path.exists(proto.socket_path(str(tcli.root)))
    assert not (tcli.root / proto.INFO_FILE).exists()
    for x in (a, b):
        assert requests(tcli, x) == counts[x] + 1
    left = {p.pid for p in sandbox_processes(tcli.root)}
    assert left == {tcli.state(a)["pid"], tcli.state(b)["pid"]}


def test_template_verbs_print_one_line_and_behave(tcli: Cli) -> None:
    root = tcli.root
    for args in (["template", "status"], ["template", "stop"]):
        out = tcli(*args)
        assert out.stdout.strip().startswith(f"no template serving {root}"), out.stdout
        assert len(out.stdout.strip().splitlines()) == 1 and out.stderr == ""
    info = json.loads(tcli("template", "status", "--json").stdout)
    assert info == {"root": str(tcli.root), "running": False}, info

    out = tcli("template", "start")
    assert len(out.stdout.strip().splitlines()) == 1
    pid = info_pid(root)
    assert out.stdout.strip() == f"template pid {pid} serving {root}"
    assert tcli("template", "start").stdout == out.stdout  # the same one, not a second
    assert template_pids(root) == [pid]

    info = json.loads(tcli("template", "status", "--json").stdout)
    assert info["running"] is True and info["pid"] == pid
    assert info["version"] == proto.version()
    assert info["root"] == str(root.absolute())
    assert (info["spawned"], info["refused"]) == (0, 0)
    assert os.stat(info["socket"]).st_mode & 0o777 == 0o600
    line = tcli("template", "status").stdout.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith(f"template pid {pid} serving {root}: version {proto.version()}")

    out = tcli("template", "stop")
    assert out.stdout.strip() == f"template of {root} stopped"
    assert gone(pid) and template_pids(root) == []
    assert tcli("template", "stop").stdout.strip() == f"no template serving {root}"


def test_template_exits_when_its_socket_is_removed(tcli: Cli) -> None:
    tcli("template", "start")
    info = serving(tcli.root)
    os.unlink(info["socket"])
    wait_for(lambda: gone(info["pid"]), "the template to exit")
    assert not (tcli.root / proto.INFO_FILE).exists()
    assert template_client.status(tcli.root) is None


def test_template_exits_when_its_socket_is_replaced(tcli: Cli) -> None:
    tcli("template", "start")
    info = serving(tcli.root)
    tmp = info["socket"] + ".other"
    Path(tmp).write_text("not a socket")
    os.replace(tmp, info["socket"])
    wait_for(lambda: gone(info["pid"]), "the template to exit")
    assert Path(info["socket"]).read_text() == "not a socket"  # not ours: left alone
    os.unlink(info["socket"])


def test_template_exits_when_idle(tcli: Cli) -> None:
    tcli("template", "start", env={"CKPT_TEMPLATE_IDLE_S": "1"})
    pid = info_pid(tcli.root)
    wait_for(lambda: gone(pid), "the idle template to exit")
    assert not os.path.exists(proto.socket_path(str(tcli.root)))


def test_a_racing_start_never_hides_the_serving_template(tcli: Cli) -> None:
    """Two cold commands each start a template at their end (``_note_start``); the
    one that loses the lock exits at once, but the record must keep naming the one
    that serves, or a wedged template can never be found and killed."""
    tcli("template", "start")
    winner = info_pid(tcli.root)
    try:
        template_client.start(tcli.root)  # what the slower of two cold commands does
        wait_for(lambda: template_pids(tcli.root) == [winner], "the second template to give way")
        assert (proto.read_info(str(tcli.root)) or {}).get("pid") == winner
        template_client.kill(tcli.root)  # what a client does to a wedged template
        wait_for(lambda: gone(winner), "the recorded template to be killed")
    finally:
        if not gone(winner):
            os.kill(winner, signal.SIGKILL)


def test_a_root_spelled_with_dotdot_still_forks_from_the_template(tcli: Cli) -> None:
    """``--root /x/sub/../root`` is the same root: its template must serve it, not
    refuse every sandbox's socket path as not its own."""
    (tcli.root.parent / "sub").mkdir()
    dotted = Cli(tcli.root.parent / "sub" / ".." / tcli.root.name, tcli.env, tcli.ids)
    a, b = sid("a"), sid("b")
    try:
        how, _, _ = run_http(dotted, a)
        assert how == "cold"
        pid = serving(dotted.root)["pid"]
        how, why, _ = run_http(dotted, b)
        assert (how, why) == ("template", "")
    finally:
        dotted("template", "stop")
    assert gone(pid)


def test_a_deep_root_forks_from_the_template(tcli: Cli, tmp_path: Path) -> None:
    """Under a root too deep for Unix socket paths, the template's socket and each
    sandbox's live in the temp dir under hashed names; the template still serves."""
    deep = Cli(tmp_path / ("d" * 60) / ("e" * 40) / "root", tcli.env, tcli.ids)
    a, b = sid("a"), sid("b")
    try:
        _, _, first = run_http(deep, a)
        sock = proto.socket_path(str(deep.root))
        assert os.path.dirname(sock) == tempfile.gettempdir()
        assert os.path.dirname(first["socket"]) == tempfile.gettempdir()
        serving(deep.root)
        how, why, data = run_http(deep, b)
        assert (how, why) == ("template", "")
        assert deep.get(b)["requests"] == 1
        image = tmp_path / "img"
        deep("checkpoint", b, "--image-path", str(image))
        how, why, _ = started(deep("restore", b, "--image-path", str(image), "--json"))
        assert (how, why) == ("template", "")
        assert deep.get(b)["requests"] == 2
    finally:
        for x in (a, b):
            deep("delete", "--force", x, check=False)
        deep("template", "stop")
    assert sandbox_processes(deep.root) == []
    assert not os.path.exists(sock) and not os.path.exists(data["socket"])


def test_leftovers_of_a_crashed_template_mean_cold_then_fresh(tcli: Cli) -> None:
    """A dead template's socket file and a garbled record (a crash, a full disk) are
    no template: the command starts cold and a fresh template replaces them."""
    a, b = sid("a"), sid("b")
    tcli.root.mkdir(parents=True, mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(proto.socket_path(str(tcli.root)))  # bound, never listening: refused
    dead.close()
    (tcli.root / proto.INFO_FILE).write_text('{"pid": 1, "state": "serv')
    how, why, _ = run_http(tcli, a)
    assert how == "cold" and "not running" in why
    info = serving(tcli.root)
    assert info_pid(tcli.root) == info["pid"]
    how, _, _ = run_http(tcli, b)
    assert how == "template"


def test_a_template_answering_garbage_is_cleared_and_only_it(tcli: Cli) -> None:
    """Something on the template's socket that answers garbage is cleared away (the
    client kills the template it records), but a record naming a process that is no
    template of this root never gets that process killed."""
    a = sid("a")
    tcli.root.mkdir(parents=True, mode=0o700)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    fake = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fake.bind(proto.socket_path(str(tcli.root)))
    fake.listen(8)
    fake.settimeout(WAIT_S)

    def answer() -> None:
        with contextlib.suppress(OSError):
            conn, _ = fake.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"this is not json\n")

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    try:
        proto.write_info(str(tcli.root), {"pid": victim.pid, "state": "serving"})
        how, why, _ = run_http(tcli, a)
        assert how == "cold" and "failed" in why, why
        assert victim.poll() is None  # not a template of this root: left alone
        fresh = serving(tcli.root)
        assert fresh["pid"] != victim.pid
    finally:
        t.join(WAIT_S)
        fake.close()
        victim.kill()
        victim.wait(timeout=WAIT_S)


def test_concurrent_first_commands_start_one_template(tcli: Cli) -> None:
    ids = [sid(f"c{i}") for i in range(4)]
    tcli.ids.update(ids)
    procs = [tcli.popen("run", x, "--workload", "http", "--port", "0", "--json") for x in ids]
    for proc in procs:
        out, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, out + err
    info = serving(tcli.root)

    def one() -> bool:
        return template_pids(tcli.root) == [info["pid"]]

    wait_for(one, "the losing templates to give way")  # they lose the lock and exit
    assert all(requests(tcli, x) == 1 for x in ids)
