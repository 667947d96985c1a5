"""``checkpoint --encrypt`` on a real ``kv:16`` sandbox: a value PUT before the checkpoint
is in no file of the image, and comes back after a restore with the key (its pages
decrypted as they are filled in the background)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import Cli
from .kv_client import check_values, put_values

pytestmark = pytest.mark.slow
SID = f"enc-{os.getpid()}"
SECRET = b"TOPSECRET-" + os.urandom(8).hex().encode()


def _address(cli: Cli) -> tuple[str, int]:
    host, _, port = cli.state(SID)["address"].rpartition(":")
    return host, int(port)


def test_an_encrypted_image_holds_no_secret_and_restores_with_its_key(
    cli: Cli, tmp_path: Path
) -> None:
    key = tmp_path / "key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    cli("run", SID, "--workload", "kv:16", "--port", "0", timeout=120)
    acked = put_values(_address(cli), [("secret", SECRET)])
    assert acked == {"secret": SECRET}
    image = tmp_path / "img"
    cli("checkpoint", SID, "--image-path", str(image), "--encrypt", "--key-file", str(key),
        "--compression", "none", timeout=120)  # fmt: skip
    files = sorted(p for p in image.rglob("*") if p.is_file())
    assert files
    for path in files:
        assert SECRET not in path.read_bytes(), path
    proc = cli("restore", SID, "--image-path", str(image), check=False, timeout=120)
    assert proc.returncode != 0 and "encrypted (key id" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    cli("restore", SID, "--image-path", str(image), "--key-file", str(key), "--background",
        timeout=120)  # fmt: skip
    check_values(_address(cli), acked)


def test_a_child_of_an_encrypted_pre_dump_must_be_encrypted_with_its_key(
    cli: Cli, tmp_path: Path
) -> None:
    key, other = tmp_path / "key", tmp_path / "other"
    for path in (key, other):
        path.write_bytes(os.urandom(32))
        path.chmod(0o600)
    cli("run", SID, "--workload", "kv:2", "--port", "0", timeout=120)
    p0 = tmp_path / "p0"
    cli("checkpoint", SID, "--image-path", str(p0), "--pre-dump", "--encrypt",
        "--key-file", str(key), timeout=120)  # fmt: skip
    base = ["checkpoint", SID, "--parent-path", str(p0), "--leave-running"]
    plain = cli(*base, "--image-path", str(tmp_path / "c1"), "--key-file", str(key),
                check=False, timeout=120)  # fmt: skip
    assert plain.returncode != 0 and len(plain.stderr.splitlines()) == 1
    assert "encrypted throughout or not at all" in plain.stderr
    wrong = cli(*base, "--image-path", str(tmp_path / "c2"), "--encrypt", "--key-file",
                str(other), check=False, timeout=120)  # fmt: skip
    assert wrong.returncode != 0 and len(wrong.stderr.splitlines()) == 1
    assert "the key file does not match this image" in wrong.stderr
    assert not (tmp_path / "c1").exists() and not (tmp_path / "c2").exists()
    assert cli.state(SID)["status"] == "running"
    cli(*base, "--image-path", str(tmp_path / "c3"), "--encrypt", "--key-file", str(key),
        timeout=120)  # fmt: skip
    cli("delete", SID, "--force", timeout=60)
    cli("restore", SID, "--image-path", str(tmp_path / "c3"), "--key-file", str(key), timeout=120)
    assert cli.state(SID)["status"] == "running"
