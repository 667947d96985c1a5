"""What a sandbox process pays to import the statefile package, and the helpers that
replace heavier stdlib modules on the checkpoint path."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt import statefile
from ckpt.statefile import image as image_mod
from tests.statefile.conftest import KEY, sample_pages, write_image

# Modules a restore or an ordinary checkpoint never needs (image.py, integrity.py, chunks.py).
NOT_AT_IMPORT = (
    "tempfile",
    "shutil",
    "ctypes",
    "hashlib",
    "hmac",
    "random",
    "concurrent.futures",
    "logging",
)


def loaded_after(code: str) -> set[str]:
    """Module names present after running ``code`` in a fresh interpreter started as the
    sandbox process is (``-S``, our ``sys.path`` in PYTHONPATH: no ``.pth`` hooks)."""
    probe = f"import sys\n{code}\nprint('\\n'.join(sys.modules))"
    path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(out.stdout.split())


def test_import_leaves_heavy_modules_unloaded() -> None:
    loaded = loaded_after("import ckpt.statefile")
    assert "ckpt.statefile.image" in loaded
    assert [m for m in NOT_AT_IMPORT if m in loaded] == []


def test_unkeyed_write_and_read_leave_heavy_modules_unloaded(tmp_path: Path) -> None:
    # Not through conftest's helpers: importing pytest would load the modules checked.
    target = str(tmp_path / "img")
    code = (
        "from ckpt import statefile\n"
        f"with statefile.ImageWriter({target!r}) as w:\n"
        "    w.state_file.write(b'state' * 1000)\n"
        "    w.write_pages([(0, b'p' * 4096), (1, bytes(4096)), (5, b'q' * 4096)])\n"
        f"img = statefile.open_image({target!r})\n"
        "assert img.read_state() == b'state' * 1000\n"
        "assert sorted(img.open_pages(lazy=False).indices) == [0, 1, 5]\n"
    )
    loaded = loaded_after(code)
    assert [m for m in NOT_AT_IMPORT if m in loaded] == []


def test_an_encrypted_image_reads_in_a_process_that_never_loaded_cryptography(
    tmp_path: Path,
) -> None:
    """cryptography is imported where it is used (or ahead of time by ``seal.preload``
    in the template): a restore in a process that never loaded it still opens every
    sealed piece, and an unkeyed image never loads it."""
    target = tmp_path / "img"
    write_image(target, b"state" * 1000, sample_pages(), key=KEY, encrypt=True)
    code = (
        "import sys\n"
        "from ckpt import statefile\n"
        "assert not [m for m in sys.modules if m.startswith('cryptography')]\n"
        f"img = statefile.open_image({str(target)!r}, key={KEY!r})\n"
        "assert img.read_state() == b'state' * 1000\n"
        "pages = img.open_pages(lazy=False)\n"
        "assert pages.read_page(13)[:4] == (13).to_bytes(4, 'little')\n"
    )
    assert "cryptography.hazmat.primitives.ciphers.aead" in loaded_after(code)


def test_keyed_image_still_checks_its_hmac(tmp_path: Path) -> None:
    write_image(tmp_path / "img", b"secret state", key=KEY)
    assert statefile.open_image(tmp_path / "img", key=KEY).read_state() == b"secret state"
    with pytest.raises(statefile.IntegrityError, match="hmac-sha256 mismatch"):
        statefile.open_image(tmp_path / "img", key=KEY[::-1]).read_state()


def test_make_temp_dir_is_private_unique_and_sweepable(tmp_path: Path) -> None:
    a = Path(image_mod._make_temp_dir(str(tmp_path), f".img.tmp-{os.getpid()}-"))
    b = Path(image_mod._make_temp_dir(str(tmp_path), f".img.tmp-{os.getpid()}-"))
    assert a != b and a.parent == tmp_path == b.parent
    assert stat.S_IMODE(a.stat().st_mode) == 0o700
    m = image_mod._LEFTOVER.match(a.name)
    assert m is not None and m["name"] == "img" and m["kind"] == "tmp"


def test_make_temp_dir_gives_up_when_every_name_is_taken(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(image_mod.os, "urandom", lambda n: b"\x01" * n)
    image_mod._make_temp_dir(str(tmp_path), ".img.tmp-1-")
    with pytest.raises(FileExistsError):
        image_mod._make_temp_dir(str(tmp_path), ".img.tmp-1-")


def test_make_temp_dir_in_missing_parent_fails(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        image_mod._make_temp_dir(str(tmp_path / "missing"), ".img.tmp-1-")


def test_leftover_of_aborted_write_is_removed(tmp_path: Path) -> None:
    target = tmp_path / "img"
    with pytest.raises(RuntimeError), statefile.ImageWriter(target) as img:
        img.state_file.write(b"partial")
        raise RuntimeError("abort")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    write_image(target, b"whole", sample_pages())
    assert statefile.open_image(target).read_state() == b"whole"
