"""A migrated sandbox's record names no working copy: the destination restored from
images it received into its root and removed once the migration ended."""

from __future__ import annotations

import os

import pytest

from .migrate_kit import Hosts, running

pytestmark = pytest.mark.slow
SID = f"migrec-{os.getpid()}"


def test_the_destinations_record_names_no_removed_image(hosts: Hosts) -> None:
    hosts.src("run", SID, "--workload", "kv:2", "--port", "0", timeout=120)
    serve = hosts.serve()
    proc = hosts.migrate(SID, serve)
    assert proc.returncode == 0, proc.stderr
    assert running(hosts.dst) == [SID]
    record = hosts.dst.state(SID)
    assert record["restored_from"] is None, record
    assert serve.stop() == 0
