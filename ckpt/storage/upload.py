"""Upload an image as content-addressed chunks, then publish its manifest.

Bytes written to a file of the upload are cut into ``chunk_size`` pieces (512 KiB, as
AWS Lambda's container images are); each piece is hashed (or, for an encrypted image,
sealed: ckpt/storage/sealing.py) and, unless the store already holds an object at its
address, PUT to ``.chunks/XX/ADDRESS``, on a pool of
``parallel`` threads.  Memory is bounded: a write blocks while ``2 * parallel`` chunks
are queued or in flight, so the upload holds at most ``2 * parallel`` chunks plus one
partial chunk per open file: 16 MiB + 512 KiB per open file with the defaults (16
threads, 512 KiB).  Measured: three 256 MiB uploads to a local SeaweedFS raised the
process's peak RSS by 60 MiB (45 MiB with 8 threads), the rest being the S3 client's
runtime, its buffers and thread stacks.  Nothing is staged on
local disk.

The manifest goes last, with a create-if-absent (or, with ``force``, one atomic PUT that
replaces the old one): until then no reader sees the image, so a failed or killed upload
leaves only unreferenced chunks, which :meth:`Repository.prune` removes later.  An upload
holds a lease (:mod:`ckpt.storage.lease`) from before its first presence check until
its manifest is written, so no prune removes a chunk it is counting on.
"""

from __future__ import annotations

import io
import secrets
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ckpt.storage import lease as leases
from ckpt.storage.errors import ImageChanged, ImageExists, ObjectExists, ObjectMissing, StoreBusy
from ckpt.storage.manifest import ChunkRef, FileEntry, Manifest, encode

if TYPE_CHECKING:
    from ckpt.storage.repository import Repository

READ_SIZE = 1 << 20
# Threads putting chunks: each chunk costs a HEAD and a PUT, so latency, not bandwidth,
# bounds a thread; 16 uploaded 128 MiB at 94% of a bare 8-thread PUT of the same
# chunks on a local SeaweedFS, 8 threads at 83%.
PARALLEL = 16


@dataclass
class UploadStats:
    """What an upload sent: ``bytes_uploaded`` counts only chunks the store lacked.
    (A dataclass of numbers: ``msgspec.json.encode`` renders it for ``--json``.)"""

    bytes_total: int = 0
    bytes_uploaded: int = 0
    chunks_total: int = 0
    chunks_uploaded: int = 0
    seconds: float = 0.0

    def add(self, size: int, uploaded: bool) -> None:
        """Count one chunk; the caller holds the upload's lock."""
        self.chunks_total += 1
        self.bytes_total += size
        if uploaded:
            self.chunks_uploaded += 1
            self.bytes_uploaded += size


class ChunkWriter(io.RawIOBase):
    """A write-only file of the image: ``write`` cuts the stream into chunks and hands
    them to the upload's threads; ``close`` waits for none of them (commit does)."""

    def __init__(self, upload: ImageUpload, name: str) -> None:
        super().__init__()
        self._upload = upload
        self.name = name
        self._buffer = bytearray()
        self.size = 0
        self.futures: list[Future[ChunkRef]] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError("write to a closed image file")
        view = memoryview(data).cast("B")
        size = self._upload.chunk_size
        taken = 0
        while taken < len(view):
            room = size - len(self._buffer)
            self._buffer += view[taken : taken + room]
            taken += min(room, len(view) - taken)
            if len(self._buffer) == size:
                self._flush_chunk()
        self.size += len(view)
        return len(view)

    def _flush_chunk(self) -> None:
        data, self._buffer = bytes(self._buffer), bytearray()
        self.futures.append(self._upload._submit(data))

    def close(self) -> None:
        if not self.closed and self._buffer:
            self._flush_chunk()
        super().close()

    def cut(self) -> None:
        """End the current chunk here, short: bytes that differ in every image (a
        header holding the image's ID) then stay out of the chunks that follow, which
        the next image of the same content shares."""
        if self._buffer:
            self._flush_chunk()

    def discard(self) -> None:
        """Close without sending the partial chunk: the upload is being aborted."""
        self._buffer = bytearray()
        super().close()


