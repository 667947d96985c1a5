"""The key file's checks and the key derivation (RFC 5869's own test vectors)."""

from __future__ import annotations

import os

import pytest

from ckpt.migration import KeyFileError, read_key_file
from ckpt.migration.handshake import derive_key, hkdf_sha256

from .conftest import SECRET, key_file


def test_a_private_key_file_is_read_whole(tmp_path) -> None:
    assert read_key_file(key_file(tmp_path, SECRET + b"\n")) == SECRET + b"\n"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_group_or_other_readable_key_file_is_refused(tmp_path, mode: int) -> None:
    with pytest.raises(KeyFileError, match="chmod 600"):
        read_key_file(key_file(tmp_path, mode=mode))


def test_short_key_file_is_refused(tmp_path) -> None:
    with pytest.raises(KeyFileError, match="fewer than 32"):
        read_key_file(key_file(tmp_path, SECRET[:31]))


def test_symlinked_key_file_is_refused(tmp_path) -> None:
    real = key_file(tmp_path)
    link = tmp_path / "link"
    os.symlink(real, link)
    with pytest.raises(KeyFileError, match="symlink"):
        read_key_file(link)


def test_missing_and_non_regular_key_files_are_refused(tmp_path) -> None:
    with pytest.raises(KeyFileError, match="cannot open"):
        read_key_file(tmp_path / "absent")
    os.mkfifo(tmp_path / "fifo", 0o600)
    with pytest.raises(KeyFileError, match="not a regular file"):  # and the open never blocks
        read_key_file(tmp_path / "fifo")


def test_errors_are_one_line(tmp_path) -> None:
    for path in (key_file(tmp_path, b"short"), str(tmp_path / "absent")):
        with pytest.raises(KeyFileError) as info:
            read_key_file(path)
        assert "\n" not in str(info.value)


def test_hkdf_matches_rfc5869_test_cases() -> None:
    # RFC 5869, A.1 and A.3.
    okm = hkdf_sha256(bytes([0x0B]) * 22, bytes(range(13)), bytes(range(0xF0, 0xFA)), 42)
    assert okm.hex() == (
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
    )
    okm = hkdf_sha256(bytes([0x0B]) * 22, b"", b"", 42)
    assert okm.hex() == (
        "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
    )


def test_connection_key_depends_on_secret_and_both_nonces() -> None:
    a, b = os.urandom(32), os.urandom(32)
    base = derive_key(SECRET, a, b)
    assert len(base) == 32
    assert derive_key(SECRET, a, b) == base
    assert base not in {
        derive_key(bytes(32), a, b),
        derive_key(SECRET, b, a),
        derive_key(SECRET, a, os.urandom(32)),
        derive_key(SECRET, os.urandom(32), b),
    }
