"""Pre-dumps and pre-copy see the sandbox host through ``access.KernelAccess`` only: five
attributes, which ``Host`` has and a test's stand-in can have, never the rest of
``Host``.  Read from the source with ``ast``: every ``host.NAME`` in precopy.py."""

from __future__ import annotations

import ast
from pathlib import Path

from ckpt.sandbox.host import access, precopy, process


def _attributes_of(source: str, name: str) -> set[str]:
    """Every ``NAME.attr`` read or written in ``source``, and ``self.NAME.attr``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if (isinstance(base, ast.Name) and base.id == name) or (
            isinstance(base, ast.Attribute) and base.attr == name
        ):
            found.add(node.attr)
    return found


def test_precopy_uses_only_what_kernel_access_declares() -> None:
    used = _attributes_of(Path(precopy.__file__).read_text(), "host")
    assert used, "the scan found no use of the host at all"
    assert used <= set(access.FIELDS), (
        f"precopy reaches past KernelAccess: {used - set(access.FIELDS)}"
    )


def test_the_protocol_declares_its_fields() -> None:
    assert set(access.FIELDS) == set(access.KernelAccess.__annotations__)


def test_the_host_has_every_field() -> None:
    tree = ast.parse(Path(process.__file__).read_text())
    host = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Host")
    init = next(n for n in host.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assigned = {
        t.attr
        for n in ast.walk(init)
        for t in (n.targets if isinstance(n, ast.Assign) else [getattr(n, "target", None)])
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }
    assert set(access.FIELDS) <= assigned


def test_a_reach_past_the_protocol_is_seen() -> None:
    assert _attributes_of("def f(host):\n    host.http.close()\n", "host") == {"http"}
    assert _attributes_of("class R:\n    def g(self):\n        self.host.frozen = 1\n", "host") == {
        "frozen"
    }
