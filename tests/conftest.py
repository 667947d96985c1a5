"""Suite-wide settings: generated code is cached in a temporary directory, so test runs
never write into the user's ~/.cache and always start from an empty cache; the directory
is removed when the session ends."""

from __future__ import annotations

import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="ckpt-test-codecache-")
os.environ.setdefault("CKPT_CACHE_DIR", _CACHE)


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    shutil.rmtree(_CACHE, ignore_errors=True)
