"""Images at ``s3://BUCKET/PREFIX/NAME``, for checkpoint and restore: the hook points
that ckpt/sandbox/lifecycle.py (the CLI's side) and ckpt/sandbox/process.py (the
sandbox's side) call, so the store logic stays in one module.

Where the store settings come from: the sandbox runs in a process forked from the
root's template, which is shared and long-lived, so its environment is whatever the
template started with, not the user's.  The CLI therefore reads the AWS variables
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
AWS_REGION) and sends them in the request (``store_env``); the sandbox opens the store
from them and never from its own environment.  The request travels over the sandbox's
control socket (mode 0600 under the root) and is never logged or recorded.

Restore downloads the image into ``stage_dir`` (a private directory under the
sandbox's directory in the root), loads it eagerly and removes the directory before
the sandbox resumes.  With ``--background`` only the kernel state and the page map are
fetched there (through the local chunk cache); pages.img is read from the store chunk
by chunk as the background fill or a page fault needs it, with read-ahead, each chunk
checked against the manifest's digest before use and kept in the chunk cache
(ckpt/storage/lazy.py, ckpt/storage/chunkcache.py).  A store that fails or a chunk that
does not match stops the sandbox with one log line: it never runs with memory it does
not have.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckpt.errors import SandboxError

ENCRYPT_REMOTE = (
    "--encrypt is not yet supported for object stores (s3://); checkpoint to a local "
    "image directory"
)

STORE_VARS = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)
STAGE_DIR = "image-stage"
PAGES_IMG = "pages.img"
# ckpt/statefile/chain.py's bound, which the restore checks again on the staged chain;
# not imported from there, as the fetch runs in a thread beside the sandbox's imports
# of the statefile package (two threads importing one package can see it half made).
MAX_CHAIN = 16
# The files an image has (ckpt/statefile/format.py's names, not imported, as above): a
# restore refuses a manifest listing any other before it fetches a byte.
IMAGE_FILES = frozenset({"checkpoint.img", "pages.img", "pages_meta.img", "stats.json"})
# A checkpoint asks the store everything it needs (bucket, credentials, the target, the
# parent, the upload lease) before the sandbox drains; a store that has not answered
# all of it within PREPARE_DEADLINE_S fails the checkpoint with the sandbox untouched.
PREPARE_DEADLINE_S = 15.0
LEASE_WAIT_S = 5.0  # of those, waiting for a prune's lease to go
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


def is_remote(image: str | os.PathLike[str]) -> bool:
    return str(image).startswith("s3://")


def request_fields(image: str | os.PathLike[str], *, background: bool = False) -> dict[str, Any]:
    """For the CLI: nothing for a local image; for an ``s3://`` one, the URL as given
    and the store settings from this process's environment, checked here so that a
    missing variable or a bad URL is refused before any sandbox is touched or started.
    (``background`` is accepted for the callers that pass it; it changes nothing here.)"""
    if not is_remote(image):
        return {}
    del background
    from ckpt.storage.repository import split_image_url
    from ckpt.storage.s3 import S3Settings

    url = str(image)
    repo_url, _ = split_image_url(url)
    env = {name: os.environ[name] for name in STORE_VARS if os.environ.get(name)}
    S3Settings.from_env(repo_url, env)
    return {"image": url, "store_env": env}


_warm: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}


def _get(request: Any, name: str) -> Any:
    """A field of the request: a protocol struct, or the dict it once was."""
    if isinstance(request, dict):
        return request.get(name)
    return getattr(request, name, None)


def _store(params: Any) -> tuple[Any, str]:
    """The store of the request's image's repository and the image name, opened with the
    settings in the request only; reused for the same URL and settings."""
    from ckpt.storage.repository import split_image_url
    from ckpt.storage.s3 import S3Store

    repo_url, name = split_image_url(_get(params, "image"))
    env = dict(_get(params, "store_env") or {})
    cache_key = (repo_url, tuple(sorted(env.items())))
    store = _warm.get(cache_key)
    if store is None:
        store = S3Store.from_url(repo_url, env)
        _warm.clear()  # one store at a time
        _warm[cache_key] = store
    return store, name


def prepare(params: Any, sandbox_id: str = "") -> None:
    """Before the sandbox drains: open the store and start the upload (the bucket and
    credentials, the target, the parent, the lease), so the frozen time does not pay
    for them and a store that refuses or does not answer fails the checkpoint with
    the sandbox untouched, within PREPARE_DEADLINE_S; :func:`discard_prepared` ends an
    upload no writer took."""
    url = _get(params, "image") or ""
    if not is_remote(url):
        return
    discard_prepared()
    import ckpt.storage.repository  # noqa: F401  (msgspec, the manifest; not timed)

    def start() -> Any:
        key = _get(params, "key_hex")
        repo, name = open_repository(params, bytes.fromhex(key) if key else None)
        upload = repo.upload(
            name, sandbox_id=sandbox_id, wait=LEASE_WAIT_S, **_upload_options(params)
        )
        upload.start()
        return upload

    def abort(upload: Any) -> None:
        with contextlib.suppress(Exception):
            upload.abort()

    _prepared[url] = (within(PREPARE_DEADLINE_S, url, start, abort), sandbox_id)


_prepared: dict[str, Any] = {}  # image URL -> (a started ImageUpload, its sandbox)


def discard_prepared() -> None:
    """Abort the upload :func:`prepare` started if no writer took it (a checkpoint
    that failed before writing): its lease goes at once, not at its expiry."""
    for upload, _ in _prepared.values():
        with contextlib.suppress(Exception):
            upload.abort()
    _prepared.clear()


def _upload_options(params: Any) -> dict[str, Any]:
    """The upload's options for the request: its force and its parent (by name, and
    its manifest id when already read)."""
    from ckpt.storage.repository import split_image_url

    parent = _get(params, "parent")
    return {
        "force": bool(_get(params, "force")),
        "parent": split_image_url(parent)[1] if parent else None,
        "parent_id": _parent_ids.get(parent) if parent else None,
    }


def attach(request: Any, remote: dict[str, Any], stage: Path | None = None) -> Any:
    """``request`` (a protocol struct) with the image URL and store settings of
    ``remote`` (from :func:`request_fields`) and, for a restore, the stage directory."""
    if not remote:
        return request
    import msgspec

    extra = {} if stage is None else {"stage_dir": str(stage)}
    return msgspec.structs.replace(request, **remote, **extra)


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


def open_repository(params: Any, key: bytes | None) -> tuple[Any, str]:
    """For the sandbox: the repository and image name of the request's image."""
    from ckpt.storage.repository import Repository

    store, name = _store(params)
    return Repository(store, key), name


