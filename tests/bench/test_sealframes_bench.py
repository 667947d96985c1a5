"""``python3 -m ckpt.bench.sealframes``: each framing reads back what it sealed, and the
table has a row per framing and size."""

from __future__ import annotations

import os

import pytest

from ckpt.bench import sealframes
from ckpt.migration.errors import AuthenticationError


def test_every_framing_reads_back_what_it_sealed() -> None:
    for name, make in sealframes.framings(os.urandom(32)).items():
        assert sealframes.one_pass(make, 4096, 4 * 4096) > 0, name


def test_a_framing_with_the_wrong_key_fails_the_pass() -> None:
    good, bad = (sealframes.framings(os.urandom(32))["aes-256-gcm"] for _ in range(2))

    def crossed():  # type: ignore[no-untyped-def]
        return good()[0], bad()[1]

    with pytest.raises(AuthenticationError):
        sealframes.one_pass(crossed, 4096, 4 * 4096)


def test_the_table_has_a_row_per_framing_and_size(capsys) -> None:  # type: ignore[no-untyped-def]
    sealframes.main(["--repeat", "1", "--mib", "1"])
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == 3 * len(sealframes.SIZES)
    assert {r.split()[0] for r in rows} == {"hmac-sha256", "aes-256-gcm", "chacha20-poly1305"}