class ImageUpload:
    """One image being uploaded; use as a context manager and call :meth:`commit`.
    Leaving the block without committing aborts (no manifest is written)."""

    def __init__(
        self,
        repo: Repository,
        name: str,
        *,
        sandbox_id: str,
        parent: str | None = None,
        parent_id: str | None = None,
        force: bool = False,
        parallel: int = PARALLEL,
        wait: float = 60.0,
    ) -> None:
        self.repo = repo
        self.store = repo.store
        self.name = repo.check_name(name)
        self.sandbox_id = sandbox_id
        self.parent = parent
        self.force = force
        self.parallel = max(1, parallel)
        self.wait = wait
        self.chunk_size = repo.chunk_size
        self.chunks = repo.chunks()  # plain, or sealed with the key (sealing.py)
        self.stats = UploadStats()
        self._files: dict[str, ChunkWriter] = {}
        self._seen: set[bytes] = set()
        self._seen_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(2 * self.parallel)
        self._buffers = threading.local()  # each upload thread's seal buffer
        self._pool: ThreadPoolExecutor | None = None
        self._lease: leases.Lease | None = None
        self._parent_id = parent_id  # the parent's manifest id, if the caller read it
        self._started = 0.0
        self._failure: BaseException | None = None
        self._replaces: str | None = None  # with force: the etag of the manifest replaced
        self.manifest: Manifest | None = None

    @property
    def replaces(self) -> str | None:
        """With ``force``: the ETag of the manifest this upload will replace."""
        return self._replaces

    def __enter__(self) -> ImageUpload:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.manifest is None:
            self.abort()

    def start(self) -> None:
        """Check the target, take the lease (waiting up to ``wait`` s for a prune)."""
        self._started = time.monotonic()
        self.store.check()
        current = self.store.head(self.repo.manifest_key(self.name))
        if current is not None and not self.force:
            raise ImageExists(f"{self.repo.image_url(self.name)} exists; use --force to replace it")
        if current is not None:
            if current.etag is None:
                raise ImageChanged(
                    f"{self.store.url}: the store gives no ETag, so --force cannot replace"
                    " an image safely; remove it first (`ckpt image rm`)"
                )
            self._replaces = current.etag
        if self.parent is not None and self._parent_id is None:
            self._parent_id = self.repo.read_parent(self.parent, self.chunks).image_id
        deadline = time.monotonic() + self.wait
        while True:
            lease = leases.Lease(self.store, leases.UPLOAD, self.repo.lease_ttl)
            try:
                lease.acquire(excludes=leases.PRUNE)
                break
            except StoreBusy:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)
        self._lease = lease
        self._pool = ThreadPoolExecutor(self.parallel, thread_name_prefix="ckpt-upload")

    def open(self, name: str) -> ChunkWriter:
        """A new file of the image, to ``write`` to and ``close``."""
        self.repo.check_name(name)
        if name in self._files:
            raise ValueError(f"file {name} written twice")
        writer = ChunkWriter(self, name)
        self._files[name] = writer
        return writer

    def add_file(self, name: str, source: bytes | Path | BinaryIO | Iterable[bytes]) -> None:
        """Write a whole file from bytes, a path, an open binary file or an iterable."""
        with self.open(name) as out:
            if isinstance(source, bytes | bytearray | memoryview):
                out.write(source)
            elif isinstance(source, Path):
                with open(source, "rb") as src:
                    while block := src.read(READ_SIZE):
                        out.write(block)
            elif hasattr(source, "read"):
                while block := source.read(READ_SIZE):  # type: ignore[union-attr]
                    out.write(block)
            else:
                for block in source:
                    out.write(block)

    def _submit(self, data: bytes) -> Future[ChunkRef]:
        if self._pool is None:
            raise RuntimeError("upload not started")
        if self._failure is not None:  # fail fast: the store went away mid-upload
            raise self._failure
        self._slots.acquire()
        try:
            return self._pool.submit(self._put_chunk, data)
        except BaseException:
            self._slots.release()
            raise

    def _put_chunk(self, data: bytes) -> ChunkRef:
        try:
            address, stored = self.chunks.seal(data, self._seal_buffer(len(data)))
            ref = ChunkRef(address, len(data))
            with self._seen_lock:
                first = ref.digest not in self._seen
                self._seen.add(ref.digest)
            key = self.repo.chunk_key(ref.digest)
            uploaded = first and self.store.head(key) is None
            if uploaded:
                self.store.put(key, stored)
            with self._seen_lock:
                self.stats.add(len(stored), uploaded)
            return ref
        except BaseException as exc:
            self._failure = exc
            raise
        finally:
            self._slots.release()

    def _seal_buffer(self, size: int) -> bytearray | None:
        """This thread's buffer to seal a chunk of ``size`` bytes into, or None for
        plain chunks.  The object sealed in it is PUT before the thread seals another,
        and a store reads ``data`` during ``put`` only."""
        if not self.chunks.sealed:
            return None
        need = max(size, self.chunk_size) + self.chunks.overhead
        buf: bytearray | None = getattr(self._buffers, "buf", None)
        if buf is None or len(buf) < need:
            buf = self._buffers.buf = bytearray(need)
        return buf

    def commit(self) -> Manifest:
        """Wait for every chunk, then publish the manifest (last); return it.  On any
        failure the upload is aborted (no manifest) and the error raised."""
        try:
            return self._commit()
        except BaseException:
            self.abort()
            raise

    def _commit(self) -> Manifest:
        if self._lease is None or self._pool is None:
            raise RuntimeError("upload not started")
        files = {}
        for name, writer in self._files.items():
            writer.close()
            refs = [future.result() for future in writer.futures]
            files[name] = FileEntry(size=writer.size, chunks=refs)
        manifest = Manifest(
            image_id=secrets.token_hex(16),
            name=self.name,
            sandbox_id=self.sandbox_id,
            created=time.time(),
            parent=self.parent,
            parent_id=self._parent_id,
            chunk_size=self.chunk_size,
            files=files,
        )
        data = encode(manifest, self.repo.key, self.chunks)
        self._lease.check_held()
        self._check_parent()
        key = self.repo.manifest_key(self.name)
        try:
            if self._replaces is not None:
                self.store.swap(key, data, self._replaces)
            else:
                self.store.create(key, data)
        except ObjectExists:
            if self.force:
                raise ImageChanged(
                    f"{self.repo.image_url(self.name)} was written by another checkpoint"
                    " while this one ran; this one wrote nothing: run it again"
                ) from None
            raise ImageExists(
                f"{self.repo.image_url(self.name)} exists; use --force to replace it"
            ) from None
        self.manifest = manifest
        self.stats.seconds = time.monotonic() - self._started
        self._finish()
        return manifest

    def _check_parent(self) -> None:
        """Under the lease, just before the manifest: the parent is still the image
        this one was made against (an ``image rm`` takes the same kind of lease as a
        prune, so it cannot remove it from now until the manifest is written)."""
        if self.parent is None:
            return
        url = self.repo.image_url(self.parent)
        try:
            data = self.repo._read_manifest_bytes(self.parent)
        except ObjectMissing:
            raise ObjectMissing(
                f"{self.repo.image_url(self.name)}: its parent {url} was removed while"
                " this checkpoint ran; nothing was written: take a full checkpoint"
            ) from None
        parent = self.repo.read_parent(self.parent, self.chunks, data)
        if self._parent_id is not None and parent.image_id != self._parent_id:
            raise ImageChanged(
                f"{self.repo.image_url(self.name)}: its parent {url} was replaced while"
                " this checkpoint ran; nothing was written: take a full checkpoint"
            )

    def abort(self) -> None:
        """Stop without a manifest: chunks already stored stay for prune to remove."""
        for writer in self._files.values():
            writer.discard()
            for future in writer.futures:
                future.cancel()
        self._finish()

    def _finish(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._lease is not None:
            self._lease.release()
            self._lease = None
