"""Writing the image of a frozen kernel, inside the sandbox: its state, its pages (all,
or only the dirty ones when the image has a parent), stats, then the commit.

``Host.checkpoint`` (process.py) freezes the kernel and decides what to write (a
``Dump``); ``write_image`` writes it, in the sandbox process or in a child forked from it
(``snapshot.py``), so it touches nothing but the ``Dump``: it takes no lock and logs only
through ``Dump.stall``, a test hook never set when the write is forked.  Each step is
timed with ``Timings.phase`` and reported under CRIU's stats-dump names
(``freezing_time_ms``, ``memdump_time_ms``, ``memwrite_time_ms``, ``frozen_time_ms``...).

Stdlib and ``ckpt`` only, no ``typing`` at run time: the sandbox process imports this.
"""

from __future__ import annotations

import itertools
import time

from ckpt.errors import StatefileError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ckpt.sandbox.host.precopy import Rounds
    from ckpt.sandbox.host.remote_image import ImageSession
    from ckpt.sandbox.wire import protocol as p


def image_write_error(exc: OSError, image: str) -> StatefileError:
    """An OSError while writing an image, as one line naming the image and what to do.
    The writer has already removed its temporary directory, so nothing is left behind."""
    import errno

    hints = {
        errno.ENOSPC: "free some space or pass another --image-path",
        errno.EDQUOT: "the disk quota is used up; free some space or pass another --image-path",
        errno.EROFS: "that file system is read-only; pass another --image-path",
        errno.EACCES: "check the directory's permissions or pass another --image-path",
        errno.EPERM: "check the directory's permissions or pass another --image-path",
    }
    hint = hints.get(exc.errno, "check --image-path")
    return StatefileError(
        f"cannot write the image at {image}: {exc.strerror or exc}; {hint} "
        "(the sandbox keeps running, nothing was written)"
    )


def _summary_dict(summary: Any) -> dict[str, Any]:
    """A page summary from statefile as a plain dict, whatever its exact type."""
    if summary is None:
        return {}
    if isinstance(summary, dict):
        return dict(summary)
    for attr in ("as_dict", "_asdict", "to_dict"):
        fn = getattr(summary, attr, None)
        if callable(fn):
            return dict(fn())
    fields = getattr(summary, "__dataclass_fields__", None) or getattr(summary, "__slots__", ())
    return {name: getattr(summary, name) for name in fields if hasattr(summary, name)}


class TimedPages:
    """Wraps the kernel's page iterator to time the dump (reading pages) apart from the
    write (compressing and writing them), as CRIU reports memdump and memwrite.  Pages
    are read a batch at a time under one clock reading, so every checkpoint reports both
    for 5-14 ms per GiB of pages (a clock read per page cost 81 ms)."""

    BATCH = 256

    def __init__(self, pages: Any) -> None:
        self._pages = pages
        self.ns = 0

    def __iter__(self) -> Any:
        it = iter(self._pages)
        islice, clock, batch = itertools.islice, time.perf_counter_ns, self.BATCH
        while True:
            t = clock()
            run = list(islice(it, batch))
            self.ns += clock() - t
            if not run:
                return
            yield from run


def ms(ns: int) -> float:
    """Nanoseconds as the milliseconds a counter shows."""
    return round(ns / 1e6, 3)


class Dump:
    """What a checkpoint decided while the kernel is frozen: what ``write_image`` writes
    (in the sandbox process, or in a child forked from it)."""

    def __init__(
        self,
        request: p.CheckpointRequest,
        *,
        kernel: Any,
        key: bytes | None,
        stall: Callable[[], None] | None,
        images: ImageSession,
        engine: str,
        metadata: dict[str, Any],
        link: dict[str, Any],
        rounds: Rounds | None,
        stats: Any,
        frozen_at: int,
        freezing_ns: int,
        allocated: int,
        dirty: Any,
    ) -> None:
        self.request, self.kernel, self.key, self.stall = request, kernel, key, stall
        self.images = images  # the host's ImageSession: where the writer comes from
        self.engine, self.metadata = engine, metadata
        self.link, self.rounds, self.stats = link, rounds, stats
        self.frozen_at, self.freezing_ns = frozen_at, freezing_ns
        self.allocated, self.dirty = allocated, dirty
        self.last: str | None = None  # the sandbox's last image before this one
        self.remote: list[int] | None = None  # post-copy: frames it leaves out (send.py)


