"""The restore RPC's deadline: it grows with the image and with a smaller CPU quota, so
a big image is not cut short, and ``CKPT_RESTORE_TIMEOUT_S`` overrides it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt.sandbox.client import deadlines


def _image(path: Path, size: int) -> Path:
    path.mkdir()
    (path / "checkpoint.img").write_bytes(b"\0" * size)
    return path


def test_the_deadline_grows_with_the_image_and_a_smaller_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(deadlines.RESTORE_TIMEOUT_ENV, raising=False)
    small = deadlines.restore_timeout(_image(tmp_path / "small", 1024))
    big = deadlines.restore_timeout(_image(tmp_path / "big", 64 << 20))
    assert small >= deadlines.RESTORE_TIMEOUT_S
    assert big - small >= (63 << 20) / deadlines.RESTORE_BYTES_PER_S
    quarter = deadlines.restore_timeout(tmp_path / "big", 0.25)
    assert quarter - deadlines.RESTORE_TIMEOUT_S == pytest.approx(
        4 * (big - deadlines.RESTORE_TIMEOUT_S)
    )
    assert deadlines.restore_timeout(tmp_path / "big", 4.0) == big  # more than a CPU: as one


def test_the_environment_sets_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(deadlines.RESTORE_TIMEOUT_ENV, "2.5")
    assert deadlines.restore_timeout(_image(tmp_path / "img", 64 << 20), 0.25) == 2.5
    from ckpt.settings import SettingsError

    for bad in ("0", "-1", "soon"):
        monkeypatch.setenv(deadlines.RESTORE_TIMEOUT_ENV, bad)
        with pytest.raises(SettingsError, match=deadlines.RESTORE_TIMEOUT_ENV):
            deadlines.restore_timeout(tmp_path / "img")


def test_a_symlinked_file_in_the_image_does_not_count(tmp_path: Path) -> None:
    img = _image(tmp_path / "img", 10)
    (tmp_path / "huge").write_bytes(b"\0" * (8 << 20))
    before = deadlines.restore_timeout(img)
    (img / "pages.img").symlink_to(tmp_path / "huge")
    assert deadlines.restore_timeout(img) == before
