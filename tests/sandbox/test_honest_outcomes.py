"""Outcomes reported as they are: a sandbox that dies after its image is committed is
reported with the image in place and verifying (not "no image was committed"), and a
kill that leaves something behind says what, instead of "stopped"; an unreadable record
is listed, and `delete --force` removes it with its sandbox.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt.errors import CgroupError, SandboxError, SandboxGone
from ckpt.sandbox.client import lifecycle, pids
from ckpt.sandbox.wire import protocol as p
from ckpt.sandbox.wire import rpc
from ckpt.sandbox.wire.paths import Root

from .waiting import gone, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Root]:
    r = Root(tmp_path / "root")
    yield r
    for sandbox_id in r.ids():
        lifecycle.delete(r, sandbox_id, force=True)


def test_death_after_commit_reports_the_image_in_place(
    root: Root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = lifecycle.run(root, "died", "http", template=False).state
    real_call = rpc.call

    def dies_after_writing(path: Path, request: p.Request, **kw: Any) -> Any:
        reply = real_call(path, request, **kw)
        if isinstance(request, p.CheckpointRequest):  # committed; then the process is gone
            os.kill(st.pid, signal.SIGKILL)
            wait_for(lambda: gone(st.pid), "the sandbox to die", 30)
            raise SandboxGone("sandbox died exited during checkpoint without answering")
        return reply

    monkeypatch.setattr(rpc, "call", dies_after_writing)
    image = tmp_path / "img"
    with pytest.raises(SandboxError) as caught:
        lifecycle.checkpoint(root, "died", image)
    message = str(caught.value)
    assert "no image was committed" not in message
    assert f"after committing its image: {image} holds the new checkpoint and it verifies" in (
        message
    )
    assert (image / "checkpoint.img").is_file()
    assert lifecycle.state(root, "died").status == "stopped"


def test_kill_that_leaves_something_says_what_remains(
    root: Root, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill succeeds only when nothing is left: here the SIGKILL and the cgroup removal
    are made to fail (as a process stuck in the kernel, or a busy group, would)."""
    st = lifecycle.run(root, "stuck", "http", template=False).state
    with monkeypatch.context() as m:
        m.setattr(pids, "kill_pid", lambda pid, start: None)

        def busy(name: str | None) -> None:
            raise CgroupError(f"cannot remove cgroup {name}: Device or resource busy")

        m.setattr(pids, "remove_cgroup", busy)
        with pytest.raises(SandboxError) as caught:
            lifecycle.kill(root, "stuck")
    message = str(caught.value)
    assert message.startswith(f"sandbox stuck is not fully stopped: pid {st.pid}")
    if st.cgroup:
        assert f"cgroup {st.cgroup}" in message
    assert "\n" not in message
    assert not gone(st.pid)
    assert lifecycle.state(root, "stuck").status == "running"  # and says so
    lifecycle.kill(root, "stuck")
    assert gone(st.pid)


def test_an_unreadable_record_is_listed_and_delete_force_removes_its_sandbox(
    root: Root,
) -> None:
    st = lifecycle.run(root, "garbled", "http", template=False).state
    (root.dir("garbled") / "state.json").write_text('{"id": "garbled", "pid"')  # cut short
    listed = {s.id: s.status for s in lifecycle.list_sandboxes(root)}
    assert listed == {"garbled": "unreadable"}
    with pytest.raises(SandboxError, match="not JSON"):
        lifecycle.delete(root, "garbled")
    assert not gone(st.pid)
    lifecycle.delete(root, "garbled", force=True)  # found by its group, else its socket
    assert gone(st.pid)
    assert not root.dir("garbled").exists()
