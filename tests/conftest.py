"""Suite-wide settings: generated code is cached in a temporary directory, so test runs
never write into the user's ~/.cache and always start from an empty cache; the directory
is removed when the session ends.  One Hypothesis profile for every test, whichever
directories a run collects."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# No deadline: a per-example wall-clock limit (200 ms by default) fails a test whenever a
# loaded machine stalls it, and tests that must not hang have the state tests' watchdog.
# No example database: it would write .hypothesis/ into the shared working tree.
# Registered here, not in one directory's conftest, so a run of tests/cgroups alone gets
# the same settings as the full suite.
settings.register_profile(
    "ckpt-tests",
    database=None,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,  # only the watchdog: one timer for all examples
    ],
)
settings.load_profile("ckpt-tests")

_CACHE = tempfile.mkdtemp(prefix="ckpt-test-codecache-")
os.environ.setdefault("CKPT_CACHE_DIR", _CACHE)


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    shutil.rmtree(_CACHE, ignore_errors=True)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto`` (pyproject's addopts): one more than the cores, since most
    tests spend their time waiting on the processes they start, not on the CPU.  The
    workers inherit the controller's CKPT_CACHE_DIR, so generated code is shared."""
    return (os.cpu_count() or 1) + 1


def _slowdown() -> float:
    """CKPT_TEST_SLOWDOWN scales every watchdog: the sanitizer run sets it, since its
    code runs several times slower than a release build and a slow test is not a hang."""
    return max(1.0, float(os.environ.get("CKPT_TEST_SLOWDOWN") or 1))


class Hang(Exception):
    """Raised by the watchdog: the code under test ran far longer than it ever should."""


@pytest.fixture
def watchdog(request: pytest.FixtureRequest) -> Iterator[None]:
    """Turn a hang into a failure (not a timing assertion: the limit is very generous;
    ``@pytest.mark.watchdog_s(N)`` raises it for a test whose outside party is slow by
    design, as a store that answers every PUT after 30 s)."""
    marker = request.node.get_closest_marker("watchdog_s")
    limit = (float(marker.args[0]) if marker else 60.0) * _slowdown()

    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"the code under test did not finish within {limit:g} s: a hang?")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
