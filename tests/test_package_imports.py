"""The package layering, read from the source: which ``ckpt`` package may import which,
and inside ``ckpt.sandbox``, which process's subpackage may import which.

Each module's imports are parsed with ``ast`` (nothing is imported), counting imports
inside functions and ``TYPE_CHECKING`` blocks too, so a rule cannot be dodged by a
deferred import.  The top-level leaf modules (``ckpt.errors``, ``ckpt.keyfile``,
``ckpt.cachedir``, ``ckpt.engines``, ``ckpt.imagefiles``, ``ckpt.settings``, ``ckpt.faults``, the
``ckpt`` package itself) import no package and may be used from anywhere.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import ckpt

ROOT = Path(ckpt.__file__).parent
LEAVES = {
    "",
    "errors",
    "keyfile",
    "cachedir",
    "engines",
    "imagefiles",
    "settings",
    "faults",
}  # "": the ckpt package itself

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
# ckpt.sandbox is split by the process that runs the code: subpackage -> the others it
# may import.  The wire is shared by all and imports none; the CLI side and the host talk
# over the wire and never run each other's code; the template forks hosts.
SANDBOX_MAY = {
    "wire": set(),
    "client": {"wire"},
    "host": {"wire"},
    "template": {"wire", "host"},
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


@functools.cache
def _is_module(name: str) -> bool:
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def module_imports(source: str, module: str, is_package: bool = False) -> set[str]:
    """The ``ckpt`` modules ``source`` imports, anywhere in it, each to the module:
    ``from ckpt.sandbox.wire import rpc`` gives ``ckpt.sandbox.wire.rpc``, and
    ``from ckpt.sandbox.wire.rpc import call`` the same."""
    found = set()
    for name in imports_of(source, module, is_package):
        found.add(name if _is_module(name) else name.rpartition(".")[0])
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if _is_module(f"{node.module}.{a.name}"):
                    found.add(f"{node.module}.{a.name}")
    return {name for name in found if name.startswith("ckpt")}


def _sandbox_part(name: str) -> str | None:
    """The subpackage of ``ckpt.sandbox`` a module is in (``wire``...), "" for the
    package itself, None outside it."""
    parts = name.split(".")
    if parts[:2] != ["ckpt", "sandbox"]:
        return None
    return parts[2] if len(parts) > 2 else ""


@functools.cache
def public(subpackage: str) -> frozenset[str]:
    """The modules a sandbox subpackage's ``__init__`` lists in ``__all__``."""
    tree = ast.parse((ROOT / "sandbox" / subpackage / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return frozenset(ast.literal_eval(node.value))
    return frozenset()


@functools.cache
def sandbox_edges() -> frozenset[tuple[str, str]]:
    """(module of ckpt, ``ckpt.sandbox`` module it imports) for every such import."""
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        source = path.read_text(encoding="utf-8")
        for name in module_imports(source, module, path.name == "__init__.py"):
            if _sandbox_part(name):
                found.add((module, name))
    return frozenset(found)


def sandbox_violations(
    found: set[tuple[str, str]] | frozenset[tuple[str, str]],
) -> set[tuple[str, str]]:
    """Imports into another process's subpackage that it may not make (``SANDBOX_MAY``),
    or of a module that subpackage does not list as its surface (``__all__``)."""
    bad = set()
    for module, name in found:
        own, target = _sandbox_part(module), _sandbox_part(name)
        if not target or own == target:
            continue
        if own is not None and target not in SANDBOX_MAY.get(own, ()):
            bad.add((module, name))
        inner = name.split(".")[3:4]
        if inner and inner[0] not in public(target):
            bad.add((module, name))
    return bad


def _part(name: str) -> str:
    """The top-level part of ckpt a name is in: a package, a leaf module, or ""."""
    top = name.split(".")[1] if "." in name else ""
    return top if (ROOT / top).is_dir() or (ROOT / f"{top}.py").is_file() else ""


@functools.cache
def edges() -> frozenset[tuple[str, str]]:
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
    return frozenset(found)


def violations(found: set[tuple[str, str]] | frozenset[tuple[str, str]]) -> set[tuple[str, str]]:
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
        ("ckpt.images.factory", "migration"),
        ("ckpt.statefile.image", "storage"),
        ("ckpt.statefile.reader", "images"),
        ("ckpt.state.api", "statefile"),
        ("ckpt.state.api", "storage"),
        ("ckpt.state.api", "images"),
        ("ckpt.state.api", "sandbox"),
        ("ckpt.kernel.vfs", "storage"),
        ("ckpt.kernel.vfs", "migration"),
        ("ckpt.kernel.vfs", "images"),
        ("ckpt.errors", "state"),
        ("ckpt.settings", "sandbox"),
        ("ckpt.faults", "state"),
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
        ("ckpt.state.native_core", "settings"),
        ("ckpt.statefile.pages", "faults"),
        ("ckpt.settings", "faults"),
        ("ckpt.images.factory", "statefile"),
        ("ckpt.images.factory", "storage"),
    ],
)
def test_an_allowed_import_is_not(module: str, part: str) -> None:
    assert violations({(module, part)}) == set()


