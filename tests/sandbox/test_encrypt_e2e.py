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
