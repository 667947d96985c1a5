"""The CLI's side of the ``send`` verb: have a sandbox write an image down its control
connection and take each piece as it comes (``pagexfer`` events), with nothing on
disk on either side (``send.py`` is the sandbox's side).

A paused sandbox's cgroup is thawed while it sends (its kernel stays frozen: only the
process must run to write) and frozen again after, as ``lifecycle.checkpoint`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ckpt.sandbox.client.deadlines import checkpoint_timeout
from ckpt.sandbox.client.group import freezable, open_cgroup, own_group
from ckpt.sandbox.client.status import live
from ckpt.sandbox.wire import protocol as p
from ckpt.sandbox.wire.paths import PAUSED, Root

SETTLE_S = 10.0  # how long a failed send may take to unwind in the sandbox


def send(
    root: Root,
    sandbox_id: str,
    on_event: Callable[[Any], None],
    *,
    pre_dump: bool,
    after: str | None = None,
    engine: str | None = None,
    post_copy: bool = False,
) -> p.CheckpointReply:
    """Have ``sandbox_id`` send a pre-dump (``pre_dump``) or its final image, only the
    pages dirtied since the image ``after`` (its ``image_id``); each event goes to
    ``on_event`` as it arrives.  The reply's ``counters["image_id"]`` names the image
    for the next ``after``.  ``post_copy``: the final image leaves its pages out, for
    ``pages`` to serve after."""

    def request(st: Any) -> p.SendRequest:
        engine_ = engine or st.engine
        return p.SendRequest(pre_dump=pre_dump, after=after, engine=engine_, post_copy=post_copy)

    return _streamed(root, sandbox_id, "send", request, on_event)


def _wait_done(path: Any, pid: int, what: str, verb: str) -> None:
    """After a stream (``verb``) that failed on this side, until the sandbox has seen
    its reader go and taken the pages back (bounded): the next request (a resume) is
    then not answered busy."""
    import time

    from ckpt.errors import CkptError
    from ckpt.sandbox.wire import rpc

    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        try:
            ping = rpc.call(path, p.PingRequest(), what=what, peer_pid=pid, timeout=SETTLE_S)
        except CkptError:
            return
        if ping.busy_with != verb:
            return
        time.sleep(0.01)


def pages(
    root: Root,
    sandbox_id: str,
    on_event: Callable[[Any], None],
    on_connect: Callable[[Any], None],
    *,
    resend: bool = False,
) -> p.CheckpointReply:
    """Have a sandbox paused by a post-copy ``send`` serve the pages that image left
    out (``host/pageserver.py``): each event to ``on_event``; ``on_connect`` gets the
    connection, on which another thread writes the pages asked for (``WANT`` frames);
    ``resend``: only those it names there first (``AGAIN`` frames)."""
    request = p.PagesRequest(resend=resend)
    return _streamed(root, sandbox_id, "serve pages", lambda st: request, on_event, on_connect)


def _streamed(
    root: Root,
    sandbox_id: str,
    doing: str,
    request_for: Callable[[Any], p.SendRequest | p.PagesRequest],
    on_event: Callable[[Any], None],
    on_connect: Callable[[Any], None] | None = None,
) -> p.CheckpointReply:
    """One streaming request (made for the sandbox's record by ``request_for``), its
    cgroup thawed meanwhile if the sandbox is paused (and frozen again after); a failure
    waits until the sandbox has let the stream go."""
    from ckpt.sandbox.wire import rpc

    st = live(root, sandbox_id, doing)
    request = request_for(st)
    refreeze = None
    if st.status == PAUSED:
        refreeze = freezable(open_cgroup(own_group(root, st, strict=True)))
    if refreeze is not None:
        refreeze.thaw()
    what = f"sandbox {st.id}"
    try:
        return rpc.call(
            root.socket_path(st.id),
            request,
            what=what,
            peer_pid=st.pid,
            timeout=checkpoint_timeout(),
            on_event=on_event,
            on_connect=on_connect,
        )
    except BaseException:
        _wait_done(root.socket_path(st.id), st.pid, what, p.verb_of(request))
        raise
    finally:
        if refreeze is not None:
            refreeze.freeze()
