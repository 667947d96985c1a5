"""Edge cases found while building the engine (kept apart from the main state suite)."""

from __future__ import annotations

import io
import struct
import sys
import tracemalloc
from pathlib import Path

import pytest

from ckpt import state
from ckpt.state import registry, wire


def test_a_header_declaring_a_huge_payload_allocates_nothing_big() -> None:
    """state.load reads what the file holds, not what its header claims."""
    header = struct.pack("<4sBIQ", wire.MAGIC, wire.FORMAT_VERSION, 0, 1 << 60)
    tracemalloc.start()
    try:
        with pytest.raises(state.StateError, match="truncated"):
            state.load(io.BytesIO(header + b"x" * 100))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_quoted_annotations_under_postponed_evaluation_resolve(tmp_path: Path) -> None:
    """`next: "Node | None"` in a module with `from __future__ import annotations` is a
    string inside a string; it must still give a reference kind, not `any`."""
    (tmp_path / "quoted_models.py").write_text(
        "from __future__ import annotations\n"
        "from dataclasses import dataclass, field\n"
        "from ckpt import state\n"
        "@state.savable(name='quoted.Node')\n"
        "@dataclass(eq=False)\n"
        "class Node:\n"
        "    next: 'Node | None' = None\n"
        "    kids: 'list[Node]' = field(default_factory=list)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import quoted_models

        kinds = registry.type_info(quoted_models.Node).schema.descriptors
        assert kinds == ("opt[ref]", "list[ref]")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("quoted_models", None)


def test_the_engine_imports_no_hashlib() -> None:
    """Every sandbox process imports the engine; hashlib would load OpenSSL into each."""
    import subprocess

    code = "import sys; from ckpt import state; print('hashlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