def image_writer(params: Any, **options: Any) -> Any:
    """The writer for a checkpoint: an image directory, or the store for ``s3://``
    (whose manifest names the request's ``parent``, an image of the same repository)."""
    from ckpt import statefile

    if not is_remote(_get(params, "image")):
        return statefile.ImageWriter(_get(params, "image"), **options)
    if options.get("encrypt"):
        raise SandboxError(ENCRYPT_REMOTE)
    from ckpt.statefile.sinks import StoreImageWriter

    repo, name = open_repository(params, options.get("key"))
    _warm.clear()  # the settings live as long as this writer, not in the sandbox after
    sandbox_id = str((options.get("metadata") or {}).get("sandbox_id") or "")
    upload_options = _upload_options(params)
    _parent_ids.clear()
    upload, for_sandbox = _prepared.pop(_get(params, "image"), (None, None))
    discard_prepared()
    if upload is not None and (
        for_sandbox != sandbox_id
        or upload.repo.key != options.get("key")
        or any(getattr(upload, k) != v for k, v in upload_options.items() if k != "parent_id")
    ):
        upload.abort()  # started for another request: not this one's
        upload = None
    return StoreImageWriter(
        repo,
        name,
        sandbox_id=sandbox_id,
        parent=upload_options["parent"],
        parent_id=upload_options["parent_id"],
        started=upload,
        **options,
    )


# The manifest id of the parent :func:`parent_image` checked, by URL: read before the
# sandbox freezes, so the upload need not read it again while it is frozen (8 ms of a
# 45 ms frozen time measured on kv:64 against a local SeaweedFS).
_parent_ids: dict[str, str] = {}