def test_the_layering_rules_are_in_the_tables() -> None:
    """The rules the layering rests on, read back from the tables: ``state`` imports
    nothing above it, ``statefile`` not ``storage``, ``images`` not ``sandbox``,
    ``kernel`` none of ``sandbox``, ``statefile``, ``storage``, ``migration``."""
    assert ONLY["state"] == set()
    assert "storage" not in ONLY["statefile"]
    assert "sandbox" in NEVER["images"]
    assert {"sandbox", "statefile", "storage", "migration"} <= NEVER["kernel"]
    assert ONLY["kernel"] == {"state"}
    assert {"settings", "faults", "engines", "imagefiles"} <= LEAVES


def test_no_package_imports_what_its_layer_must_not() -> None:
    new = violations(edges()) - KNOWN
    assert not new, "imports across the package layering: " + ", ".join(
        f"{module} imports ckpt.{part or '(package)'}" for module, part in sorted(new)
    )


def test_every_known_exception_is_still_there() -> None:
    gone = KNOWN - violations(edges())
    assert not gone, f"no longer imported, remove from KNOWN: {sorted(gone)}"


# -- inside ckpt.sandbox: one subpackage per process ----------------------------------


def test_every_sandbox_module_belongs_to_a_process() -> None:
    here = ROOT / "sandbox"
    flat = sorted(p.name for p in here.glob("*.py") if p.name != "__init__.py")
    assert not flat, f"modules of no process's subpackage in ckpt/sandbox: {flat}"
    subpackages = {p.name for p in here.iterdir() if (p / "__init__.py").is_file()}
    assert subpackages == set(SANDBOX_MAY)
    for sub in subpackages:
        listed = public(sub)
        assert listed, f"ckpt.sandbox.{sub} declares no surface (__all__)"
        missing = {m for m in listed if not _is_module(f"ckpt.sandbox.{sub}.{m}")}
        assert not missing, f"ckpt.sandbox.{sub}.__all__ names no module: {sorted(missing)}"


def test_the_sandbox_scan_sees_the_tree() -> None:
    found = sandbox_edges()
    assert ("ckpt.sandbox.host.process", "ckpt.sandbox.wire.rpc") in found
    assert ("ckpt.sandbox.client.lifecycle", "ckpt.sandbox.client.spawn") in found
    assert ("ckpt.sandbox.template.server", "ckpt.sandbox.host.process") in found
    assert ("ckpt.cli.options", "ckpt.sandbox.client.lifecycle") in found
    assert module_imports("from ckpt.sandbox.wire.rpc import call", "ckpt.x") == {
        "ckpt.sandbox.wire.rpc"
    }


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("ckpt.sandbox.wire.rpc", "ckpt.sandbox.host.http"),
        ("ckpt.sandbox.wire.paths", "ckpt.sandbox.client.status"),
        ("ckpt.sandbox.wire.handover", "ckpt.sandbox.template.server"),
        ("ckpt.sandbox.host.dump", "ckpt.sandbox.client.lifecycle"),
        ("ckpt.sandbox.host.process", "ckpt.sandbox.template.server"),
        ("ckpt.sandbox.template.server", "ckpt.sandbox.client.template_client"),
        ("ckpt.sandbox.client.lifecycle", "ckpt.sandbox.host.remote_image"),
        ("ckpt.sandbox.client.spawn", "ckpt.sandbox.template.server"),
        ("ckpt.cli.sandbox", "ckpt.sandbox.client.pids"),  # not in client's __all__
        ("ckpt.migration.outgoing", "ckpt.sandbox.host.snapshot"),
        ("ckpt.sandbox.template.server", "ckpt.sandbox.host.introspect"),
    ],
)
def test_a_forbidden_sandbox_import_is_a_violation(module: str, imported: str) -> None:
    assert sandbox_violations({(module, imported)}) == {(module, imported)}


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("ckpt.sandbox.client.lifecycle", "ckpt.sandbox.wire.protocol"),
        ("ckpt.sandbox.client.lifecycle", "ckpt.sandbox.client.pids"),
        ("ckpt.sandbox.host.process", "ckpt.sandbox.wire.handover"),
        ("ckpt.sandbox.host.process", "ckpt.sandbox.host.snapshot"),
        ("ckpt.sandbox.template.server", "ckpt.sandbox.host.process"),
        ("ckpt.cli.sandbox", "ckpt.sandbox.client.lifecycle"),
        ("ckpt.migration.session", "ckpt.sandbox.wire.netns"),
        ("ckpt.bench.load", "ckpt.sandbox.host.http"),
    ],
)
def test_an_allowed_sandbox_import_is_not(module: str, imported: str) -> None:
    assert sandbox_violations({(module, imported)}) == set()


def test_no_sandbox_process_imports_what_it_must_not() -> None:
    bad = sandbox_violations(sandbox_edges())
    assert not bad, "imports across ckpt.sandbox's processes: " + ", ".join(
        f"{module} imports {name}" for module, name in sorted(bad)
    )
