"""Only ``ckpt/images`` (and the CLI that parses what the user typed) knows that an
image may live in an object store: the sandbox, migration and statefile packages ask a
Location, never the text; statefile imports no storage."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ckpt

PKG = Path(ckpt.__file__).parent
STORE_TEXT = re.compile(r"s3://|is_remote")


def _sources(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (PKG / pkg).rglob("*.py"))


def test_no_store_text_outside_images() -> None:
    found = [
        f"{path.relative_to(PKG.parent)}:{n}: {line.strip()}"
        for path in _sources("sandbox", "migration", "statefile")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if STORE_TEXT.search(line)
    ]
    assert found == []


def test_statefile_imports_no_storage() -> None:
    found = []
    for path in _sources("statefile"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.startswith("ckpt.storage")]
    assert found == []


def test_the_scan_sees_what_it_looks_for(tmp_path: Path) -> None:
    """The rule would pass on nothing: it must see the text where it is."""
    assert _sources("sandbox") and _sources("statefile") and _sources("migration")
    assert any(STORE_TEXT.search(p.read_text()) for p in _sources("images"))
