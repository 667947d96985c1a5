"""Images in an object store, inside the sandbox: the :class:`ImageSession` the sandbox
host holds (ckpt/sandbox/host/process.py) opens the store, starts the upload before the
freeze, reads the parent and fetches an image to restore, with the store settings the
CLI gathered (ckpt/images/remote.py) and sent in the request.  Where an image
lives is a :class:`ckpt.images.Location`, parsed from the request's string on arrival.

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
import threading
from pathlib import Path
from typing import Any

from ckpt.errors import SandboxError
from ckpt.imagefiles import IMAGE_FILES, MAX_CHAIN, PAGES_IMG  # a leaf: see its docstring
from ckpt.images import factory
from ckpt.images.location import Location
from ckpt.images.remote import BEFORE_DEADLINE_S as BEFORE_DEADLINE_S  # the CLI states
from ckpt.images.remote import within

# A checkpoint asks the store everything it needs (bucket, credentials, the target, the
# parent, the upload lease) before the sandbox drains; a store that has not answered
# all of it within PREPARE_DEADLINE_S fails the checkpoint with the sandbox untouched.
PREPARE_DEADLINE_S = 15.0
LEASE_WAIT_S = 5.0  # of those, waiting for a prune's lease to go


def location_of(params: Any, field: str = "image") -> Location:
    """The request's ``field`` as a Location: the string on the wire, parsed where it is
    received (the CLI parsed what the user typed; this checks what arrived)."""
    return Location.of(_get(params, field) or "")


def _get(request: Any, name: str) -> Any:
    """A field of the request: a protocol struct, or the dict it once was."""
    if isinstance(request, dict):
        return request.get(name)
    return getattr(request, name, None)


def _upload_options(params: Any, parent_ids: dict[str, str]) -> dict[str, Any]:
    """The upload's options for the request: its force and its parent (by name, and
    its manifest id when already read)."""
    parent = _get(params, "parent")
    where = location_of(params, "parent") if parent else None
    return {
        "force": bool(_get(params, "force")),
        "parent": where.name if where is not None else None,
        "parent_id": parent_ids.get(str(where)) if where is not None else None,
    }


class ImageSession:
    """What the sandbox host keeps between the steps of one checkpoint or restore of an
    object-store image, and drops after: the store it opened (``store``), the upload
    started before the freeze (``prepared``), the parent's manifest id read before the
    freeze (``parent_ids``), and the fetch a restore started while the sandbox imports
    its modules (``early``).  Local images use none of it."""

    def __init__(self) -> None:
        self.warm: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
        self.prepared: dict[str, tuple[Any, str]] = {}  # image URL -> (upload, its sandbox)
        # The manifest id of the parent :meth:`parent_image` checked, by URL: read before
        # the sandbox freezes, so the upload need not read it again while it is frozen.
        self.parent_ids: dict[str, str] = {}
        self.early: tuple[Any, Any] | None = None  # (the request, its StagedImage's future)

    def store(self, params: Any) -> tuple[Any, str]:
        """The store of the request's image's repository and the image name, opened with
        the settings in the request only; reused for the same repository and settings."""

        where = location_of(params)
        env = dict(_get(params, "store_env") or {})
        from ckpt.storage.repository import split_image_url

        repo_url, name = split_image_url(str(where))
        cache_key = (repo_url, tuple(sorted(env.items())))
        store = self.warm.get(cache_key)
        if store is None:
            store, _, _ = factory.store_of(where, env)
            self.warm.clear()  # one store at a time
            self.warm[cache_key] = store
        return store, name

    def open_repository(
        self, params: Any, key: bytes | None, *, sealed: bool = False
    ) -> tuple[Any, str]:
        """For the sandbox: the repository and image name of the request's image
        (``sealed``: it writes encrypted images)."""

        store, name = self.store(params)
        return factory.repository(store, key, sealed=sealed), name

    def prepare(self, params: Any, sandbox_id: str = "") -> None:
        """Before the sandbox drains: open the store and start the upload (the bucket
        and credentials, the target, the parent, the lease), so the frozen time does not
        pay for them and a store that refuses or does not answer fails the checkpoint
        with the sandbox untouched, within PREPARE_DEADLINE_S; :meth:`discard_prepared`
        ends an upload no writer took."""
        where = location_of(params)
        if where.is_local:
            return
        self.discard_prepared()
        import ckpt.storage.repository  # noqa: F401  (msgspec, the manifest; not timed)

        def start() -> Any:
            key = _get(params, "key_hex")
            repo, name = self.open_repository(
                params, bytes.fromhex(key) if key else None, sealed=bool(_get(params, "encrypt"))
            )
            upload = repo.upload(
                name,
                sandbox_id=sandbox_id,
                wait=LEASE_WAIT_S,
                **_upload_options(params, self.parent_ids),
            )
            upload.start()
            return upload

        def abort(upload: Any) -> None:
            with contextlib.suppress(Exception):
                upload.abort()

        url = str(where)
        self.prepared[url] = (within(PREPARE_DEADLINE_S, url, start, abort), sandbox_id)

    def discard_prepared(self) -> None:
        """Abort the upload :meth:`prepare` started if no writer took it (a checkpoint
        that failed before writing): its lease goes at once, not at its expiry."""
        for upload, _ in self.prepared.values():
            with contextlib.suppress(Exception):
                upload.abort()
        self.prepared.clear()

    def image_writer(self, params: Any, **options: Any) -> Any:
        """The writer for a checkpoint: an image directory, or an object store (whose
        manifest names the request's ``parent``, an image of the same repository)."""

        where = location_of(params)
        if where.is_local:
            return factory.writer(where, **options)
        sealed = bool(options.get("encrypt"))
        repo, _ = self.open_repository(params, options.get("key"), sealed=sealed)
        self.warm.clear()  # the settings live as long as this writer, not in the sandbox
        sandbox_id = str((options.get("metadata") or {}).get("sandbox_id") or "")
        upload_options = _upload_options(params, self.parent_ids)
        self.parent_ids.clear()
        upload, for_sandbox = self.prepared.pop(str(where), (None, None))
        self.discard_prepared()
        if upload is not None and (
            for_sandbox != sandbox_id
            or upload.repo.key != options.get("key")
            or upload.repo.sealed != sealed
            or any(getattr(upload, k) != v for k, v in upload_options.items() if k != "parent_id")
        ):
            upload.abort()  # started for another request: not this one's
            upload = None
        return factory.writer(
            where,
            repository=repo,
            sandbox_id=sandbox_id,
            parent=upload_options["parent"],
            parent_id=upload_options["parent_id"],
            started=upload,
            **options,
        )

    @contextlib.contextmanager
    def parent_image(self, params: Any, key: bytes | None) -> Any:
        """The request's object-store parent, opened from a private local copy of its
        checkpoint.img (its manifest's HMAC, each chunk's digest and the statefile's own
        tag checked, as for a restore; refused unless it is sealed as the new image
        will be, under the same key); yields ``(image, name, url)``."""
        import tempfile

        from ckpt import statefile
        from ckpt.statefile.format import CHECKPOINT_IMG

        where = location_of(params, "parent")
        url = str(where)
        store, _ = self.store(params)  # the image's repository (checked by the CLI)
        repo = factory.repository(store, key, sealed=bool(_get(params, "encrypt")))
        repo.read_parent(where.name, repo.chunks())
        reader = repo.open_image(where.name)
        self.parent_ids.clear()
        self.parent_ids[url] = reader.manifest.image_id
        with tempfile.TemporaryDirectory(prefix="ckpt-parent-") as tmp:
            path = Path(tmp) / CHECKPOINT_IMG
            with open(path, "xb") as out:
                for data in reader.iter_file(CHECKPOINT_IMG):
                    out.write(data)
            yield statefile.open_image(tmp, key=file_key(reader, key)), where.name, url

    def begin_restore(self, params: Any, key: bytes | None) -> None:
        """For an object-store image, start fetching it now, in a thread, while the
        sandbox imports the kernel and state modules (a cold sandbox spends 60-300 ms
        there); :meth:`open_for_restore` takes the result, or raises its error in place."""
        if location_of(params).is_local:
            return
        from concurrent.futures import Future

        future: Future[StagedImage] = Future()
        lazy = bool(_get(params, "background"))

        def fetch() -> None:
            try:
                future.set_result(StagedImage(params, key, lazy=lazy, session=self))
            except BaseException as exc:
                future.set_exception(exc)

        self.early = (params, future)
        threading.Thread(target=fetch, name="ckpt-fetch", daemon=True).start()

    def _staged(self, params: Any, key: bytes | None) -> StagedImage:
        """The image fetched for this request: the one :meth:`begin_restore` started, or
        fetched now."""
        early, self.early = self.early, None
        if early is not None and early[0] is params:
            return early[1].result(timeout=EARLY_WAIT_S)  # type: ignore[no-any-return]
        return StagedImage(params, key, lazy=bool(_get(params, "background")), session=self)

    def open_for_restore(self, params: Any, key: bytes | None) -> tuple[Any, StagedImage | None]:
        """The image a restore loads, and the staged copy to remove once it is loaded
        (``--background`` from a store: the pages are read from the store from then on)."""

        where = location_of(params)
        if where.is_local:
            return factory.reader(where, key), None
        lazy = bool(_get(params, "background"))
        staged = self._staged(params, key)
        try:
            source = staged.source if lazy else None
            return factory.reader(staged.dir, staged.file_key, source=source), staged
        except BaseException:
            staged.remove()
            raise


def file_key(reader: Any, key: bytes | None) -> bytes | None:
    """The key the files of the store image ``reader`` reads open with: none when
    the image is encrypted (its files are unkeyed; the chunks' seal covers them)."""
    return None if reader.sealed else key


def image_key(staged: StagedImage | None, key: bytes | None) -> bytes | None:
    """The key the restored image (and its chain) opens with: ``key``, or none for
    an encrypted image fetched from a store."""
    return key if staged is None else staged.file_key


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


class StagedImage:
    """An image fetched into ``stage_dir`` for a restore; :meth:`remove` after loading.

    ``lazy``: only the files other than pages.img are fetched (through the chunk cache),
    and :attr:`source` serves pages.img's chunks on demand from then on.  Its first
    chunk, pages.img's header (checked with the page map), is fetched beside them; no
    page is asked for before the sandbox answers: chunks fetched during the kernel
    state's load compete with it for the CPU and delay the first answer."""

    def __init__(
        self,
        params: Any,
        key: bytes | None,
        *,
        lazy: bool = False,
        session: ImageSession | None = None,
    ) -> None:
        stage = _get(params, "stage_dir")
        if not stage:
            raise SandboxError("restore from a store needs a stage directory (ckpt bug)")
        self.top = Path(stage)
        self.source: Any = None
        repo, name = (session or ImageSession()).open_repository(params, key)
        self.dir = self.top / name  # each image of the chain beside its child
        reader = repo.open_image(name)  # the manifest's HMAC is checked here, with a key
        self.file_key = file_key(reader, key)
        self.remove()  # a dead restore's leftover
        skip = (PAGES_IMG,) if lazy else ()
        reader.check_download(self.dir, skip=skip, allowed=IMAGE_FILES)  # before any fetch
        self.top.mkdir(mode=0o700, parents=False)
        try:
            if lazy:
                self._fetch_lazily(reader)
            else:
                reader.download(self.dir, allowed=IMAGE_FILES)  # each chunk checked
            self.chunks = reader.chunks  # each parent is sealed as this image is
            self._fetch_parents(repo, reader.manifest)
        except BaseException:
            self.remove()
            raise

    def _fetch_parents(self, repo: Any, manifest: Any) -> None:
        """Stage the image's parents whole beside it, as ``../NAME``, which is where
        its statefile's link (covered by its tag) says they are: the restore then
        checks the chain as a local one (ckpt/statefile/chain.py).  A parent is loaded
        eagerly, even under ``--background``."""
        repo.download_parents(
            manifest, self.top, MAX_CHAIN, allowed=IMAGE_FILES, chunks=self.chunks
        )

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
    from ckpt.sandbox.wire.sandboxlog import log

    s = source.stats
    log(
        f"restore: {source.where} loaded: {s.from_store} chunks from the store "
        f"({s.bytes_from_store} bytes), {s.from_cache} from the local cache"
    )


def load_failure(exc: BaseException) -> str:
    """What went wrong under a background page load, in words for its log line."""
    from ckpt.errors import IntegrityError
    from ckpt.images.pagefeed import PagesLost
    from ckpt.storage.errors import StorageError

    if isinstance(exc, StorageError) and not isinstance(exc, IntegrityError):
        return "the store failed"
    if isinstance(exc, PagesLost):
        return "post-copy lost its source"
    return "page file damaged"


EARLY_WAIT_S = 3600.0  # each store request has its own deadline; this only bounds the join
