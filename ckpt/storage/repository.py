"""A repository of images under one store root (a directory, or ``s3://BUCKET/PREFIX``):
upload, read, list, remove, prune.

Keys under the root::

    NAME/manifest            an image (written last; its presence is the image)
    .chunks/XX/SHA256HEX     a chunk, shared by every image of the repository
    .leases/KIND-RANDOM      a live upload or prune (see ckpt.storage.lease)

An image URL is the repository's URL plus ``/NAME``: ``s3://b/team/img1`` is image
``img1`` of repository ``s3://b/team``.  Image names cannot start with ``.``, so they
never collide with the repository's own keys.
"""

from __future__ import annotations

import bisect
import os
import re
import time
from array import array
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from ckpt.storage import lease as leases
from ckpt.storage import sealing
from ckpt.storage.errors import BadStoreURL, ImageInUse, ObjectMissing, StorageError
from ckpt.storage.manifest import (
    MAX_CHUNK,
    MAX_OBJECT,
    ChunkRef,
    Manifest,
    ManifestError,
    ManifestVersionError,
    check_key_len,
    decode_unverified,
    decode_with_chunks,
    unverified_key_id,
)
from ckpt.storage.store import Store, open_store
from ckpt.storage.upload import ImageUpload

CHUNK_SIZE = 512 << 10
CHUNKS = ".chunks/"
MANIFEST = "manifest"
DEFAULT_GRACE = 3600.0  # s
PRUNE_PARALLEL = 16  # deletes in flight: each is one small request
PRUNE_BATCH = 256  # deletes handed to the pool at once
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
FREE_RESERVE = 64 << 20  # bytes a download leaves free on its filesystem


class ImageInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One line of ``ckpt image ls``; sizes in bytes.  ``stored`` counts each distinct
    chunk of the image once; ``unique`` counts those no other image references."""

    name: str  # the name it is stored under (its URL's last part)
    image_id: str
    sandbox_id: str
    created: float
    parent: str | None
    parent_id: str | None
    size: int
    stored: int
    unique: int
    chunks: int


class BadImage(msgspec.Struct, frozen=True, kw_only=True):
    """An image whose manifest cannot be read: listed apart, with the reason."""

    name: str
    error: str


class Listing(msgspec.Struct, frozen=True, kw_only=True):
    """``ckpt image ls``: the images, oldest first, and those that cannot be read."""

    images: list[ImageInfo]
    bad: list[BadImage]


class PruneResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a prune removed and why it kept the rest; ``bad`` names the images whose
    manifest is garbage (their chunks are not kept for them)."""

    removed_chunks: int
    removed_bytes: int
    kept_referenced: int
    kept_young: int
    removed_leases: int
    bad: list[str] = msgspec.field(default_factory=list)


def split_image_url(url: str) -> tuple[str, str]:
    """``s3://b/p/NAME`` or ``DIR/NAME`` -> (repository URL, NAME)."""
    repo, sep, name = url.rstrip("/").rpartition("/")
    if not sep or not repo or repo.endswith(":/") or not _NAME.fullmatch(name):
        raise BadStoreURL(
            f"{url}: name the image after its repository, e.g. s3://BUCKET/PREFIX/NAME"
            " (a name is letters, digits, '.', '_', '-')"
        )
    return repo, name


