"""A sandbox's record names images where they stay: ``last_checkpoint`` and
``restored_from`` hold an image's final location, never a working copy inside the root
(a migration's rounds, sent or received), which is removed when the migration ends."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .conftest import Cli

pytestmark = pytest.mark.slow
SID = f"rec-{os.getpid()}"


def test_records_name_final_images_only(cli: Cli, tmp_path: Path) -> None:
    cli("run", SID, "--workload", "kv:2", "--port", "0", timeout=120)
    kept = tmp_path / "images" / "kept"
    cli("checkpoint", SID, "--image-path", str(kept), "--leave-running", timeout=120)
    assert cli.state(SID)["extra"]["last_checkpoint"] == str(kept)
    work = cli.root / ".work" / "r0"  # where a migration's rounds are written
    cli("checkpoint", SID, "--image-path", str(work), "--leave-running", timeout=120)
    assert cli.state(SID)["extra"]["last_checkpoint"] == str(kept)
    cli("delete", SID, "--force", timeout=60)
    cli("restore", SID, "--image-path", str(work), timeout=120)
    shutil.rmtree(work.parent)  # as a migration removes what it received
    assert cli.state(SID)["restored_from"] is None
    cli("delete", SID, "--force", timeout=60)
    cli("restore", SID, "--image-path", str(kept), timeout=120)
    assert cli.state(SID)["restored_from"] == str(kept)
