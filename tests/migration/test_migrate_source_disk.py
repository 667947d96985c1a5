"""A migration's pages go from the sandbox's memory down its control connection to
the destination: no image file is written under the source's root, in a pre-copy
round or in the final image.  Checked on the file system, at the steps where the old
way had an image on disk (a round being sent, the final image taken)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.sandbox.waiting import wait_for

from .migrate_kit import Hosts, running, stopped

pytestmark = pytest.mark.slow
SID = f"nodisk-{os.getpid()}"
IMAGE_FILES = {"checkpoint.img", "pages.img", "pages_meta.img"}


def _image_files(root: Path) -> list[str]:
    """Image files, and image writers' temporary directories, anywhere under ``root``."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.name in IMAGE_FILES or ".tmp-" in p.name
    )


@pytest.mark.parametrize("phase", ["round", "frozen"])
def test_a_migration_writes_no_image_file_on_the_source(hosts: Hosts, phase: str) -> None:
    hosts.src("run", SID, "--workload", "kv:8", "--port", "0", timeout=120)
    serve = hosts.serve()
    cli = hosts.migrate_popen(SID, serve, env={"CKPT_FAULT": f"pause:migrate:{phase}"})
    try:
        wait_for(lambda: stopped(cli), f"the migrate CLI to stop at {phase}", 120)
        assert _image_files(hosts.src.root) == []
        cli.send_signal(signal.SIGCONT)
        _, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, err
    assert running(hosts.dst) == [SID] and running(hosts.src) == []
