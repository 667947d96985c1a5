"""The CLI tests share the sandbox tests' fixtures: a temporary root, the CLI in real
subprocesses, and a teardown that checks nothing of any sandbox is left."""

from tests.sandbox.conftest import cli, tcli  # noqa: F401
