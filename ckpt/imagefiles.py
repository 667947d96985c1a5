"""What every layer agrees an image is: the names of its files and how deep a chain of
images may go.

A leaf (it imports nothing), so the thread that fetches an image from a store can check
a manifest against these while the sandbox's main thread is still importing the
statefile package (two threads importing one package can see it half made).
"""

from __future__ import annotations

CHECKPOINT_IMG = "checkpoint.img"
PAGES_IMG = "pages.img"
PAGES_META_IMG = "pages_meta.img"
STATS_JSON = "stats.json"
# every file an image may have: a restore refuses a manifest listing any other
IMAGE_FILES = frozenset({CHECKPOINT_IMG, PAGES_IMG, PAGES_META_IMG, STATS_JSON})
MAX_CHAIN = 16  # images in one chain, the final one included

__all__ = [
    "CHECKPOINT_IMG",
    "IMAGE_FILES",
    "MAX_CHAIN",
    "PAGES_IMG",
    "PAGES_META_IMG",
    "STATS_JSON",
]
