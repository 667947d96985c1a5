"""A sandbox that dies after its image is committed, before it answers: the checkpoint
says the image is in place and verifies, not that none was committed."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt.errors import SandboxError, SandboxGone
from ckpt.sandbox import lifecycle, rpc
from ckpt.sandbox.paths import Root

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

    def dies_after_writing(path: Path, method: str, *args: Any, **kw: Any) -> Any:
        reply = real_call(path, method, *args, **kw)
        if method == "checkpoint":  # written and committed; then the process is gone
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
