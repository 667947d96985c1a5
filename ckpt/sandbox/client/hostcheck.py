"""What this host supports (``ckpt check``, as ``criu check``): each item ok or missing,
and why, in one line.

Every probe looks at this machine only: mounts and files, the native engine's import,
the root's template socket, ``ip netns list`` and ``tc qdisc show`` (read-only, each
with a deadline), and whether an object store is configured (environment only: no store
is contacted, and no credential or endpoint is printed).  A probe never raises: what it
cannot find is the reason the item is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

PROBE_TIMEOUT_S = 5.0
STORE_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
MODE_NAMES = {"unified": "v2", "legacy": "v1", "hybrid": "hybrid", "unavailable": "none"}


@dataclass
class Item:
    """One capability: its name, whether it is usable, and why (or how) in words."""

    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


Runner = Callable[[list[str]], tuple[int, str]]


def run_probe(argv: list[str]) -> tuple[int, str]:
    """Run a read-only probe command: (exit status, its first line of stderr or stdout);
    127 when it is not installed, 124 when it passes ``PROBE_TIMEOUT_S``."""
    if shutil.which(argv[0]) is None:
        return 127, f"{argv[0]} is not installed"
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return 124, f"`{' '.join(argv)}` did not answer within {PROBE_TIMEOUT_S:g} s"
    except OSError as exc:
        return 126, f"cannot run {argv[0]}: {exc.strerror}"
    said = (proc.stderr or proc.stdout).strip().splitlines()
    return proc.returncode, said[0][:120] if said else ""


def cgroup_items() -> list[Item]:
    """The cgroup mode, and whether a CPU quota can be applied."""
    from ckpt import cgroups

    try:
        mode = cgroups.mode()
        ok_quota, how = cgroups.available_for_quota()
    except Exception as exc:  # a probe reports, never fails the check
        return [Item("cgroups", False, f"cannot read the cgroup setup: {exc}")]
    name = MODE_NAMES.get(mode.value, mode.value)
    usable = mode is not cgroups.Mode.UNAVAILABLE
    detail = name if name == mode.value else f"{name} ({mode.value})"
    if not usable:
        detail = "no cgroup filesystem is mounted"
    return [Item("cgroups", usable, detail), Item("cpu quota", ok_quota, how)]


def native_item() -> Item:
    from ckpt.state.native import native_status

    ok, why = native_status()
    return Item("native engine", ok, why)


def template_item(root: Path, template: bool) -> Item:
    """Whether sandboxes start from the warm template, and whether it runs now."""
    from ckpt.sandbox.client import template_client

    if not template:
        return Item("template", False, "disabled by --no-template or CKPT_TEMPLATE=0")
    if not hasattr(os, "fork"):
        return Item("template", False, "this platform has no fork(): cold starts")
    status = template_client.status(root) if root.is_dir() else None
    if status is not None:
        return Item("template", True, f"running for {root} (pid {status.get('pid', '?')})")
    return Item("template", True, f"not running for {root}; the first run starts it")


def netns_item(run: Runner = run_probe) -> Item:
    if not os.path.exists("/proc/self/ns/net"):
        return Item("network namespaces", False, "the kernel has no network namespaces")
    code, said = run(["ip", "netns", "list"])
    if code != 0:
        return Item("network namespaces", False, said or f"`ip netns list` exited {code}")
    if os.geteuid() != 0:
        return Item("network namespaces", False, "`ip netns` works, but making one needs root")
    return Item("network namespaces", True, "`ip netns` usable")


def tc_item(run: Runner = run_probe) -> Item:
    code, said = run(["tc", "qdisc", "show", "dev", "lo"])
    if code != 0:
        return Item("tc", False, said or f"`tc qdisc show` exited {code}")
    return Item("tc", True, "`tc qdisc` usable")


def store_item(env: Mapping[str, str]) -> Item:
    """Whether an object store is configured: the variables are set (their values are
    not shown) and the S3 client is installed."""
    import importlib.util

    unset = [name for name in STORE_ENV if not env.get(name)]
    if unset:
        return Item("object store", False, f"not configured: set {', '.join(unset)}")
    if importlib.util.find_spec("obstore") is None:
        return Item("object store", False, "configured, but obstore is not installed: .[s3]")
    return Item("object store", True, "configured (AWS_ENDPOINT_URL and credentials set)")


def check(root: Path, env: Mapping[str, str] | None = None, run: Runner = run_probe) -> list[Item]:
    """Every item, in the order ``ckpt check`` prints them."""
    from ckpt import settings

    given = settings.current() if env is None else settings.load(env)
    env = os.environ if env is None else env
    return [
        *cgroup_items(),
        native_item(),
        template_item(root, given.template),
        netns_item(run),
        tc_item(run),
        store_item(env),
    ]
