"""The C core's paths through the public C API, which a CPython newer than the code runs
(every private call and layout read is version-guarded in _native_compat.h): built with
-DCKPT_PORTABLE=1 into a scratch tree, they pass the native tests of the kinds they
touch (sets, UUIDs, dicts, ints, instance fields; typed's bytes, both directions)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = [
    "tests/state/test_native.py",
    "tests/state/test_native_values.py",
    "tests/state/test_native_save_paths.py",
    "tests/state/test_native_damage.py",
    "tests/state/test_fresh_containers.py",
]
CC = shutil.which("gcc") or shutil.which("cc")


@pytest.mark.skipif(CC is None, reason="needs a C compiler (gcc or cc) to build the core")
def test_portable_build_passes_the_native_tests(tmp_path: Path) -> None:
    skip = shutil.ignore_patterns("*.so", "__pycache__", "*.build-error.txt", ".hypothesis")
    shutil.copytree(ROOT / "ckpt", tmp_path / "ckpt", ignore=skip)
    shutil.copytree(ROOT / "tests", tmp_path / "tests", ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    state = tmp_path / "ckpt" / "state"
    target = state / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    compile_cmd = [CC, "-shared", "-fPIC", "-O1", "-DCKPT_PORTABLE=1", "-Wall", "-Werror"]
    compile_cmd += [f"-I{sysconfig.get_paths()['include']}", "-o", str(target)]
    compile_cmd += [str(state / "_native.c"), str(state / "_native_read.c")]
    built = subprocess.run(compile_cmd, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CKPT_PURE_PYTHON")}
    probe = (
        "from ckpt.state import native; "
        "assert native._core is not None, native._reason; "
        f"assert native._core.__file__ == {str(target)!r}, native._core.__file__; "
        "assert native._core.fast_paths == 0"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
