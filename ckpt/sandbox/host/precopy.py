"""Pre-dumps and pre-copy: writing memory while the sandbox keeps serving.

A pre-dump takes the dirty set (``MemoryFile.take_dirty``) under ``Host.cond`` and reads
those pages under it a batch at a time, so requests are served between batches; a page
written after the take is marked again and goes into the next image.  The image holds
pages only (``kind: pre-dump``) and, with a parent, only the pages dirtied since it.

Pre-copy repeats pre-dumps into rounds ``r0, r1, ...`` inside a working directory
beside the target, run by ``precopy_policy.run_rounds`` (P.Haul's rule; ``ckpt
migrate`` runs the same engine with a stream for its sink, ``send.py``), then the
caller freezes for a final image whose parent is the last round, and moves the
rounds into that image (``rounds/``): one directory that restores on its own.  The
rounds are kept as a chain rather than merged into one page file: merging would read
and compress every page a second time after the freeze.

A dump resets dirty tracking, so a child is only correct against the last image taken
of this sandbox: ``Host.last_dump`` records its id, and a ``--parent-path`` naming any
other image is refused.

What this module uses of the host is ``access.KernelAccess`` (the kernel, its lock, the
sandbox's ID, its image session and last image), never the rest of ``Host``.
"""

from __future__ import annotations

import os
import time

from ckpt.errors import SandboxError
from ckpt.sandbox.host.precopy_policy import FEW_DIRTY, GROWTH, MAX_ROUNDS, StopRule, run_rounds

