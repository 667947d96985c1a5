"""Loading instantiates only registered savable types: a stream can name nothing else."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from ckpt import state
from ckpt.state import wire

from .models import Circle, Color, Everything, Leaf, Node, Pair

TYPES = 3  # index of the type table in the top-level array (documented; the rest is opaque)


def _stream(root: Any, engine: str) -> list:
    return wire.unframe(state.dumps(root, engine=engine))


def _rename(payload: list, old: str, new: str) -> list:
    renamed = 0
    for entry in payload[TYPES]:
        if entry[0] == old:
            entry[0] = new
            renamed += 1
    assert renamed == 1, f"type {old!r} not found in {payload[TYPES]!r}"
    return payload


@pytest.fixture
def no_system_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record any call of os.system / os.popen (none may happen)."""
    calls: list[Any] = []
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append(("system", a)) or 0)
    monkeypatch.setattr(os, "popen", lambda *a, **k: calls.append(("popen", a)))
    return calls


@pytest.mark.parametrize(
    "evil",
    ["os.system", "builtins.eval", "subprocess.Popen", "posix.system", "tests.state.Leaf2"],
)
def test_unregistered_type_name_is_refused(
    evil: str, engines: tuple[str, str], no_system_calls: list[Any]
) -> None:
    payload = _rename(_stream(Leaf(1), engines[0]), "tests.state.Leaf", evil)
    with pytest.raises(state.StateError, match=evil.replace(".", r"\.")):
        state.loads(wire.frame(payload), engine=engines[1])
    assert no_system_calls == []


def test_nothing_is_imported_for_an_unknown_module(engines: tuple[str, str]) -> None:
    module = "ckpt_state_canary_module_that_must_not_be_imported"
    payload = _rename(
        _stream(Node(1, next=Node(2)), engines[0]), "tests.state.Node", f"{module}.Evil"
    )
    with pytest.raises(state.StateError, match=module):
        state.loads(wire.frame(payload), engine=engines[1])
    assert module not in sys.modules


def test_stdlib_module_named_in_a_stream_is_not_imported(engines: tuple[str, str]) -> None:
    module = "antigravity"  # importing it would open a web browser
    assert module not in sys.modules
    payload = _rename(_stream(Leaf(1), engines[0]), "tests.state.Leaf", f"{module}.geohash")
    with pytest.raises(state.StateError):
        state.loads(wire.frame(payload), engine=engines[1])
    assert module not in sys.modules


def test_unregistered_name_in_a_polymorphic_field(engines: tuple[str, str]) -> None:
    payload = _rename(_stream(Pair(Leaf(1), None), engines[0]), "tests.state.Leaf", "os.system")
    with pytest.raises(state.StateError, match=r"os\.system"):
        state.loads(wire.frame(payload), engine=engines[1])


def test_one_savable_renamed_to_another_does_not_load_as_it(engines: tuple[str, str]) -> None:
    """Renaming Leaf to Node in the table either loads a Node (fields by name) or fails."""
    payload = _rename(_stream(Leaf(1), engines[0]), "tests.state.Leaf", "tests.state.Node")
    try:
        loaded = state.loads(wire.frame(payload), engine=engines[1])
    except state.StateError:
        return
    assert type(loaded) is Node


def test_enum_name_rewritten_to_an_unknown_type(engines: tuple[str, str]) -> None:
    """Enums appear in the type table too; an unknown one is refused like any type."""
    payload = _stream(Pair(Color.BLUE, None), engines[0])
    names = [entry[0] for entry in payload[TYPES]]
    enum_names = [n for n in names if "Color" in n]
    if not enum_names:
        pytest.skip(f"this stream records the enum without a type-table entry: {names}")
    _rename(payload, enum_names[0], "os.system")
    with pytest.raises(state.StateError, match=r"os\.system"):
        state.loads(wire.frame(payload), engine=engines[1])


def test_type_names_swapped_between_entries(engines: tuple[str, str]) -> None:
    """Any entry renamed to any other registered name (dataclass <-> enum included) either
    loads or is a StateError: registered names never lead to crashes by type confusion."""
    root = [Everything(color=Color.GREEN, leaf=Leaf(2), shape=Circle("c", 1.0)), Pair(Leaf(1))]
    payload = _stream(root, engines[0])
    names = [entry[0] for entry in payload[TYPES]]
    assert len(names) >= 4
    failures = []
    for i, _ in enumerate(names):
        for other in names:
            edited = wire.unframe(wire.frame(payload))
            edited[TYPES][i][0] = other
            try:
                state.loads(wire.frame(edited), engine=engines[1])
            except state.StateError:
                pass
            except Exception as exc:
                failures.append(f"{names[i]} -> {other}: {type(exc).__name__}: {exc}"[:200])
    assert failures == [], "\n".join(failures[:5])