def _dump_counters(
    job: Dump, result: Any, summary: dict[str, Any], memdump_ns: int, phases: dict[str, int]
) -> dict[str, Any]:
    """A checkpoint's counters, as CRIU's stats-dump names them, from its timed phases
    (``memdump`` is the pages' reading, the rest of ``memdump_memwrite`` their writing)."""
    pages_ns = phases["memdump_memwrite"]
    counters: dict[str, Any] = {
        "objects": getattr(result, "objects", None),
        "types": getattr(result, "types", None),
        "state_bytes": getattr(result, "bytes", None),
        "freezing_time_ms": ms(job.freezing_ns),
        "state_dump_time_ms": ms(phases["state_dump"]),
        "memdump_memwrite_time_ms": ms(pages_ns),
        "memdump_time_ms": ms(memdump_ns),
        "memwrite_time_ms": ms(pages_ns - memdump_ns),
        **{
            f"pages_{k_}" if not k_.startswith("pages") else k_: v
            for k_, v in summary.items()
            if isinstance(v, int | float)
        },
    }
    if "fingerprint" in phases:
        counters["fingerprint_time_ms"] = ms(phases["fingerprint"])
    if "pages_stored" in counters:
        counters["pages_written"] = counters["pages_stored"]
    counters["pages_skipped_parent"] = job.allocated - len(job.dirty) if job.link else 0
    counters["rounds"] = 0
    if job.rounds is not None:
        counters.update(job.rounds.counters())
    return counters


def write_image(job: Dump) -> dict[str, Any]:
    """Write the image of the frozen kernel (here, or in a forked child): its state,
    the pages (all, or the dirty ones when it has a parent), stats, then commit.
    Each step is timed as CRIU's stats-dump names it."""
    from ckpt import state
    from ckpt.sandbox.host import remote_image
    from ckpt.sandbox.wire.timings import Timings

    request, k, stats, rounds = job.request, job.kernel, job.stats, job.rounds
    clock = Timings()
    try:
        with job.images.image_writer(
            request,
            force=request.force,
            compression=request.compression or "zstd",
            level=request.level,
            key=job.key,
            metadata=job.metadata,
            **({} if request.sync else {"sync": False}),
            **({"encrypt": True} if request.encrypt else {}),
        ) as img:
            with clock.phase("state_dump"):
                result = state.save(k, img.state_file, engine=job.engine, stats=stats)
                img.note_save(result, job.engine)
            with clock.phase("memdump_memwrite"):
                frames = [] if job.remote is not None else job.dirty if job.link else None
                dump = TimedPages(k.memory_file.pages(frames))
                summary = _summary_dict(img.write_pages(dump))
            if rounds is not None:
                rounds.adopt(img.temp_dir)
            if stats is not None:
                # Only with --stats: the digest of everything observable walks the
                # whole kernel while it is frozen, so the image can be checked against
                # a restore; no plain checkpoint needs it.  Timed apart.
                with clock.phase("fingerprint"):
                    img.metadata["fingerprint"] = k.fingerprint()
            if job.stall is not None:
                job.stall()
            counters = _dump_counters(job, result, summary, dump.ns, clock.phases_ns)
            if stats is not None:
                img.write_stats({"checkpoint": counters, "types": stats.as_dict()})
            t_commit = time.perf_counter_ns()  # the commit is the writer's exit
        t_end = time.perf_counter_ns()
        counters.update(remote_image.upload_counters(img))
        counters["commit_time_ms"] = ms(t_end - t_commit)
        counters["frozen_time_ms"] = ms(t_end - job.frozen_at)
    except OSError as exc:
        raise image_write_error(exc, request.image) from exc
    return {
        "counters": counters,
        "image_id": img.image_id.hex(),
        "t_end": t_end,
        "stats": stats.as_dict() if stats is not None else None,
        "stats_text": str(stats) if stats is not None else None,
    }
