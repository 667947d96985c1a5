"""Who removes the template's socket path when a template closes, in-process.

A stale template that handed its held sockets to a fresh one (``migrate``) must leave
the path alone: the fresh template renames its own socket into place as soon as it has
the reply, and a stale template that looked at the inode and then unlinked could remove
the fresh one's socket in between; the fresh template then sees its socket gone and
exits, and the next command starts cold (CI saw this once under load).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from ckpt.sandbox.template.server import Template


def _serving(tmp_path: Path) -> Template:
    t = Template(str(tmp_path), str(tmp_path / "template.sock"), "old")
    t.bind()
    return t


def _inode(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def test_a_template_that_stops_removes_its_socket_path(tmp_path: Path) -> None:
    t = _serving(tmp_path)
    assert t.still_ours()
    t.close()
    assert not (tmp_path / "template.sock").exists()


def test_a_template_leaves_a_path_that_another_replaced(tmp_path: Path) -> None:
    t = _serving(tmp_path)
    path = tmp_path / "template.sock"
    os.unlink(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(str(path))
        assert not t.still_ours()
        t.close()
        assert path.exists()


def test_a_template_that_handed_over_leaves_the_path_to_its_successor(tmp_path: Path) -> None:
    t = _serving(tmp_path)
    path = tmp_path / "template.sock"
    before = _inode(path)
    listener = socket.create_server(("127.0.0.1", 0))
    t.held["old-1"] = ([os.dup(listener.fileno())], ["listen"], time.monotonic())
    try:
        reply, fds = t._migrate()
        assert reply == {"held": [{"id": "old-1", "kinds": ["listen"]}]} and len(fds) == 1
        assert not t.running and not t.still_ours()
        t.close()  # the successor has not bound yet: the path is still our inode
        assert path.exists() and _inode(path) == before
        assert t.held == {}  # the sockets were released once handed over
    finally:
        listener.close()