__all__ = ["FEW_DIRTY", "GROWTH", "MAX_ROUNDS", "Rounds", "StopRule", "pre_dump"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from ckpt.sandbox.host.access import KernelAccess

BATCH = 256  # pages read under the kernel lock at once (1 MiB)


def _batched(
    host: KernelAccess, frames: list[int], timer: list[int]
) -> Iterator[tuple[int, bytes]]:
    """``(frame, page)`` for ``frames`` still allocated, read under the lock in batches;
    ``timer[0]`` accumulates the nanoseconds spent reading (CRIU's memdump)."""
    mf = host.kernel.memory_file
    for i in range(0, len(frames), BATCH):
        t = time.perf_counter_ns()
        with host.cond:
            batch = list(mf.pages(frames[i : i + BATCH]))
        timer[0] += time.perf_counter_ns() - t
        yield from batch


def parent_metadata(
    host: KernelAccess, parent: str, image: str, key: bytes | None, params: Any = None
) -> dict[str, Any]:
    """The link to ``parent`` for a new image at ``image``, refused unless ``parent`` is
    the last image taken of this sandbox (dirty tracking counts from there).  An
    object-store parent is read through the request's store settings (``params``)."""
    from ckpt.images import Location, factory
    from ckpt.sandbox.host import remote_image
    from ckpt.statefile import chain
    from ckpt.statefile.seal import check_parent_sealing

    where = Location.of(parent)
    if not where.is_local:
        with host.images.parent_image(params, key) as (p, name, url):
            _check_parent(host, p, parent)
            return chain.store_link_metadata(p, name, url)
    p = factory.reader(where, key)
    _check_parent(host, p, parent)
    check_parent_sealing(
        p.header.encrypted, bool(remote_image._get(params, "encrypt")), f"--parent-path {parent}"
    )
    return chain.link_metadata(image, p)


def _check_parent(host: KernelAccess, p: Any, parent: str) -> None:
    """Refuse a parent that is not this sandbox's last image."""
    if p.metadata.get("sandbox_id") != host.id:
        raise SandboxError(
            f"--parent-path {parent} is an image of sandbox "
            f"{p.metadata.get('sandbox_id')!r}, not {host.id}; pass one of this sandbox's"
        )
    if host.last_dump is None or p.header.image_id.hex() != host.last_dump:
        raise SandboxError(
            f"--parent-path {parent} is not the last image taken of sandbox {host.id}: "
            "pages dirtied before that one would be missing; pass the last image, or take "
            "a pre-dump or checkpoint without --parent-path"
        )


def pre_dump(
    host: KernelAccess,
    params: dict[str, Any],
    image: str | None = None,
    link: dict | None = None,
    sink: Any = None,
) -> dict[str, Any]:
    """Write a pages-only image of the running sandbox; returns counters for the reply.

    ``link`` (a parent's link metadata) is worked out from ``params["parent"]`` unless
    given; with none, every allocated page is written.  ``sink`` (an
    ``images.pagexfer.ImageSink``) takes the image instead of ``params["image"]``."""
    from ckpt.sandbox.host import remote_image
    from ckpt.statefile import chain

    if host.kernel is None:
        raise SandboxError("sandbox has no kernel to pre-dump")
    image = image or params.get("image") or ""
    key = bytes.fromhex(params["key_hex"]) if params.get("key_hex") else None
    if link is None and params.get("parent"):
        link = parent_metadata(host, params["parent"], image, key, params)
    t0 = time.perf_counter_ns()
    mf = host.kernel.memory_file
    with host.cond:
        taken = mf.take_dirty(record=True)  # what it touches next: post-copy's first
        allocated = len(mf.refs)
        frames = taken if link else sorted(mf.refs)
    last, host.last_dump = host.last_dump, None  # no child is valid until this commits
    timer = [0]
    metadata = {
        "sandbox_id": host.id,
        "workload": host.kernel.workload,
        "kind": chain.PRE_DUMP,
        **(link or {}),
    }
    try:
        if sink is not None:
            sink.metadata.update(metadata)
        with sink or host.images.image_writer(
            {**params, "image": image},
            force=bool(params.get("force")),
            compression=params.get("compression") or "zstd",
            level=params.get("level"),
            key=key,
            metadata=metadata,
            sync=bool(params.get("sync", True)),
            **({"encrypt": True} if params.get("encrypt") else {}),
        ) as img:
            t1 = time.perf_counter_ns()
            summary = img.write_pages(_batched(host, frames, timer))
            t2 = time.perf_counter_ns()
            image_id = img.image_id.hex()
    except BaseException:
        untake(host, taken, last)
        raise
    t_end = time.perf_counter_ns()
    host.last_dump = image_id
    with host.cond:
        dirty_after = mf.dirty_count()  # what the next round would write: the stop rule's
    return {
        **remote_image.upload_counters(img),
        "image_id": image_id,
        "pages_scanned": summary.scanned,
        "pages_written": summary.stored,
        "pages_zero": summary.zero,
        "pages_skipped_parent": max(0, allocated - summary.scanned) if link else 0,
        "dirty_after": dirty_after,
        "bytes": summary.pages_img_bytes,
        "memdump_time_ms": round(timer[0] / 1e6, 3),
        "memwrite_time_ms": round((t2 - t1 - timer[0]) / 1e6, 3),
        "ms": round((t_end - t0) / 1e6, 3),
    }


def untake(host: KernelAccess, taken: list[int], last: str | None) -> None:
    """Undo a dump's reset of dirty tracking when its image was not committed: the
    pages it took are dirty again and ``last`` is again the last image, so a retry
    against the same parent misses nothing."""
    with host.cond:
        host.kernel.memory_file.mark_dirty(taken)
    host.last_dump = last


class Rounds:
    """Pre-copy rounds written into a working directory beside the target image."""

    def __init__(self, host: KernelAccess, params: dict[str, Any]) -> None:
        from ckpt.statefile.image import ROUNDS_DIR, _make_temp_dir, _Target

        self.host = host
        self.params = params
        t = _Target(params["image"])
        os.makedirs(t.parent, exist_ok=True)
        # named as an image writer's temporary directory: swept if this process dies
        self.top = _make_temp_dir(t.parent, f".{t.name}.tmp-{os.getpid()}-")
        self.work = os.path.join(self.top, ROUNDS_DIR)  # as it will sit in the image
        os.mkdir(self.work, 0o700)
        self.results: list[dict[str, Any]] = []
        self.last: str | None = None

    def run(self, rule: StopRule | None = None) -> Rounds:
        """Pre-dump until ``rule`` says stop; the last round is the final image's parent."""
        from ckpt.statefile import open_image
        from ckpt.statefile.chain import link_metadata

        key = bytes.fromhex(self.params["key_hex"]) if self.params.get("key_hex") else None
        params = {**self.params, "force": False}

        def one_round(r: int) -> tuple[dict[str, Any], int | None]:
            path = os.path.join(self.work, f"r{r}")
            link = link_metadata(path, open_image(self.last, key)) if self.last else None
            res = pre_dump(self.host, params, image=path, link=link or {})
            res["round"] = r
            self.results.append(res)
            self.last = path
            return res, res["dirty_after"]

        run_rounds(rule or StopRule(), one_round)
        return self

    def parent_metadata(self, key: bytes | None) -> dict[str, Any]:
        """The final image's link to the last round, as it will be once moved inside."""
        from ckpt.statefile import open_image
        from ckpt.statefile.image import ROUNDS_DIR

        assert self.last is not None
        link = dict(self.host_link(open_image(self.last, key)))
        link["parent"] = {**link["parent"], "path": f"{ROUNDS_DIR}/{os.path.basename(self.last)}"}
        return link

    @staticmethod
    def host_link(parent: Any) -> dict[str, Any]:
        from ckpt.statefile.chain import depth

        return {
            "parent": {"image_id": parent.header.image_id.hex(), "path": ""},
            "chain_depth": depth(parent) + 1,
        }

    def adopt(self, image_temp_dir: Any) -> None:
        """Move the rounds into the final image's temporary directory before commit."""
        from ckpt.statefile.image import ROUNDS_DIR

        os.rename(self.work, os.path.join(image_temp_dir, ROUNDS_DIR))
        os.rmdir(self.top)
        self.top = ""

    def discard(self) -> None:
        """Remove the rounds (a failed or refused checkpoint leaves nothing)."""
        if self.top:
            from ckpt.statefile.image import _remove_image_dir

            _remove_image_dir(*os.path.split(self.top))
            self.top = ""

    def counters(self) -> dict[str, Any]:
        return {
            "rounds": len(self.results),
            "precopy_pages_written": sum(r["pages_written"] for r in self.results),
            "precopy_time_ms": round(sum(r["ms"] for r in self.results), 3),
        }