def upload_counters(writer: Any) -> dict[str, Any]:
    """What a committed store writer sent (chunks the store lacked), for the reply's
    counters; nothing for a directory."""
    upload = getattr(writer, "upload", None)
    if upload is None:
        return {}
    s = upload.stats
    return {
        "upload_bytes_total": s.bytes_total,
        "upload_bytes_sent": s.bytes_uploaded,
        "upload_chunks_total": s.chunks_total,
        "upload_chunks_sent": s.chunks_uploaded,
    }


def check_chain_urls(image: str, parent: str) -> None:
    """For the CLI: a parent in the same place as its child, both in one repository
    of a store or both local directories (a restore stages a store's chain beside
    its child, and follows a local one by its relative path)."""
    from ckpt.errors import StatefileError

    if is_remote(image) != is_remote(parent):
        where = "s3://" if is_remote(parent) else "a local directory"
        raise StatefileError(
            f"--parent-path {parent} is in {where} but --image-path {image} is not: a chain "
            "lives in one place; put both in the same s3:// repository or both in local "
            "directories, or take a checkpoint without --parent-path"
        )
    if is_remote(image):
        from ckpt.storage.repository import split_image_url

        if split_image_url(image)[0] != split_image_url(parent)[0]:
            raise StatefileError(
                f"--parent-path {parent} is in another repository than --image-path "
                f"{image}: a chain lives under one s3://BUCKET/PREFIX; write the image "
                "beside its parent, or take a checkpoint without --parent-path"
            )


@contextlib.contextmanager
def parent_image(params: Any, key: bytes | None) -> Any:
    """The request's ``s3://`` parent, opened from a private local copy of its
    checkpoint.img (its manifest's HMAC, each chunk's digest and the statefile's own
    tag checked, as for a restore); yields ``(image, name, url)``."""
    import tempfile

    from ckpt import statefile
    from ckpt.statefile.format import CHECKPOINT_IMG
    from ckpt.storage.repository import split_image_url

    url = _get(params, "parent")
    store, _ = _store(params)  # the same repository as the image (checked by the CLI)
    from ckpt.storage.repository import Repository

    name = split_image_url(url)[1]
    reader = Repository(store, key).open_image(name)
    _parent_ids.clear()
    _parent_ids[url] = reader.manifest.image_id
    with tempfile.TemporaryDirectory(prefix="ckpt-parent-") as tmp:
        path = Path(tmp) / CHECKPOINT_IMG
        with open(path, "xb") as out:
            for data in reader.iter_file(CHECKPOINT_IMG):
                out.write(data)
        yield statefile.open_image(tmp, key=key), name, url


class StagedImage:
    """An image fetched into ``stage_dir`` for a restore; :meth:`remove` after loading.

    ``lazy``: only the files other than pages.img are fetched (through the chunk cache),
    and :attr:`source` serves pages.img's chunks on demand from then on.  Its first
    chunk, pages.img's header (checked with the page map), is fetched beside them; no
    page is asked for before the sandbox answers: on a busy 2-core host, 9 chunks
    fetched during the kernel state's load put 300 ms before the first answer
    (memory:512, loopback; 36 ms with the header alone)."""

    def __init__(self, params: Any, key: bytes | None, *, lazy: bool = False) -> None:
        stage = _get(params, "stage_dir")
        if not stage:
            raise SandboxError("restore from a store needs a stage directory (ckpt bug)")
        self.top = Path(stage)
        self.source: Any = None
        repo, name = open_repository(params, key)
        self.dir = self.top / name  # each image of the chain beside its child
        reader = repo.open_image(name)  # the manifest's HMAC is checked here, with a key
        self.remove()  # a dead restore's leftover
        skip = (PAGES_IMG,) if lazy else ()
        reader.check_download(self.dir, skip=skip, allowed=IMAGE_FILES)  # before any fetch
        self.top.mkdir(mode=0o700, parents=False)
        try:
            if lazy:
                self._fetch_lazily(reader)
            else:
                reader.download(self.dir, allowed=IMAGE_FILES)  # each chunk checked
            self._fetch_parents(repo, reader.manifest)
        except BaseException:
            self.remove()
            raise

    def _fetch_parents(self, repo: Any, manifest: Any) -> None:
        """Stage the image's parents whole beside it, as ``../NAME``, which is where
        its statefile's link (covered by its tag) says they are: the restore then
        checks the chain as a local one (ckpt/statefile/chain.py).  A parent is loaded
        eagerly, even under ``--background``."""
        repo.download_parents(manifest, self.top, MAX_CHAIN, allowed=IMAGE_FILES)

    def _fetch_lazily(self, reader: Any) -> None:
        from ckpt.storage.chunkcache import ChunkCache
        from ckpt.storage.lazy import ChunkSource

        self.source = ChunkSource(reader, ChunkCache.default(), on_close=_log_source)
        pages = reader.manifest.files.get(PAGES_IMG)
        if pages is not None:
            self.source.prefetch(pages.chunks[:1])
        reader.download(self.dir, skip=(PAGES_IMG,), fetch=self.source.chunk, allowed=IMAGE_FILES)

    def remove(self) -> None:
        """Remove the fetched files; a lazy image's pages stay readable by whoever
        opened them (the page loader holds the chunk source until its fill ends)."""
        import shutil  # only here: a sandbox that restores from a directory never needs it

        shutil.rmtree(self.top, ignore_errors=True)
        source, self.source = getattr(self, "source", None), None
        if source is not None:
            source.release()


