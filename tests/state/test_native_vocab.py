"""The native core's shared vocabulary (``_native_vocab.h``) as Python sees it, and its
per-interpreter state (``_native_state.h``).

The op codes are declared once in C and exported; native.py must read them from the
module, never keep copies that drift.  The Python objects the core keeps (StateError,
msgspec's encoder) are per interpreter: a subinterpreter importing the engine must not
replace the main interpreter's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ckpt.state import native

from .requires import requires_native

pytestmark = requires_native

STATE = Path(native.__file__).parent


def _header_enums() -> dict[str, int]:
    """Every code the header declares, evaluated the way C numbers an enum."""
    text = (STATE / "_native_vocab.h").read_text()
    codes: dict[str, int] = {}
    for body in re.findall(r"enum\s*\{(.*?)\};", text, re.S):
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        nxt = 0
        for item in filter(None, (i.strip() for i in body.split(","))):
            name, _, value = (p.strip() for p in item.partition("="))
            nxt = eval(value, {}, dict(codes)) if value else nxt  # our own header
            codes[name] = nxt
            nxt += 1
    for name, value in re.findall(r"#define (MAX_\w+) (\d+)", text):
        codes[name] = int(value)
    return codes


def test_every_code_native_py_uses_is_the_modules() -> None:
    core = native._core
    names = [n for n in dir(native) if re.fullmatch(r"(OP|E|EK|L|B|Z)_[A-Z_]+", n)]
    assert len(names) > 40
    for name in names:
        assert getattr(native, name) == getattr(core, name), name
    assert native.MAX_TUPLE_ITEMS == core.MAX_TUPLE_ITEMS
    assert (native.MAX_ELEM_DEPTH, native.MAX_ELEM_NODES) == (
        core.MAX_ELEM_DEPTH,
        core.MAX_ELEM_NODES,
    )
    assert native._VALUE_KINDS == {
        "datetime": core.VK_DATETIME,
        "date": core.VK_DATE,
        "timedelta": core.VK_TIMEDELTA,
        "uuid": core.VK_UUID,
    }
    bits = {t.__name__: b for t, b in native._BITS.items()}
    assert bits == {
        "NoneType": core.M_NONE,
        "bool": core.M_BOOL,
        "int": core.M_INT,
        "float": core.M_FLOAT,
        "str": core.M_STR,
        "bytes": core.M_BYTES,
    }


def test_the_module_exports_what_the_header_declares() -> None:
    declared = _header_enums()
    exported = {n: getattr(native._core, n) for n in declared if hasattr(native._core, n)}
    # every op, element, bit, build, zero and value-kind code is exported, with its value
    for name, value in declared.items():
        if re.match(r"(OP|E|EK|M|L|B|Z|VK|MAX)_", name):
            assert exported.get(name) == value, name
    assert native._core.MP_NIL == 0xC0 and native._core.MP_FIXARRAY == 0x90


def test_without_the_core_native_py_still_imports() -> None:
    code = textwrap.dedent(
        """
        from ckpt.state import native
        assert not native.native_status()[0]
        ops = [native.OP_PY, native.OP_SCALAR, native.OP_REF, native.OP_VALUE]
        assert len(set(ops)) == len(ops)
        assert sorted(native._BITS.values()) == [1, 2, 4, 8, 16, 32]
        print("ok")
        """
    )
    env = {**os.environ, "CKPT_PURE_PYTHON": "1", "PYTHONPATH": str(STATE.parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.stdout.strip() == "ok", out.stderr


def test_a_subinterpreter_keeps_its_own_state() -> None:
    """A subinterpreter that imports the engine configures its own StateError; the main
    interpreter's errors stay its own class afterwards (with one module-wide copy they
    were the subinterpreter's, whose class the main one's ``except`` does not catch)."""
    code = textwrap.dedent(
        """
        import _testcapi
        from ckpt import state
        from ckpt.errors import StateError
        from ckpt.state import native

        assert native.native_status()[0]
        # msgspec itself may not load in a subinterpreter: on 3.12 it fails there once
        # another module was imported first (wire.py: msgspec and ckpt.errors, no C of ours)
        if any(_testcapi.run_in_subinterp("import ckpt.state.wire") != 0 for _ in "ab"):
            print("skip")
            raise SystemExit
        sub = '''
        from ckpt import state
        from ckpt.errors import StateError
        data = state.dumps([1, "a", None], engine="native")
        assert state.loads(data, engine="native") == [1, "a", None]
        try:
            state.loads(data[:-3] + bytes(3), engine="native")
        except StateError:
            pass
        '''
        assert _testcapi.run_in_subinterp(sub) == 0
        data = state.dumps([1, "a", None], engine="native")
        assert state.loads(data, engine="native") == [1, "a", None]
        try:
            native._core.read_split(b"\\x93\\x01")
        except StateError:
            print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(STATE.parents[1])}  # keeps LD_PRELOAD (ASan)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    if out.stdout.strip() == "skip":
        pytest.skip("msgspec does not load in a subinterpreter on this Python")
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("lacks", ["E_LIST", "OP_ENUM_DYN", "MAX_ELEM_NODES", "L_ELEM"])
def test_a_core_built_from_older_sources_is_refused_in_words(lacks: str) -> None:
    """A checkout updated without a reinstall keeps its old ``.so``: ckpt then runs on
    the pure-Python engines and ``--version`` says why, never a traceback."""
    code = textwrap.dedent(
        f"""
        import importlib.machinery, importlib.util, sys
        path = {str(Path(native._core.__file__))!r}
        loader = importlib.machinery.ExtensionFileLoader("ckpt.state._native", path)
        spec = importlib.util.spec_from_file_location("ckpt.state._native", path, loader=loader)
        core = importlib.util.module_from_spec(spec)  # ckpt.state not imported yet
        delattr(core, {lacks!r})  # as a build from before that code was added
        sys.modules["ckpt.state._native"] = core
        from ckpt import state
        from ckpt.state import native
        ok, why = native.native_status()
        assert not ok, why
        print(why)
        assert state.loads(state.dumps([1, (2, "x")])) == [1, (2, "x")]
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        f"the C extension is older than this ckpt (it lacks {lacks}); reinstall ckpt"
    )
