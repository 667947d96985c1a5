"""No two modules of ``ckpt.sandbox`` import each other, directly or around a circle,
counting imports inside functions too: each module can be read (and tested) knowing
only the modules below it."""

from __future__ import annotations

import ast
from pathlib import Path

import ckpt.sandbox

PACKAGE = "ckpt.sandbox"


def _imports(path: Path) -> set[str]:
    """The ``ckpt.sandbox`` modules that ``path`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m.removeprefix(f"{PACKAGE}.") for m in found if m.startswith(f"{PACKAGE}.")}


def _graph() -> dict[str, set[str]]:
    """Module (``wire.rpc``) -> the modules of the package it imports."""
    here = Path(ckpt.sandbox.__file__).parent
    modules = {
        ".".join(p.relative_to(here).with_suffix("").parts): p
        for p in here.rglob("*.py")
        if p.stem not in ("__init__", "__main__")
    }
    return {name: _imports(path) & set(modules) - {name} for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the modules around it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name)):
            return found
    return None


def test_the_graph_sees_the_imports_it_should() -> None:
    graph = _graph()
    assert {"wire.rpc", "wire.protocol", "wire.handover"} <= graph["host.process"]
    assert "client.childenv" in graph["client.spawn"]
    assert "client.childenv" in graph["client.template_client"]
    assert {"client.spawn", "client.pids", "client.group"} <= graph["client.lifecycle"]
    assert "client.group" in graph["client.pids"]


def test_no_import_circle_in_the_sandbox_package() -> None:
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()) or [])


def test_a_circle_is_found() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
