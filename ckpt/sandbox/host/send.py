"""Inside the sandbox: an image written down the control connection instead of to a
path (the ``send`` verb), so a migration's pages go from this process's memory to
the CLI, and on to the destination, without touching a disk here.

A pre-dump (``pre_dump``) is ``precopy.pre_dump`` with a ``pagexfer.StreamImage`` as
its sink: the sandbox serves throughout.  The final image is the ordinary dump
(``dump.write_image``) of the frozen kernel into a stream: its state, then the pages
dirtied since ``after``.  A kernel frozen before (a migration pauses first) stays
frozen; one that was running is thawed again.

Dirty tracking works as for images on disk: each image sent resets it and becomes
``Host.last_dump``, and one that fails (the reader went away) marks its pages dirty
again, so nothing sent is ever missing from the next image.

Stdlib and ``ckpt`` only, no ``typing`` at run time: the sandbox process imports this.
"""

from __future__ import annotations

import time

from ckpt.errors import SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ckpt.sandbox.wire import protocol as p


class _Streams:
    """What ``dump.write_image`` asks for a writer: the one stream image."""

    def __init__(self, write: Callable[[bytes], Any]) -> None:
        self.write = write

    def image_writer(self, params: Any, **options: Any) -> Any:
        from ckpt.images.pagexfer import StreamImage

        return StreamImage(
            self.write,
            metadata=options.get("metadata"),
            compression=options.get("compression") or "zstd",
            level=options.get("level"),
        )


def since(host: Any, after: str | None) -> dict[str, Any]:
    """The link of an image that holds only what was dirtied since ``after``, which
    must be the last image this sandbox wrote or sent (dirty tracking counts from
    there); ``{}`` for every page."""
    if after is None:
        return {}
    if host.last_dump is None or after != host.last_dump:
        raise SandboxError(
            f"sandbox {host.id}'s last image is not {after[:16]}: pages dirtied before it "
            "would be missing; send every page again (no --after)"
        )
    return {"sent_after": after}


def send(host: Any, request: p.SendRequest, write: Callable[[bytes], Any]) -> dict[str, Any]:
    """The ``send`` verb: the image goes through ``write`` as ``pagexfer`` frames;
    returns the reply's counters (``image_id`` names the image for the next ``after``)."""
    from ckpt.sandbox.host import precopy

    if host.kernel is None:
        raise SandboxError("sandbox has no kernel to send")
    link = since(host, request.after)
    if not request.pre_dump:
        return _final(host, request, link, write)
    from ckpt.images.pagexfer import StreamImage

    sink = StreamImage(write, compression=request.compression, level=request.level)
    params = {"compression": request.compression, "level": request.level}
    counters = precopy.pre_dump(host, params, link=link, sink=sink)
    counters.update(rounds=1, freezing_time_ms=0.0, frozen_time_ms=0.0)
    return counters


def _final(
    host: Any, request: p.SendRequest, link: dict[str, Any], write: Callable[[bytes], Any]
) -> dict[str, Any]:
    """The kernel's state and the pages dirtied since ``link``, the kernel frozen."""
    from ckpt.sandbox.host import dump, precopy
    from ckpt.sandbox.wire.protocol import CheckpointRequest

    was_running = not host.frozen
    t0 = time.perf_counter_ns()
    if was_running:
        host._freeze()
    as_checkpoint = CheckpointRequest(
        image="(stream)",
        leave_running=True,
        compression=request.compression,
        level=request.level,
        engine=request.engine,
        sync=False,
    )
    # frozen: taken as they are (one swap each); listed and ordered once the image went
    recent = host.kernel.memory_file.take_recent() if request.post_copy else None
    job = host._dump_job(as_checkpoint, link, None, time.perf_counter_ns() - t0)
    job.images = _Streams(write)
    host.postcopy = None
    if request.post_copy:  # its pages stay here, served after (pageserver.py)
        job.remote = []  # which ones: worked out once the image has gone (frozen anyway)
    try:
        written = dump.write_image(job)
        # a post-copy image lacks its dirty pages: no image may count from it
        host.last_dump = written["image_id"] if job.remote is None else None
    except BaseException:
        precopy.untake(host, job.dirty, job.last)
        if was_running and host.frozen:
            host._thaw()
        raise
    if was_running and host.frozen:
        host._thaw()
    counters = written["counters"]
    counters["image_id"] = written["image_id"]
    if job.remote is not None:
        from ckpt.kernel.mm import touched_order
        from ckpt.sandbox.host.pageserver import Remote

        touched = touched_order(recent)
        job.remote = _remote(host, job)
        host.postcopy = Remote(job.remote, touched)
        counters["postcopy_pages"] = len(job.remote)
        counters["postcopy_first"] = len(touched)
    return counters


def _remote(host: Any, job: Any) -> list[int]:
    """The frames a post-copy final image leaves out: those it would have written
    (dirtied since its parent, or all), still allocated."""
    refs = host.kernel.memory_file.refs
    if not job.link:
        return list(refs.keys())
    held_by = getattr(job.dirty, "held_by", None)  # taken marks: intersected run by run
    return held_by(refs) if held_by is not None else list(refs.held(job.dirty))