class Repository:
    """Images stored as content-addressed chunks in ``store``; ``key`` signs manifests
    (HMAC-SHA256) and is required to read signed ones.  With ``sealed`` the images
    it writes are encrypted with ``key`` instead (ckpt/storage/sealing.py); reading
    follows each manifest's own kind."""

    def __init__(
        self,
        store: Store,
        key: bytes | None = None,
        *,
        sealed: bool = False,
        chunk_size: int = CHUNK_SIZE,
        lease_ttl: float = leases.DEFAULT_TTL,
    ) -> None:
        check_key_len(key)
        if sealed and key is None:
            raise StorageError("--encrypt seals the image with a key: pass --key-file PATH")
        self.sealed = sealed
        if not 4096 <= chunk_size <= MAX_CHUNK:
            raise StorageError(f"chunk size {chunk_size} is outside 4 KiB .. {MAX_CHUNK}")
        self.store = store
        self.key = key
        self.chunk_size = chunk_size
        self.lease_ttl = lease_ttl

    @classmethod
    def open(cls, url: str, key: bytes | None = None, **options: Any) -> Repository:
        """The repository at ``url`` (``s3://BUCKET/PREFIX``, ``file:///DIR`` or a path)."""
        return cls(open_store(url), key, **options)

    @classmethod
    def for_image(
        cls, url: str, key: bytes | None = None, **options: Any
    ) -> tuple[Repository, str]:
        """The repository holding image ``url`` (``s3://BUCKET/PREFIX/NAME``) and NAME."""
        repo_url, name = split_image_url(url)
        return cls.open(repo_url, key, **options), name

    # names and keys

    def check_name(self, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise BadStoreURL(f"{name!r}: an image or file name is letters, digits, . _ -")
        return name

    def manifest_key(self, name: str) -> str:
        return f"{self.check_name(name)}/{MANIFEST}"

    def chunk_key(self, digest: bytes) -> str:
        hexed = digest.hex()
        return f"{CHUNKS}{hexed[:2]}/{hexed}"

    def image_url(self, name: str) -> str:
        return f"{self.store.url.rstrip('/')}/{name}"

    # writing

    def upload(self, name: str, *, sandbox_id: str, **options: Any) -> ImageUpload:
        """A new upload of image ``name``: ``with repo.upload(...) as up: ...;
        up.commit()``.  Options: ``parent``, ``force``, ``parallel``, ``wait``."""
        return ImageUpload(self, name, sandbox_id=sandbox_id, **options)

    def upload_directory(
        self, name: str, directory: Path, *, sandbox_id: str, **options: Any
    ) -> ImageUpload:
        """Upload every regular file of a local image directory; returns the committed
        upload (its ``manifest`` and ``stats``)."""
        up = self.upload(name, sandbox_id=sandbox_id, **options)
        with up:
            for path in sorted(Path(directory).iterdir()):
                if path.is_file() and not path.is_symlink():
                    up.add_file(path.name, path)
            up.commit()
        return up

    # reading

    def _read_manifest_bytes(self, name: str) -> bytes:
        """The manifest object, its size checked before a byte of it is read."""
        key = self.manifest_key(name)
        info = self.store.head(key)
        if info is None:
            raise ObjectMissing(f"{self.image_url(name)}: no such image")
        if info.size > MAX_OBJECT:
            raise ManifestError(
                f"{self.image_url(name)}: its manifest is {info.size} bytes, over the"
                f" {MAX_OBJECT}-byte limit of any ckpt manifest; not read (remove the image)"
            )
        try:
            return self.store.get(key, 0, info.size)  # bounded even if replaced meanwhile
        except ObjectMissing:
            raise ObjectMissing(f"{self.image_url(name)}: no such image") from None

    def chunks(self) -> sealing.PlainChunks | sealing.ConvergentChunks:
        """The codec of a new upload's chunks: plain, or sealed with the key."""
        return sealing.chunks_for(self.key, self.sealed)

    def _open_manifest(
        self, name: str, data: bytes | None = None
    ) -> tuple[Manifest, sealing.PlainChunks | sealing.ConvergentChunks]:
        if data is None:
            data = self._read_manifest_bytes(name)
        manifest, chunks = decode_with_chunks(data, self.key, self.image_url(name))
        if manifest.name != name:
            raise StorageError(
                f"{self.image_url(name)}: the manifest names image {manifest.name!r}"
                " (copied by hand?)"
            )
        return manifest, chunks

    def read_manifest(self, name: str) -> Manifest:
        """The image's manifest, checked with the key (if any)."""
        return self._open_manifest(name)[0]

    def read_parent(self, name: str, child: Any, data: bytes | None = None) -> Manifest:
        """Image ``name``'s manifest, as the parent of an image whose chunks ``child``
        seals: refused in one line unless both are sealed under one key or neither is."""
        if data is None:
            data = self._read_manifest_bytes(name)
        url = self.image_url(name)
        kid = unverified_key_id(data, url)
        sealing.check_chain(kid is not None, kid, child, f"the parent image {url}")
        return self._open_manifest(name, data)[0]

    def open_image(self, name: str) -> ImageReader:
        return ImageReader(self, *self._open_manifest(name))

    def download_parents(
        self,
        manifest: Manifest,
        directory: Path,
        limit: int,
        allowed: Collection[str] | None = None,
        chunks: Any = None,
    ) -> list[str]:
        """Download the parents ``manifest`` names, one after another, each whole into
        ``directory/NAME`` (beside its child, where a chain's statefile link points);
        at most ``limit`` images in the chain, each sealed as the child (``chunks``,
        its codec) is.  Returns the parents' names."""
        names, seen = [], {manifest.name}
        while manifest.parent is not None:
            if manifest.parent in seen or len(seen) >= limit:
                raise StorageError(
                    f"{self.image_url(manifest.name)}: its chain is over {limit} images or "
                    "loops; take a full checkpoint"
                )
            seen.add(manifest.parent)
            url = self.image_url(manifest.parent)
            try:
                if chunks is not None:
                    self.read_parent(manifest.parent, chunks)
                reader = self.open_image(manifest.parent)  # its HMAC checked, with a key
                reader.download(Path(directory) / manifest.parent, allowed=allowed)
            except StorageError as exc:
                raise type(exc)(
                    f"{self.image_url(manifest.name)}: its parent image {url} cannot be "
                    f"used: {exc}; the chain is broken"
                ) from exc
            names.append(manifest.parent)
            manifest = reader.manifest
        return names

    # ls, rm, prune

    def names(self) -> list[str]:
        """The names of the repository's images (one delimited list, not every chunk)."""
        names = [n for n in self.store.children("") if _NAME.fullmatch(n)]
        return sorted(n for n in names if self.store.head(self.manifest_key(n)) is not None)

    def _scan(self) -> Iterator[tuple[str, Manifest | None, ManifestError | None]]:
        """Each image's name (the key it is stored under) with its manifest, parsed
        but not verified, or the reason it cannot be parsed; one manifest in memory
        at a time."""
        for name in self.names():
            where = self.image_url(name)
            try:
                manifest = decode_unverified(self._read_manifest_bytes(name), where)
            except ObjectMissing:
                continue  # removed since it was listed
            except ManifestError as exc:
                yield name, None, exc
                continue
            yield name, manifest, None

    def scan(self) -> Listing:
        """Every image of the repository, oldest first, and apart those whose manifest
        cannot be read (manifests are parsed, not verified: listing needs no key).
        Manifests are read one at a time; each image keeps its chunks' digests only."""
        users: dict[bytes, int] = {}
        rows: list[tuple[str, Manifest, int, bytes, array[int]]] = []
        bad = []
        for name, manifest, error in self._scan():
            if manifest is None:
                bad.append(BadImage(name=name, error=str(error)))
                continue
            refs = manifest.chunk_refs()
            for digest in refs:
                users[digest] = users.get(digest, 0) + 1
            head = msgspec.structs.replace(manifest, files={})
            rows.append((name, head, manifest.size, b"".join(refs), array("q", refs.values())))
            del manifest, refs
        out = []
        for name, m, size, digests, sizes in rows:
            unique = sum(
                size for i, size in enumerate(sizes) if users[digests[32 * i : 32 * i + 32]] == 1
            )
            out.append(
                ImageInfo(
                    name=name,
                    image_id=m.image_id,
                    sandbox_id=m.sandbox_id,
                    created=m.created,
                    parent=m.parent,
                    parent_id=m.parent_id,
                    size=size,
                    stored=sum(sizes),
                    unique=unique,
                    chunks=len(sizes),
                )
            )
        return Listing(images=sorted(out, key=lambda i: (i.created, i.name)), bad=bad)

    def images(self) -> list[ImageInfo]:
        """The readable images of the repository, oldest first (see :meth:`scan`)."""
        return self.scan().images

    def children(self, name: str) -> list[str]:
        """The images whose manifest names ``name`` as its parent (unverified, as ls)."""
        return sorted(n for n, m, _ in self._scan() if m is not None and m.parent == name)

    def remove(self, name: str, *, force: bool = False) -> None:
        """Remove the image (its manifest); its chunks stay until a prune.  An image
        another one names as its parent is kept unless ``force``: its child would no
        longer restore.  Holds a prune's lease meanwhile, so it is refused while an
        upload is live (that upload may name this image as its parent, and checks it
        under its own lease just before it commits)."""
        key = self.manifest_key(name)
        if self.store.head(key) is None:
            raise ObjectMissing(f"{self.image_url(name)}: no such image")
        lease = leases.Lease(self.store, leases.PRUNE, self.lease_ttl)
        lease.acquire(excludes=leases.UPLOAD)
        try:
            if not force:
                children = self.children(name)
                if children:
                    raise ImageInUse(
                        f"{self.image_url(name)} is the parent of {', '.join(children)},"
                        " which would no longer restore; remove that first, or pass --force"
                    )
            lease.check_held()
            self.store.delete(key)
        finally:
            lease.release()

    def prune(self, grace: float = DEFAULT_GRACE) -> PruneResult:
        """Remove chunks that no manifest references and that were written more than
        ``grace`` seconds ago (by the store's clock).  Holds a prune lease: refuses
        (StoreBusy) while an upload is live, and uploads wait for it."""
        lease = leases.Lease(self.store, leases.PRUNE, self.lease_ttl)
        removed_leases = lease.acquire(excludes=leases.UPLOAD, remove_dead=True)
        try:
            info = self.store.head(lease.key)
            now = info.modified if info is not None else time.time()
            referenced: set[bytes] = set()
            bad = []
            for name, manifest, error in self._scan():
                if isinstance(error, ManifestVersionError):
                    raise ManifestVersionError(
                        f"{error}; prune with that ckpt, which knows what its chunks are"
                    )
                if manifest is None:
                    bad.append(name)  # garbage: no ckpt can read it, nor its chunks
                    continue
                referenced.update(manifest.chunk_refs())
            victims, kept_ref, kept_young = [], 0, 0
            for obj in self.store.list(CHUNKS):
                try:
                    digest = bytes.fromhex(obj.key.rsplit("/", 1)[-1])
                except ValueError:
                    continue
                if len(digest) != 32 or obj.key != self.chunk_key(digest):
                    continue  # not a name ckpt writes: not ours to remove
                if digest in referenced:
                    kept_ref += 1
                elif now - obj.modified < grace:
                    kept_young += 1
                else:
                    victims.append(obj)

            def delete(key: str) -> None:
                lease.check_held(ask_store=False)  # stalled past ttl/2: stop deleting
                self.store.delete(key)

            with ThreadPoolExecutor(PRUNE_PARALLEL, thread_name_prefix="ckpt-prune") as pool:
                for start in range(0, len(victims), PRUNE_BATCH):  # bounded futures
                    batch = [obj.key for obj in victims[start : start + PRUNE_BATCH]]
                    list(pool.map(delete, batch))
            removed, removed_bytes = len(victims), sum(obj.size for obj in victims)
        finally:
            lease.release()
        return PruneResult(
            removed_chunks=removed,
            removed_bytes=removed_bytes,
            kept_referenced=kept_ref,
            kept_young=kept_young,
            removed_leases=removed_leases,
            bad=bad,
        )


class ImageReader:
    """Reads an image's files back, chunk by chunk, checking each chunk's digest or,
    sealed, decrypting it and checking its tag (the manifest's HMAC or tag was checked
    before this reader exists)."""

    def __init__(
        self,
        repo: Repository,
        manifest: Manifest,
        chunks: sealing.PlainChunks | sealing.ConvergentChunks | None = None,
    ) -> None:
        self.repo = repo
        self.manifest = manifest
        self.chunks = chunks if chunks is not None else sealing.PlainChunks()
        self._offsets: dict[str, list[int]] = {}

    @property
    def sealed(self) -> bool:
        """Encrypted: its files are unkeyed images, its chunks sealed with the key."""
        return self.chunks.sealed

    def fetch_stored(self, ref: ChunkRef) -> bytes:
        """A chunk's object as stored, unchecked (for the chunk cache, which keeps
        what the store holds); ObjectMissing if it was removed behind ckpt's back."""
        key = self.repo.chunk_key(ref.digest)
        try:  # never more than the manifest says
            return self.repo.store.get(key, 0, ref.size + self.chunks.overhead)
        except ObjectMissing:
            raise ObjectMissing(
                f"{self._where()}: chunk {ref.hex[:16]} is missing from the store"
            ) from None

    def open_stored(self, ref: ChunkRef, stored: bytes) -> bytes:
        """The chunk from its object: checked against its digest, or decrypted and
        its tag checked (ChunkIntegrityError otherwise)."""
        return self.chunks.open(ref.digest, ref.size, stored, self._where())

    def _where(self) -> str:
        return self.repo.image_url(self.manifest.name)

    def read_chunk(self, ref: ChunkRef) -> bytes:
        """One chunk, verified; ObjectMissing if it was removed behind ckpt's back."""
        return self.open_stored(ref, self.fetch_stored(ref))

    def _entry(self, name: str) -> Any:
        try:
            return self.manifest.files[name]
        except KeyError:
            raise ObjectMissing(f"{self._where()}: the image has no file {name}") from None

    def iter_file(
        self, name: str, parallel: int = 8, fetch: Callable[[ChunkRef], bytes] | None = None
    ) -> Iterator[bytes]:
        """The file's chunks in order, fetched ``parallel`` at a time (at most
        ``2 * parallel`` chunks held) by ``fetch`` (default: :meth:`read_chunk`)."""
        refs = self._entry(name).chunks
        get = fetch or self.read_chunk
        with ThreadPoolExecutor(max(1, parallel), thread_name_prefix="ckpt-get") as pool:
            window = 2 * max(1, parallel)
            futures = [pool.submit(get, ref) for ref in refs[:window]]
            for index in range(len(refs)):
                data = futures[index].result()
                futures[index] = None  # type: ignore[call-overload]
                if index + window < len(refs):
                    futures.append(pool.submit(get, refs[index + window]))
                yield data

    def read_file(self, name: str) -> bytes:
        return b"".join(self.iter_file(name))

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset+length)`` of a file, reading only the chunks that
        hold them (whole chunks: only a whole chunk can be checked)."""
        entry = self._entry(name)
        if offset < 0 or length < 0 or offset + length > entry.size:
            raise StorageError(f"{self._where()}: range {offset}+{length} outside {name}")
        starts = self._offsets.get(name)
        if starts is None:
            starts, pos = [], 0
            for ref in entry.chunks:
                starts.append(pos)
                pos += ref.size
            self._offsets[name] = starts
        out = bytearray()
        index = bisect.bisect_right(starts, offset) - 1
        while len(out) < length:
            chunk = self.read_chunk(entry.chunks[index])
            skip = offset + len(out) - starts[index]
            out += chunk[skip : skip + length - len(out)]
            index += 1
        return bytes(out)

    def check_download(
        self, directory: Path, *, skip: Collection[str] = (), allowed: Collection[str] | None
    ) -> None:
        """Before a byte is fetched: every file is one an image has (``allowed``) and
        the files to write fit in ``directory``'s filesystem, leaving FREE_RESERVE."""
        files = self.manifest.files
        if allowed is not None:
            unknown = sorted(set(files) - set(allowed))
            if unknown:
                raise ManifestError(
                    f"{self._where()}: the manifest lists {len(unknown)} file(s) that no"
                    f" image has ({unknown[0]!r}...); refused before downloading anything"
                )
        need = sum(entry.size for name, entry in files.items() if name not in skip)
        where = Path(directory)
        while not where.exists() and where != where.parent:
            where = where.parent
        fs = os.statvfs(where)
        free = fs.f_bavail * fs.f_frsize
        if need + FREE_RESERVE > free:
            raise StorageError(
                f"{self._where()}: its files are {need} bytes and {where} has {free} bytes"
                f" free (keeping {FREE_RESERVE}); refused before downloading anything:"
                " free space, or check the image"
            )

    def download(
        self,
        directory: Path,
        *,
        skip: Collection[str] = (),
        fetch: Callable[[ChunkRef], bytes] | None = None,
        allowed: Collection[str] | None = None,
    ) -> None:
        """Write every file but ``skip`` into ``directory`` (created; must not hold them
        yet), each chunk read by ``fetch`` (default: :meth:`read_chunk`); refused before
        anything is fetched by :meth:`check_download`."""
        directory = Path(directory)
        self.check_download(directory, skip=skip, allowed=allowed)
        directory.mkdir(parents=True, exist_ok=True)
        for name in self.manifest.files:
            if name in skip:
                continue
            try:
                out = open(directory / name, "xb")  # noqa: SIM115
            except FileExistsError:
                raise StorageError(
                    f"{directory / name} exists; download into an empty directory"
                ) from None
            with out:
                for data in self.iter_file(name, fetch=fetch):
                    out.write(data)