def _log_source(source: Any) -> None:
    """The restore's line on where the image's chunks (kernel state, page map and
    pages) came from, once the background fill is done."""
    from ckpt.sandbox.sandboxlog import log

    s = source.stats
    log(
        f"restore: {source.where} loaded: {s.from_store} chunks from the store "
        f"({s.bytes_from_store} bytes), {s.from_cache} from the local cache"
    )


def load_failure(exc: BaseException) -> str:
    """What went wrong under a background page load, in words for its log line."""
    from ckpt.errors import IntegrityError
    from ckpt.storage.errors import StorageError

    if isinstance(exc, StorageError) and not isinstance(exc, IntegrityError):
        return "the store failed"
    return "page file damaged"


_early: tuple[Any, Any] | None = None  # (the request, the future of its StagedImage)
EARLY_WAIT_S = 3600.0  # each store request has its own deadline; this only bounds the join


def begin_restore(params: Any, key: bytes | None) -> None:
    """For an ``s3://`` image, start fetching it now, in a thread, while the sandbox
    imports the kernel and state modules (a cold sandbox spends 60-300 ms there);
    :func:`open_for_restore` takes the result, or raises its error in place."""
    global _early
    if not is_remote(_get(params, "image") or ""):
        return
    from concurrent.futures import Future

    future: Future[StagedImage] = Future()

    def fetch() -> None:
        try:
            future.set_result(StagedImage(params, key, lazy=bool(_get(params, "background"))))
        except BaseException as exc:
            future.set_exception(exc)

    _early = (params, future)
    import threading

    threading.Thread(target=fetch, name="ckpt-fetch", daemon=True).start()


def _staged(params: Any, key: bytes | None) -> StagedImage:
    """The image fetched for this request: the one :func:`begin_restore` started, or
    fetched now."""
    global _early
    early, _early = _early, None
    if early is not None and early[0] is params:
        return early[1].result(timeout=EARLY_WAIT_S)  # type: ignore[no-any-return]
    return StagedImage(params, key, lazy=bool(_get(params, "background")))


def open_for_restore(params: Any, key: bytes | None) -> tuple[Any, StagedImage | None]:
    """The image a restore loads, and the staged copy to remove once it is loaded
    (``--background`` from a store: the pages are read from the store from then on)."""
    from ckpt import statefile

    if not is_remote(_get(params, "image")):
        return statefile.open_image(_get(params, "image"), key=key), None
    lazy = bool(_get(params, "background"))
    staged = _staged(params, key)
    try:
        if lazy:
            from ckpt.statefile.sources import StoreImage

            return StoreImage(staged.dir, key, staged.source), staged
        return statefile.open_image(staged.dir, key=key), staged
    except BaseException:
        staged.remove()
        raise
