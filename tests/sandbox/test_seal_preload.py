"""What a keyed or encrypted checkpoint finds already loaded in the sandbox process.

cryptography's AEAD and HKDF and hashlib's HMAC cost 50-90 ms to import and first use.
A checkpoint with ``--leave-running`` is written in a child forked from the sandbox, so
whatever the child imports is lost with it and the next checkpoint pays again: the
template loads them once for every sandbox it forks, and a sandbox started cold loads
them itself on its first keyed checkpoint.  Seen from outside, in the process's
mappings: cryptography's compiled module is mapped or it is not."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .conftest import Cli

pytestmark = pytest.mark.slow
SID = f"preload-{os.getpid()}"


def _maps_cryptography(cli: Cli) -> bool:
    pid = cli.state(SID)["pid"]
    return "/cryptography/" in Path(f"/proc/{pid}/maps").read_text()


def _key(tmp_path: Path) -> Path:
    key = tmp_path / "key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    return key


def test_a_sandbox_forked_from_the_template_has_the_aead_loaded(tcli: Cli) -> None:
    tcli("template", "start", timeout=120)  # returns once it serves, warm
    tcli("run", SID, "--workload", "empty", "--port", "0", timeout=120)
    template = json.loads((tcli.root / "template.json").read_text())["pid"]
    status = Path(f"/proc/{tcli.state(SID)['pid']}/status").read_text()
    assert f"PPid:\t{template}\n" in status, "not forked from the template"
    assert _maps_cryptography(tcli)


def test_a_cold_sandbox_loads_it_at_its_first_keyed_checkpoint(cli: Cli, tmp_path: Path) -> None:
    cli.env["CKPT_TEMPLATE"] = "0"
    key = _key(tmp_path)
    cli("run", SID, "--workload", "empty", "--port", "0", timeout=120)
    cli("checkpoint", SID, "--image-path", str(tmp_path / "plain"), "--leave-running",
        timeout=120)  # fmt: skip
    assert not _maps_cryptography(cli)  # an unkeyed checkpoint needs none of it
    cli("checkpoint", SID, "--image-path", str(tmp_path / "sealed"), "--leave-running",
        "--encrypt", "--key-file", str(key), timeout=120)  # fmt: skip
    # Loaded in the sandbox itself, not only in the child that wrote the image.
    assert _maps_cryptography(cli)
    cli("delete", SID, "--force", timeout=60)
    cli("restore", SID, "--image-path", str(tmp_path / "sealed"), "--key-file", str(key),
        "--port", "0", timeout=120)  # fmt: skip
    assert cli.state(SID)["status"] == "running"
