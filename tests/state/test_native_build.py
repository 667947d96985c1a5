"""When the C core is not built, native_status() says why in the compiler's own words:
setup.py keeps the first error lines beside the package and native.py reads them."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ckpt.state import native

ROOT = Path(__file__).resolve().parents[2]
SO_NAME = "_native" + sysconfig.get_config_var("EXT_SUFFIX")
NOTE_NAME = SO_NAME + native.BUILD_NOTE_SUFFIX

ERROR = "ckpt/state/_native.c:864:41: error: too few arguments to function '_PyLong_AsByteArray'"


def test_reason_quotes_the_recorded_compiler_error(tmp_path: Path) -> None:
    (tmp_path / NOTE_NAME).write_text(f"{ERROR}\nckpt/state/_native.c:1140:12: error: x\n")
    why = native.not_built_reason(tmp_path)
    assert ERROR in why
    assert "\n" not in why and "no C compiler" not in why


def test_reason_cuts_a_long_error_line(tmp_path: Path) -> None:
    (tmp_path / NOTE_NAME).write_text("error: " + "x" * 5000 + "\n")
    why = native.not_built_reason(tmp_path)
    assert "error: xxx" in why and len(why) < 400


def test_reason_without_a_note_says_only_what_is_known(tmp_path: Path) -> None:
    (tmp_path / "_native.cpython-399-x86_64-linux-gnu.so").write_bytes(b"")
    why = native.not_built_reason(tmp_path)
    assert SO_NAME in why and "_native.cpython-399-x86_64-linux-gnu.so" in why
    assert "no C compiler" not in why


def test_a_note_for_another_python_is_not_read(tmp_path: Path) -> None:
    (tmp_path / ("_native.cpython-399-x86_64-linux-gnu.so" + native.BUILD_NOTE_SUFFIX)).write_text(
        ERROR + "\n"
    )
    assert ERROR not in native.not_built_reason(tmp_path)


def _copy_for_build(tmp_path: Path) -> Path:
    """The files setup.py needs to build the extension, in a scratch tree."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    pkg = tmp_path / "ckpt" / "state"
    pkg.mkdir(parents=True)
    (tmp_path / "ckpt" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    for src in (ROOT / "ckpt" / "state").glob("_native*.[ch]"):
        shutil.copy(src, pkg / src.name)
    return pkg


def _build(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
    )


needs_build_tools = pytest.mark.skipif(
    shutil.which(sysconfig.get_config_var("CC").split()[0]) is None
    or importlib.util.find_spec("setuptools") is None,
    reason="needs this Python's C compiler and setuptools to build the extension",
)


@needs_build_tools
def test_a_failed_compile_is_reported_in_the_compilers_words(tmp_path: Path) -> None:
    pkg = _copy_for_build(tmp_path)
    source = pkg / "_native.c"
    text = source.read_text()
    planted = "static int planted = undeclared_planted_name;\n"
    source.write_text(
        text.replace('#include "_native_dict.h"', planted + '#include "_native_dict.h"', 1)
    )
    proc = _build(tmp_path)
    assert proc.returncode == 0, proc.stderr  # installs without the core
    assert "undeclared_planted_name" in proc.stderr.split("warning: ckpt's native engine")[-1]
    assert not (pkg / SO_NAME).exists()
    note = (pkg / NOTE_NAME).read_text()
    assert "error" in note and "undeclared_planted_name" in note
    why = native.not_built_reason(pkg)
    assert "undeclared_planted_name" in why and "no C compiler" not in why

    source.write_text(text)  # fixed: the next build removes the note
    proc = _build(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (pkg / SO_NAME).exists()
    assert not (pkg / NOTE_NAME).exists()


@needs_build_tools
def test_a_missing_compiler_is_named(tmp_path: Path) -> None:
    pkg = _copy_for_build(tmp_path)
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    why = native.not_built_reason(pkg)
    assert "no-such-cc" in why and "No such file" in why
