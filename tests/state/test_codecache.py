"""The persistent cache of compiled generated code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt.state import codecache

SOURCE = "def f():\n    return 41 + 1\n"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("CKPT_CACHE_DIR", str(directory))
    monkeypatch.delenv("CKPT_CODE_CACHE", raising=False)
    monkeypatch.setattr(codecache, "_dir", False)
    monkeypatch.setattr(codecache, "_memory", {})
    return directory


def _run(code: object) -> object:
    namespace: dict = {}
    exec(code, namespace)
    return namespace["f"]()


def test_compiled_code_is_stored_and_reused_from_disk(fresh: Path) -> None:
    code = codecache.compiled(SOURCE, "<test f>")
    assert _run(code) == 42
    files = list(fresh.glob("*.code"))
    assert len(files) == 1
    codecache._memory.clear()
    again = codecache.compiled(SOURCE, "<test f>")
    assert again is not code  # came back from disk, not from memory
    assert _run(again) == 42


def test_a_changed_source_is_a_new_entry(fresh: Path) -> None:
    codecache.compiled(SOURCE, "<test f>")
    other = codecache.compiled(SOURCE.replace("41", "40"), "<test f>")
    assert _run(other) == 41
    assert len(list(fresh.glob("*.code"))) == 2


def test_a_corrupt_entry_is_recompiled(fresh: Path) -> None:
    codecache.compiled(SOURCE, "<test f>")
    (entry,) = fresh.glob("*.code")
    entry.write_bytes(b"garbage")
    codecache._memory.clear()
    assert _run(codecache.compiled(SOURCE, "<test f>")) == 42


def test_disabled_by_environment(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKPT_CODE_CACHE", "0")
    assert _run(codecache.compiled(SOURCE, "<test f>")) == 42
    assert not fresh.exists()


def test_a_directory_others_can_write_is_not_used(fresh: Path) -> None:
    fresh.mkdir(mode=0o700)
    os.chmod(fresh, 0o777)
    assert codecache.cache_dir() is None
    assert _run(codecache.compiled(SOURCE, "<test f>")) == 42
    assert list(fresh.iterdir()) == []


def test_a_second_process_reads_what_the_first_wrote(tmp_path: Path) -> None:
    """The point of the cache: a new sandbox process reuses another's compiled code."""
    script = (
        "from dataclasses import dataclass\n"
        "from ckpt import state\n"
        "@state.savable(name='cc.Thing')\n"
        "@dataclass(eq=False)\n"
        "class Thing:\n"
        "    n: int = 0\n"
        "print(state.loads(state.dumps([Thing(5)])) [0].n)\n"
    )
    env = {**os.environ, "CKPT_CACHE_DIR": str(tmp_path / "c")}
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert first.stdout.strip() == "5", first.stderr
    entries = sorted(p.name for p in (tmp_path / "c").glob("*.code"))
    assert entries, "the first process stored nothing"
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert second.stdout.strip() == "5", second.stderr
    assert sorted(p.name for p in (tmp_path / "c").glob("*.code")) == entries


def test_a_header_declaring_a_huge_payload_allocates_nothing_big() -> None:
    """state.load reads what the file holds, not what its header claims."""
    import io
    import struct
    import tracemalloc

    from ckpt import state
    from ckpt.state import wire

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
    module = tmp_path / "quoted_models.py"
    module.write_text(
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

        from ckpt.state import registry

        kinds = registry.type_info(quoted_models.Node).schema.descriptors
        assert kinds == ("opt[ref]", "list[ref]")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("quoted_models", None)
