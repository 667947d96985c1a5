"""Each ckpt process says what it is in ``ps``: the template ``ckpt template ROOT``, a
sandbox (forked or cold) ``ckpt sandbox ID (ROOT)``; and everything that finds ckpt's
processes by their command line still finds them under those titles."""

from __future__ import annotations

import subprocess

import pytest

from ckpt.sandbox.client import template_client
from ckpt.sandbox.client.pids import cmdline_is_sandbox
from ckpt.sandbox.wire.paths import Root

from .conftest import Cli, sandbox_processes
from .test_template import run_http, serving, sid
from .waiting import wait_for

pytestmark = pytest.mark.slow


def _ps(pid: int) -> str:
    out = subprocess.run(
        ["ps", "-ww", "-o", "args=", "-p", str(pid)], capture_output=True, text=True, timeout=30
    )
    return out.stdout.strip()


def test_ps_shows_the_template_and_each_sandbox_by_title(tcli: Cli) -> None:
    pytest.importorskip("setproctitle", reason="titles in ps need the setproctitle package")
    cold, forked = sid("cold"), sid("forked")
    root = str(tcli.root.absolute())
    assert run_http(tcli, cold)[0] == "cold"  # no template yet: this starts one
    info = serving(tcli.root)
    assert run_http(tcli, forked)[0] == "template"
    assert _ps(info["pid"]) == f"ckpt template {root}"
    for sandbox_id in (cold, forked):
        pid = tcli.state(sandbox_id)["pid"]
        want = f"ckpt sandbox {sandbox_id} ({root})"
        # a cold sandbox names itself just after it answers ``ready``
        wait_for(lambda pid=pid, want=want: _ps(pid) == want, f"{want!r} in ps", 30)
    # what finds ckpt's processes by command line finds them by title
    assert template_client._template_pid(tcli.root) == info["pid"]
    r = Root(tcli.root)
    for sandbox_id in (cold, forked):
        assert cmdline_is_sandbox(r, sandbox_id, tcli.state(sandbox_id)["pid"])
    assert not cmdline_is_sandbox(r, cold, tcli.state(forked)["pid"])
    pids = {p.pid for p in sandbox_processes(tcli.root)}
    assert {info["pid"], tcli.state(cold)["pid"], tcli.state(forked)["pid"]} <= pids
    template_client.stop(tcli.root)
