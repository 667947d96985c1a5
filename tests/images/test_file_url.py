"""``--image-path file:///DIR`` names the directory DIR, on a real sandbox: the image is
written there (not to ``./file:/DIR``) and restores from the same URL."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.sandbox.conftest import Cli, cli  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow
SID = f"furl-{os.getpid()}"


def test_checkpoint_and_restore_through_a_file_url(cli: Cli, tmp_path: Path) -> None:  # noqa: F811
    target = tmp_path / "images" / "img"
    target.parent.mkdir()
    cli("run", SID, "--workload", "kv:2", "--port", "0", timeout=120)
    out = cli("checkpoint", SID, "--image-path", f"file://{target}", "--json", timeout=120)
    assert json.loads(out.stdout)["image"] == str(target)
    assert (target / "checkpoint.img").is_file()
    assert not Path("file:").exists()
    cli("delete", SID, "--force", timeout=60)
    cli("restore", SID, "--image-path", f"file://{target}", timeout=120)
    assert cli.state(SID)["status"] == "running"
