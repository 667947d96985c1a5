"""What ``checkpoint`` and ``restore`` tell the user about how they ended: a checkpoint
whose sandbox died (what it left at the image), and a listener bound anew."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckpt.errors import CkptError

if TYPE_CHECKING:
    from ckpt.sandbox.wire import protocol as p


def image_identity(image: Path) -> tuple[int, int, int] | None:
    """Which file ``image/checkpoint.img`` is now (device, inode, mtime), or None."""
    try:
        info = os.stat(Path(image) / "checkpoint.img")
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_mtime_ns)


def checkpoint_died(
    sandbox_id: str, image: Path | str, before: Any, key: bytes | None, exc: BaseException
) -> str:
    """What a checkpoint whose sandbox died left at ``image``, said as it is: a new image
    in place (and whether it verifies), or none, the previous one (if any) unchanged."""
    head = f"checkpoint of {sandbox_id} failed: the sandbox process died ({exc})"
    from ckpt.images import Location

    if not Location.of(image).is_local:
        from ckpt.images.remote import died_message

        return died_message(head, str(image), sandbox_id, before)
    if image_identity(image) in (None, before):
        kept = "; the previous image there is unchanged" if before is not None else ""
        return f"{head}; no image was committed at {image}{kept}"
    from ckpt import statefile
    from ckpt.statefile.inspect import report_failed

    try:
        report = statefile.inspect_image(image, key, verify=True)
        ok = not report_failed(report)
        owner = (report.get("metadata") or {}).get("sandbox_id")
    except CkptError:
        ok, owner = False, None
    if ok and owner == sandbox_id:
        return (
            f"{head} after committing its image: {image} holds the new checkpoint and it "
            "verifies; restore from it"
        )
    return (
        f"{head} while committing its image: {image} holds a new image that does not "
        "verify; checkpoint again with --force, or remove it"
    )


def said(outcome: str, detail: str) -> str:
    """An outcome as ``--stats`` and ``--json`` show it: ``none (no template)``."""
    return f"{outcome} ({detail})" if detail else outcome


def listener_notes(reply: p.RestoreReply, handed_over: bool) -> list[str]:
    """One line when a restore bound its port anew although clients may have waited."""
    from ckpt.sandbox.wire.protocol import BindReason, Listener

    reason = reply.bind_reason
    if reply.listener is not Listener.BOUND_ANEW or reason is None:
        return []
    lost = reason.sockets_lost
    if handed_over and lost:
        return [
            "the sockets this sandbox handed to the template at its checkpoint are gone "
            "(the template exited, its hold timed out, or `ckpt kill` closed them): clients "
            "were refused and parked keep-alive connections cut until this restore bound "
            "the port anew"
        ]
    if lost and reason is not BindReason.NOTHING_HELD:
        return [
            "no template held the listening socket: it was bound anew, and clients were "
            "refused between the checkpoint and this restore"
        ]
    return []
