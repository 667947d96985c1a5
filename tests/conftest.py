"""Suite-wide settings: generated code is cached in a temporary directory, so test runs
never write into the user's ~/.cache and always start from an empty cache."""

from __future__ import annotations

import os
import tempfile

_CACHE = tempfile.mkdtemp(prefix="ckpt-test-codecache-")
os.environ.setdefault("CKPT_CACHE_DIR", _CACHE)
