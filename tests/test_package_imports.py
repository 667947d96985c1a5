"""The package layering, read from the source: which ``ckpt`` package may import which.

Each module's imports are parsed with ``ast`` (nothing is imported), counting imports
inside functions and ``TYPE_CHECKING`` blocks too, so a rule cannot be dodged by a
deferred import.  The top-level leaf modules (``ckpt.errors``, ``ckpt.keyfile``,
``ckpt.cachedir`` and the ``ckpt`` package itself) import no package and may be used
from anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ckpt

ROOT = Path(ckpt.__file__).parent
LEAVES = {"", "errors", "keyfile", "cachedir"}  # "": the ckpt package itself

# package -> the other packages it may import (besides the leaves)
ONLY = {
    "state": set(),  # the bottom: nothing of ckpt above it
    "cgroups": set(),
    "storage": set(),
    "kernel": {"state"},
    "statefile": {"state"},
}
# package -> packages it must never import
NEVER = {
    "kernel": {"sandbox", "statefile", "storage", "migration"},
    "sandbox": {"migration", "cli", "bench"},
    "migration": {"cli", "bench"},
    "images": {"sandbox", "migration", "cli", "bench"},
}
# Imports that break a rule today, each to be removed from here by the change that ends
# it (test_every_known_exception_is_still_there fails once it is gone).  No new entries.
KNOWN: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool = False) -> set[str]:
    """The absolute names of every ``ckpt`` module or attribute ``source`` imports,
    anywhere in it: ``from ckpt.state import wire`` gives ``ckpt.state``,
    ``from ckpt import state`` and ``from . import state`` (in ckpt/x.py) ``ckpt.state``."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base == "ckpt" or not node.module:  # the names may be modules
                found.update(f"{base}.{a.name}" for a in node.names)
            else:
                found.add(base)
    return {name for name in found if name == "ckpt" or name.startswith("ckpt.")}


def _part(name: str) -> str:
    """The top-level part of ckpt a name is in: a package, a leaf module, or ""."""
    top = name.split(".")[1] if "." in name else ""
    return top if (ROOT / top).is_dir() or (ROOT / f"{top}.py").is_file() else ""


def edges() -> set[tuple[str, str]]:
    """(module, part of ckpt it imports) for every import that leaves the module's part."""
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        source = path.read_text(encoding="utf-8")
        own = _part(module)
        for name in imports_of(source, module, path.name == "__init__.py"):
            part = _part(name)
            if part != own:
                found.add((module, part))
    return found


def violations(found: set[tuple[str, str]]) -> set[tuple[str, str]]:
    bad = set()
    for module, part in found:
        own = _part(module)
        if part in LEAVES:
            continue
        if own in LEAVES or (own in ONLY and part not in ONLY[own]):
            bad.add((module, part))
        if part in NEVER.get(own, ()):
            bad.add((module, part))
    return bad


def test_imports_are_found_wherever_they_are() -> None:
    source = (
        "import os\n"
        "from ckpt.state import wire\n"
        "def f():\n"
        "    from ckpt.sandbox.host.process import Sandbox\n"
        "    import ckpt.storage.s3\n"
        "    from .. import migration\n"
        "    from . import chunks\n"
        "if TYPE_CHECKING:\n"
        "    from ckpt import cli\n"
    )
    assert imports_of(source, "ckpt.statefile.image") == {
        "ckpt.state",
        "ckpt.sandbox.host.process",
        "ckpt.storage.s3",
        "ckpt.migration",
        "ckpt.statefile.chunks",
        "ckpt.cli",
    }
    assert imports_of("from .wire import x", "ckpt.state", is_package=True) == {"ckpt.state.wire"}


def test_the_scan_sees_the_tree() -> None:
    found = edges()
    assert any(m.startswith("ckpt.kernel.") and p == "state" for m, p in found)
    assert ("ckpt.cli.base", "state") in found  # imported inside a function there
    assert found >= KNOWN


@pytest.mark.parametrize(
    ("module", "part"),
    [
        ("ckpt.state.graph", "kernel"),
        ("ckpt.state.graph", "statefile"),
        ("ckpt.kernel.mm", "sandbox"),
        ("ckpt.kernel.mm", "statefile"),
        ("ckpt.statefile.image", "sandbox"),
        ("ckpt.statefile.image", "storage"),
        ("ckpt.storage.s3", "statefile"),
        ("ckpt.cgroups.manager", "sandbox"),
        ("ckpt.sandbox.host.process", "migration"),
        ("ckpt.sandbox.host.process", "cli"),
        ("ckpt.migration.session", "bench"),
        ("ckpt.images.remote", "sandbox"),
        ("ckpt.statefile.image", "storage"),
        ("ckpt.errors", "state"),
    ],
)
def test_a_forbidden_import_is_a_violation(module: str, part: str) -> None:
    assert violations({(module, part)}) == {(module, part)}


@pytest.mark.parametrize(
    ("module", "part"),
    [
        ("ckpt.state.codecache", "cachedir"),
        ("ckpt.kernel.mm", "state"),
        ("ckpt.statefile.image", "state"),
        ("ckpt.storage.s3", "errors"),
        ("ckpt.sandbox.host.process", "statefile"),
        ("ckpt.migration.session", "sandbox"),
        ("ckpt.cli.base", "bench"),
        ("ckpt.keyfile", "errors"),
    ],
)
def test_an_allowed_import_is_not(module: str, part: str) -> None:
    assert violations({(module, part)}) == set()


def test_no_package_imports_what_its_layer_must_not() -> None:
    new = violations(edges()) - KNOWN
    assert not new, "imports across the package layering: " + ", ".join(
        f"{module} imports ckpt.{part or '(package)'}" for module, part in sorted(new)
    )


def test_every_known_exception_is_still_there() -> None:
    gone = KNOWN - violations(edges())
    assert not gone, f"no longer imported, remove from KNOWN: {sorted(gone)}"
