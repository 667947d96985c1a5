"""The sandbox process's thread in its network namespace (``wire/nsthread.py``): its work
runs in the namespace, the caller's thread stays where it was, and a namespace made
anew, a forked child or a namespace that cannot be entered never gets a stale thread."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from ckpt.sandbox.wire import nsthread

if os.geteuid() != 0 or shutil.which("ip") is None:
    pytest.skip("network namespaces need root and ip (iproute2)", allow_module_level=True)

SHORT_S = 10.0


def _ns_inode() -> int:
    """The network namespace of the calling thread."""
    return os.stat("/proc/thread-self/ns/net").st_ino


@pytest.fixture
def ns() -> Iterator[str]:
    name = f"ckpt-sb-nsthread-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=15)
    try:
        yield f"/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, timeout=15)


def test_work_runs_in_the_namespace_and_the_caller_stays_out(ns: str) -> None:
    before = _ns_inode()
    assert nsthread.run_in(ns, _ns_inode, SHORT_S) == os.stat(ns).st_ino != before
    assert nsthread.run_in(ns, _ns_inode, SHORT_S) == os.stat(ns).st_ino  # the same thread
    assert _ns_inode() == before


def test_a_namespace_made_anew_under_the_same_name_is_entered_anew(ns: str) -> None:
    first = nsthread.run_in(ns, _ns_inode, SHORT_S)
    name = os.path.basename(ns)
    subprocess.run(["ip", "netns", "del", name], check=True, timeout=15)
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=15)
    again = nsthread.run_in(ns, _ns_inode, SHORT_S)
    assert again == os.stat(ns).st_ino != first


def test_a_forked_child_gets_a_thread_of_its_own(ns: str) -> None:
    nsthread.warm(ns)
    pid = os.fork()
    if pid == 0:  # the child: its parent's thread is not here
        try:
            ok = nsthread.run_in(ns, _ns_inode, SHORT_S) == os.stat(ns).st_ino
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_namespace_that_could_not_be_entered_is_tried_again(ns: str) -> None:
    later = ns + "-later"
    with pytest.raises(FileNotFoundError):
        nsthread.run_in(later, _ns_inode, SHORT_S)
    subprocess.run(["ip", "netns", "add", os.path.basename(later)], check=True, timeout=15)
    try:
        assert nsthread.run_in(later, _ns_inode, SHORT_S) == os.stat(later).st_ino
    finally:
        subprocess.run(["ip", "netns", "del", os.path.basename(later)], check=False, timeout=15)
