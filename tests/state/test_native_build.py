"""How the native engine's C core is built and what happens without it: a failed build
is reported in the compiler's own words, the portable build (public C API only)
passes the native tests, and with no core the default engine is typed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from ckpt import state
from ckpt.state import native

# --------------------------------------------------------------------------------------
# When the C core is not built, native_status() says why in the compiler's own words:
# setup.py keeps the first error lines beside the package and native.py reads them.


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


# --------------------------------------------------------------------------------------
# The C core's paths through the public C API, which a CPython newer than the code runs
# (every private call and layout read is version-guarded in _native_compat.h): built with
# -DCKPT_PORTABLE=1 into a scratch tree, they pass the native tests of the kinds they
# touch (sets, UUIDs, dicts, ints, instance fields; typed's bytes, both directions).


_PORTABLE_SECTIONS = {
    # the date, time and UUID values
    "test_native_kinds.py": [
        "test_native_writes_typed_bytes_and_reads_every_value_back",
        "test_values_of_other_types_are_escaped_exactly",
        "test_a_payload_c_does_not_take_gets_typed_outcome",
    ],
    # the in-C paths for lists of scalar tuples, dicts read in place and enum members
    "test_native_parity.py": [
        "test_fits_and_misfits_write_typed_stream",
        "test_a_shared_list_of_tuples_and_a_shared_dict_keep_identity",
        "test_a_container_held_by_several_fields_and_objects_stays_shared",
        "test_dict_of_references_to_classes_not_met_yet",
        "test_random_tuples_and_dicts_write_typed_stream",
        "test_ints_at_every_digit_boundary_write_typed_stream",
    ],
    # the byte reader on hostile payloads
    "test_native_damage.py": [
        "test_the_streams_here_load_equal",
        "test_payload_truncated_at_every_length",
        "test_trailing_bytes_are_refused",
        "test_every_payload_byte_flipped_behind_a_valid_checksum",
        "test_hostile_size_at_every_position_allocates_nothing_claimed",
        "test_tuple_fields_read_straight_into_tuples_load_as_typed_loads_them",
        "test_hostile_value_in_a_row_is_a_state_error",
        "test_unusual_values_in_an_any_field_load_as_typed_loads_them",
        "test_an_extension_value_is_refused_by_both",
        "test_float32_and_wide_headers_read_as_msgspec_reads_them",
        "test_deep_nesting_in_a_row",
        "test_deep_nesting_of_maps_in_a_row",
        "test_hostile_top_level_items",
        "test_hostile_ids_in_reference_slots",
    ],
}
TESTS = [
    "tests/state/test_native.py",
    *(f"tests/state/{f}::{t}" for f, names in _PORTABLE_SECTIONS.items() for t in names),
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
        [sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider", *TESTS],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


# --------------------------------------------------------------------------------------
# Without its C core (no compiler at install, or ``CKPT_PURE_PYTHON=1``) the native
# engine is reported unavailable with a reason and the default engine is ``typed``.


_PROBE = textwrap.dedent(
    """
    from ckpt import state
    available, reason = state.native_status()
    assert not available and reason == "disabled by CKPT_PURE_PYTHON=1", reason
    assert state.default_engine() == "typed"
    assert state.ENGINES == ("reflect", "typed")
    data = state.dumps({"a": [1, 2]})
    assert state.loads(data) == {"a": [1, 2]}
    try:
        state.dumps([1], engine="native")
    except state.StateError as exc:
        assert "unavailable" in str(exc) and "CKPT_PURE_PYTHON" in str(exc), exc
    else:
        raise AssertionError("the native engine ran although it was switched off")
    print("fallback ok")
    """
)


def test_pure_python_switch_falls_back_to_typed() -> None:
    env = {**os.environ, "CKPT_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "fallback ok"


def test_native_status_is_a_flag_and_one_line_reason() -> None:
    available, reason = state.native_status()
    assert isinstance(available, bool)
    assert reason and "\n" not in reason
    assert state.default_engine() == ("native" if available else "typed")
