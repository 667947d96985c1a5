"""``ckpt check``'s probes with the host's answers replaced, ``logs`` and ``wait`` on
records whose processes are gone, and the new tables at 80 columns."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from rich.console import Console

from ckpt.errors import SandboxError, SandboxNotFound
from ckpt.sandbox.client import hostcheck, logs, observe
from ckpt.sandbox.wire import protocol as p
from ckpt.sandbox.wire.paths import STOPPED, Root

from .test_stop_reasons import GONE_PID, record

WIDTH = 80


def test_netns_and_tc_say_why_they_are_missing() -> None:
    def not_installed(argv: list[str]) -> tuple[int, str]:
        return 127, f"{argv[0]} is not installed"

    def refused(argv: list[str]) -> tuple[int, str]:
        return 1, "RTNETLINK answers: Operation not permitted"

    assert hostcheck.tc_item(not_installed) == hostcheck.Item("tc", False, "tc is not installed")
    item = hostcheck.netns_item(refused)
    assert not item.ok and "Operation not permitted" in item.detail
    assert hostcheck.tc_item(lambda argv: (0, "")).ok


def test_a_probe_that_hangs_is_cut_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostcheck, "PROBE_TIMEOUT_S", 0.2)
    code, said = hostcheck.run_probe(["sleep", "30"])
    assert code == 124 and "did not answer" in said
    assert hostcheck.run_probe(["no-such-tool-here"])[0] == 127


def test_the_store_is_configured_by_its_variables_and_none_is_printed() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://user:pw@store.example:9000",
        "AWS_ACCESS_KEY_ID": "AKIDSECRETVALUE",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
    }
    item = hostcheck.store_item(env)
    for value in env.values():
        assert value not in item.detail
    missing = hostcheck.store_item({"AWS_ENDPOINT_URL": "x"})
    assert not missing.ok
    assert "AWS_ACCESS_KEY_ID" in missing.detail and "AWS_ENDPOINT_URL" not in missing.detail


def test_the_template_item_follows_ckpt_template(tmp_path: Path) -> None:
    off = hostcheck.template_item(tmp_path, False)
    assert not off.ok and "CKPT_TEMPLATE=0" in off.detail
    on = hostcheck.template_item(tmp_path / "none", True)
    assert on.ok and "not running" in on.detail


def test_check_lists_every_item_once_and_never_raises(tmp_path: Path) -> None:
    items = hostcheck.check(tmp_path, env={}, run=lambda argv: (127, "absent"))
    names = [i.name for i in items]
    assert names == [
        "cgroups",
        "cpu quota",
        "native engine",
        "template",
        "network namespaces",
        "tc",
        "object store",
    ]
    assert all(isinstance(i.ok, bool) and i.detail for i in items)


# -- logs ------------------------------------------------------------------------------


def test_logs_of_an_unknown_sandbox_or_a_planted_link_are_errors(tmp_path: Path) -> None:
    root = Root(tmp_path / "root")
    with pytest.raises(SandboxNotFound):
        list(logs.read(root, "ghost"))
    record(root, "a", STOPPED)
    with pytest.raises(SandboxError, match="no log"):
        list(logs.read(root, "a"))
    secret = tmp_path / "secret"
    secret.write_text("not yours\n")
    os.symlink(secret, root.log_path("a"))
    with pytest.raises(SandboxError, match="symlink"):
        list(logs.read(root, "a"))


def test_a_large_log_is_streamed_in_bounded_chunks(tmp_path: Path) -> None:
    root = Root(tmp_path / "root")
    record(root, "a", STOPPED)
    data = b"x" * (logs.CHUNK * 3 + 5)
    root.log_path("a").write_bytes(data)
    chunks = list(logs.read(root, "a"))
    assert b"".join(chunks) == data
    assert max(len(c) for c in chunks) <= logs.CHUNK


def test_follow_prints_what_comes_and_ends_once_the_sandbox_has_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog: None
) -> None:
    monkeypatch.setattr(logs, "POLL_S", 0.01)
    monkeypatch.setattr(logs, "CHECK_S", 0.05)
    root = Root(tmp_path / "root")
    record(root, "a")  # running, but no process of it is left: refresh says stopped
    path = root.log_path("a")
    path.write_bytes(b"first\n")
    stream = logs.read(root, "a", follow=True)
    assert next(stream) == b"first\n"
    with open(path, "ab") as f:
        f.write(f"[{GONE_PID}] exit status 0\n".encode())
    rest = b"".join(stream)  # ends by itself: the watchdog turns a hang into a failure
    assert rest == f"[{GONE_PID}] exit status 0\n".encode()


# -- wait and events on a gone sandbox --------------------------------------------------


def test_wait_on_a_sandbox_whose_process_is_gone_returns_at_once(tmp_path: Path) -> None:
    root = Root(tmp_path / "root")
    record(root, "a")
    root.log_path("a").write_text(f"[{GONE_PID}] exit status 3\n")
    st = observe.wait(root, "a", timeout=0)
    assert observe.exit_json(st) == {
        "id": "a",
        "status": "exited (code 3)",
        "reason": "exited",
        "exit_code": 3,
        "signal": None,
    }
    with pytest.raises(SandboxNotFound):
        observe.wait(root, "ghost", timeout=0)


def test_ps_and_events_refuse_a_stopped_sandbox_saying_how_it_ended(tmp_path: Path) -> None:
    root = Root(tmp_path / "root")
    record(root, "a", STOPPED, stopped={"reason": "checkpointed"})
    with pytest.raises(SandboxError, match="it is checkpointed"):
        observe.tasks(root, "a")
    with pytest.raises(SandboxError, match="it is checkpointed"):
        list(observe.events(root, "a", interval=0.1, count=1))


# -- tables ----------------------------------------------------------------------------


def _render(renderable: object) -> list[str]:
    buf = io.StringIO()
    Console(file=buf, width=WIDTH, color_system=None).print(renderable)
    return buf.getvalue().splitlines()


def test_the_tasks_table_fits_80_columns_and_keeps_long_names_whole() -> None:
    from ckpt.sandbox.client.render import tasks_table

    name = "a-very-long-command-name-" * 4
    reply = p.TasksReply(
        tasks=[p.TaskInfo(4194303, 4194303, 4194302, name, "S", 1000, 10**15)], omitted=3
    )
    lines = _render(tasks_table(reply))
    assert all(len(line) <= WIDTH for line in lines), lines
    assert "".join(line.strip() for line in lines).count("a-very-long-command-name-") == 4
    assert any("3 more tasks" in line for line in lines)


def test_the_check_and_list_tables_fit_80_columns() -> None:
    from ckpt.sandbox.client.render import check_table, sandboxes_table
    from ckpt.sandbox.wire.paths import SandboxState

    items = [hostcheck.Item("network namespaces", False, "x" * 150)]
    assert all(len(line) <= WIDTH for line in _render(check_table(items)))
    st = SandboxState(
        id="web-frontend-0001",
        pid=4194303,
        status=STOPPED,
        workload="memory:1024",
        cgroup=None,
        created="2026-12-04T13:04:19Z",
        cpu=0.25,
        extra={"stopped": {"reason": "exited", "code": None}},
    )
    lines = _render(sandboxes_table([st]))
    assert all(len(line) <= WIDTH for line in lines), lines
    assert any("exited (code unknown)" in line for line in lines), lines
