"""Fixtures for sandbox tests: a temp root, a CLI runner in real subprocesses, and a
teardown that kills and deletes every sandbox, then asserts no process or cgroup remains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from ckpt.sandbox.client import lifecycle
from ckpt.sandbox.host.http import get_json
from ckpt.sandbox.wire.paths import Root

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_dirs(sandbox_id: str) -> list[Path]:
    """Every hierarchy's directory for a cgroup of sandbox ID that exists, under any root:
    ``ckpt/<root hash>/ID`` (``Root.cgroup_name``), and the older ``ckpt/ID`` too."""
    if not CGROUP_ROOT.is_dir():
        return []
    found: list[Path] = []
    for pattern in (f"ckpt/{sandbox_id}", f"ckpt/*/{sandbox_id}"):
        found += [p for p in CGROUP_ROOT.glob(f"*/{pattern}") if p.is_dir()]
        found += [p for p in CGROUP_ROOT.glob(pattern) if p.is_dir()]
    return sorted(set(found))


def sandbox_processes(root: Path) -> list[psutil.Process]:
    """Live processes of ``root``, found by their command line: the template and every
    sandbox by their titles (``ckpt template ROOT``, ``ckpt sandbox ID (ROOT)``), and
    by the command lines they start with, before they set them: cold-started sandboxes
    (``ckpt.sandbox.host.process``) and the template (``ckpt.sandbox.template --root ROOT``,
    which a sandbox forked from it has until it names itself)."""
    found = []
    where = str(root.absolute())
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        shown = cmd[0] if cmd and not any(cmd[1:]) else ""
        if shown == f"ckpt template {where}" or (
            shown.startswith("ckpt sandbox ") and shown.endswith(f" ({where})")
        ):
            found.append(proc)
        elif "ckpt.sandbox.host.process" in cmd:
            sock = cmd[cmd.index("--socket") + 1] if "--socket" in cmd else ""
            sid = cmd[cmd.index("--id") + 1] if "--id" in cmd else ""
            if sock.startswith(str(root)) or (root / sid).exists():
                found.append(proc)
        elif (
            "ckpt.sandbox.template" in cmd
            and "--root" in cmd
            and cmd[cmd.index("--root") + 1] == str(root.absolute())
        ):
            found.append(proc)
    return found


def stop_template(root: Path) -> None:
    """Stop the root's template, as ``ckpt template stop`` does, and wait for it."""
    from ckpt.sandbox.client import template_client

    template_client.stop(root)


@dataclass
class Cli:
    """Runs ``python -m ckpt --root ROOT ...`` in a subprocess."""

    root: Path
    env: dict[str, str]
    ids: set[str]

    def __call__(
        self, *args: str, check: bool = True, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        if len(args) > 1 and args[0] in ("run", "restore"):
            self.ids.add(args[1])
        proc = subprocess.run(
            [sys.executable, "-m", "ckpt", "--root", str(self.root), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"ckpt {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "ckpt", "--root", str(self.root), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**self.env, **(env or {})},
        )

    def state_cli(self, sandbox_id: str) -> dict:
        """``ckpt state ID`` through the CLI."""
        return json.loads(self("state", sandbox_id).stdout)

    def state(self, sandbox_id: str) -> dict:
        """The same JSON from the library, without paying a CLI start-up per query."""
        return lifecycle.state(Root(self.root), sandbox_id).to_json()

    def get(self, sandbox_id: str) -> dict:
        host, _, port = self.state(sandbox_id)["address"].rpartition(":")
        status, body = get_json(host, int(port))
        assert status == 200
        return body


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    root = tmp_path / "root"
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("CKPT_FAULT", None)
    runner = Cli(root, env, set())
    yield runner
    r = Root(root)
    for sandbox_id in set(r.ids()) | runner.ids:
        if r.exists(sandbox_id):
            lifecycle.delete(r, sandbox_id, force=True)
    stop_template(root)
    assert sandbox_processes(root) == []
    for sandbox_id in runner.ids:
        assert cgroup_dirs(sandbox_id) == [], f"cgroup left behind for {sandbox_id}"
        assert not (root / sandbox_id).exists()


def quota_allowed() -> tuple[bool, str]:
    try:
        from ckpt import cgroups

        return cgroups.available_for_quota()
    except (ImportError, AttributeError) as exc:
        return False, f"ckpt.cgroups not available: {exc}"


@pytest.fixture
def tcli(cli: Cli) -> Cli:
    """``cli`` with the template enabled whatever the caller's environment says."""
    for key in ("CKPT_TEMPLATE", "CKPT_TEMPLATE_IDLE_S", "CKPT_HOLD_TIMEOUT_S"):
        cli.env.pop(key, None)
    return cli


@pytest.fixture
def clients() -> Iterator[Callable[[int], Any]]:
    """Opens hand-read HTTP clients (``handover_kit.Client``); closes them at the end."""
    from .handover_kit import client_pool

    yield from client_pool()
