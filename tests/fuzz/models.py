"""The state tests' models, imported under the one name this process already uses.

The classes register under fixed stream names, and registering the same name from a
second module fails.  pytest imports ``tests/state`` as package ``state`` (``tests/`` goes
on ``sys.path``); ``python -m tests.fuzz.run`` imports it as ``tests.state``.  Importing
it here under the other name would register every class twice.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent.parent)
_PACKAGE = "state" if _TESTS in sys.path else "tests.state"

models = importlib.import_module(f"{_PACKAGE}.models")
graph_equal = importlib.import_module(f"{_PACKAGE}.graph_equal")
STATE_DATA = Path(_TESTS) / "state" / "data"
