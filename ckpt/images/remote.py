"""The CLI's side of an object-store image, before and after it asks a sandbox to
write or read one: the store settings it sends (:func:`attach` puts them into the
request), the checks it makes first (so a bad setting or chain is refused before any
sandbox is touched), and what it says when a sandbox died writing.  The sandbox
host's side is ckpt/sandbox/host/remote_image.py.

Where the store settings come from: the sandbox runs in a process forked from the
root's template, which is shared and long-lived, so its environment is whatever the
template started with, not the user's.  The CLI therefore reads the AWS variables
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
AWS_REGION) and sends them in the request (``store_env``); the sandbox opens the store
from them and never from its own environment.  The request travels over the sandbox's
control socket (mode 0600 under the root) and is never logged or recorded.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ckpt.images.location import Location

if TYPE_CHECKING:
    from pathlib import Path

STORE_VARS = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)
STAGE_DIR = "image-stage"  # in the sandbox's directory: where a restore fetches an image
BEFORE_DEADLINE_S = 5.0  # the CLI's look at the image before and after a checkpoint


def within(seconds: float, what: str, work: Callable[[], Any], undo: Callable[[Any], None]) -> Any:
    """``work()``'s result, or StoreUnreachable once ``seconds`` pass (a store request
    can take minutes to time out and be retried).  The late result of a ``work`` that
    was given up on is passed to ``undo`` (to release what it took)."""
    from ckpt.storage.errors import StoreUnreachable

    lock, box, done = threading.Lock(), {}, threading.Event()

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:
            box["error"] = exc
        else:
            with lock:
                box["result"] = result
                late = box.get("late", False)
            if late:
                undo(result)
        finally:
            done.set()

    threading.Thread(target=run, name="ckpt-store-check", daemon=True).start()
    if not done.wait(seconds):
        with lock:
            box["late"] = True
            result = box.get("result")
        if result is not None:
            undo(result)
        raise StoreUnreachable(
            f"{what}: the store did not answer within {seconds:g} s (endpoint down or"
            " unreachable); check AWS_ENDPOINT_URL and the network"
        )
    if "error" in box:
        raise box["error"]
    return box["result"]


def request_fields(image: Location, *, background: bool = False) -> dict[str, Any]:
    """For the CLI: nothing for a local image; for one in an object store, its URL and
    the store settings from this process's environment, checked here so that a missing
    variable or a bad URL is refused before any sandbox is touched or started.
    (``background`` is accepted for the callers that pass it; it changes nothing here.)"""
    if image.is_local:
        return {}
    del background
    from ckpt.storage.repository import split_image_url
    from ckpt.storage.s3 import S3Settings

    url = str(image)
    repo_url, _ = split_image_url(url)
    env = {name: os.environ[name] for name in STORE_VARS if os.environ.get(name)}
    S3Settings.from_env(repo_url, env)
    return {"image": url, "store_env": env}


def remote_before(url: str) -> str | None:
    """For the CLI, before a checkpoint: a digest of the manifest at ``url`` now (None
    if there is none, or the store cannot say), to tell afterwards whether a sandbox
    that died had committed a new one."""
    import hashlib

    from ckpt.storage.repository import Repository

    def read() -> str:
        repo, name = Repository.for_image(url)
        return hashlib.sha256(repo._read_manifest_bytes(name)).hexdigest()

    with contextlib.suppress(Exception):
        return within(BEFORE_DEADLINE_S, url, read, lambda _: None)  # type: ignore[no-any-return]
    return None


def died_message(head: str, url: str, sandbox_id: str, before: str | None) -> str:
    """What a checkpoint whose sandbox died left at ``url``: the manifest is written
    last, so either a new image is there, complete, or the previous one (or none)."""
    now = remote_before(url)
    if now is not None and now != before:
        return f"{head} after committing its image: {url} holds the new checkpoint"
    kept = "; the previous image there is unchanged" if before is not None else ""
    return f"{head}; no image was committed at {url}{kept}"


def check_chain_urls(image: Location, parent: Location) -> None:
    """For the CLI: a parent in the same place as its child, both in one repository
    of a store or both local directories (a restore stages a store's chain beside
    its child, and follows a local one by its relative path)."""
    from ckpt.errors import StatefileError

    if image.is_local != parent.is_local:
        where = "a local directory" if parent.is_local else "an object store"
        raise StatefileError(
            f"--parent-path {parent} is in {where} but --image-path {image} is not: a chain "
            "lives in one place; put both in the same repository of the store or both in "
            "local directories, or take a checkpoint without --parent-path"
        )
    if not image.same_place(parent):
        raise StatefileError(
            f"--parent-path {parent} is in another repository than --image-path "
            f"{image}: a chain lives under one BUCKET/PREFIX; write the image "
            "beside its parent, or take a checkpoint without --parent-path"
        )


def attach(request: Any, remote: dict[str, Any], stage: Path | None = None) -> Any:
    """``request`` (a protocol struct) with the image URL and store settings of
    ``remote`` (from :func:`request_fields`) and, for a restore, the stage directory."""
    if not remote:
        return request
    import msgspec

    extra = {} if stage is None else {"stage_dir": str(stage)}
    return msgspec.structs.replace(request, **remote, **extra)
