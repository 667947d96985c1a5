"""``kv:N`` in a real sandbox: values sent over HTTP survive ``ckpt checkpoint`` and
``ckpt restore`` (stopping and ``--leave-running``), and so does the memory digest.

Runs the CLI in subprocesses through the sandbox tests' ``cli`` fixture, whose teardown
asserts that no process or cgroup is left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sandbox import conftest as sandbox_fixtures
from sandbox.conftest import Cli
from sandbox.kv_client import check_values, put_values

from ckpt.sandbox.host.http import get_json

cli = sandbox_fixtures.cli  # the sandbox tests' fixture, with its teardown

pytestmark = pytest.mark.slow
KV = f"kv-{os.getpid()}"


def _address(cli: Cli) -> tuple[str, int]:
    host, _, port = cli.state(KV)["address"].rpartition(":")
    return host, int(port)


def _value(i: int) -> bytes:
    return (b"%06d|" % i) * (1 + (i * 379) % 9000 // 7)


def _put_all(cli: Cli, first: int, count: int) -> dict[str, bytes]:
    """PUT ``count`` values on one keep-alive connection; the ones acknowledged."""
    items = ((f"key-{i % 150}", _value(i)) for i in range(first, first + count))
    return put_values(_address(cli), items)


def _check(cli: Cli, acked: dict[str, bytes], digest: str) -> None:
    check_values(_address(cli), acked)
    assert get_json(*_address(cli), "/memory", timeout=60)[1]["memory_sha256"] == digest


@pytest.mark.parametrize("leave_running", [False, True])
def test_acknowledged_values_survive_checkpoint_and_restore(
    cli: Cli, tmp_path: Path, leave_running: bool
) -> None:
    cli("run", KV, "--workload", "kv:4", "--port", "0", timeout=120)
    acked = _put_all(cli, 0, 400)
    assert len(acked) == 150
    digest = get_json(*_address(cli), "/memory", timeout=60)[1]["memory_sha256"]
    image = tmp_path / "img"
    extra = ["--leave-running"] if leave_running else []
    cli("checkpoint", KV, "--image-path", str(image), *extra, timeout=120)
    if leave_running:
        _check(cli, acked, digest)  # the running sandbox kept its values
        cli("delete", KV, "--force", timeout=60)
    cli("restore", KV, "--image-path", str(image), timeout=120)
    _check(cli, acked, digest)
    acked.update(_put_all(cli, 400, 60))  # the restored index takes new values
    _check(cli, acked, get_json(*_address(cli), "/memory", timeout=60)[1]["memory_sha256"])
