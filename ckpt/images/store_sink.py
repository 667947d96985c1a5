"""An image written straight into an object store: the same ``ImageWriter`` (statefile
chunks, page runs, trailer and page map, byte for byte as in a directory), with its
files going into an :class:`ckpt.storage.upload.ImageUpload` instead of a temporary
directory.

Nothing is staged on disk.  Each file is cut into 512 KiB content-addressed chunks as
it is written, and the chunks the store lacks are PUT by the upload's threads while
the writer goes on.  Memory is bounded by the upload: at most ``2 x parallel`` chunks
queued or in flight plus one partial chunk per open file (16 MiB + 1.5 MiB with 16
threads), on top of the statefile writers' own compression window.  Visibility is the
manifest's conditional create (``--force``: its replacement), made only at commit:
an upload that fails or is killed leaves no image.

Encrypted (``encrypt``, into a sealed repository): the files are written as an unkeyed
image and the upload seals each chunk convergently (ckpt/storage/sealing.py), so an
unchanged chunk is the same object in the next checkpoint under the key; the statefile's
own per-image encryption would make every chunk differ.
"""

from __future__ import annotations

import contextlib
from typing import Any, BinaryIO

from ckpt.errors import CkptError
from ckpt.statefile.format import PAGES_IMG, PAGES_META_IMG
from ckpt.statefile.image import ImageWriter
from ckpt.storage.repository import Repository
from ckpt.storage.upload import ChunkWriter, ImageUpload


class _Sink:
    """A ChunkWriter as the writers see a file: ``write`` and ``tell`` (the trailer
    records where it starts); there is nothing to flush or fsync."""

    def __init__(self, writer: ChunkWriter, *, cut_after_first: bool = False) -> None:
        self.writer = writer
        self._cut = cut_after_first

    def write(self, data: Any) -> int:
        n = self.writer.write(data)
        if self._cut:  # the header, with the image's ID: a chunk of its own
            self._cut = False
            self.writer.cut()
        return n

    def tell(self) -> int:
        return self.writer.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.writer.close()


class StoreImageWriter(ImageWriter):
    """``ImageWriter`` whose files go to image ``name`` of ``repo`` (see module doc)."""

    def __init__(
        self,
        repo: Repository,
        name: str,
        *,
        sandbox_id: str,
        parent: str | None = None,
        parent_id: str | None = None,
        started: ImageUpload | None = None,
        parallel: int | None = None,
        **options: Any,
    ) -> None:
        self.url = repo.image_url(name)
        if options.pop("encrypt", False):
            if not repo.sealed:
                raise ValueError("an encrypted store image needs a sealed repository")
            options["key"] = None  # the chunks' seal authenticates every byte
        elif repo.sealed:
            raise ValueError("a sealed repository writes encrypted images only")
        super().__init__(self.url, **options)
        self.path = self.url  # type: ignore[assignment]
        self._repo = repo
        self._name = name
        self._sandbox_id = sandbox_id
        self._parent = parent  # the parent image's name, in the same repository
        self._parent_id = parent_id  # its manifest's id, when already read
        self._parallel = parallel
        self.upload: ImageUpload | None = None
        self._started = started  # an upload of this image started before the freeze

    def _prepare(self) -> None:
        """Check the store and the target, and take the upload lease (or take the
        upload that was started so before the sandbox froze)."""
        if self._started is not None:
            self.upload, self._started = self._started, None
            return
        extra = {} if self._parallel is None else {"parallel": self._parallel}
        upload = self._repo.upload(
            self._name,
            sandbox_id=self._sandbox_id,
            parent=self._parent,
            parent_id=self._parent_id,
            force=self.force,
            **extra,
        )
        upload.start()
        self.upload = upload

    def _new_file(self, name: str) -> BinaryIO:
        assert self.upload is not None
        # pages.img starts with a header naming the image; the page runs after it are
        # the same bytes in the next checkpoint of unchanged memory, so they must not
        # share a chunk with it: a chunk holding the header would differ every time
        # and shift every content-defined chunk boundary after it.
        return _Sink(self.upload.open(name), cut_after_first=name == PAGES_IMG)  # type: ignore[return-value]

    def _write_whole(self, name: str, data: bytes) -> None:
        assert self.upload is not None
        self.upload.add_file(name, data)

    def _publish(self, pages_meta: bytes) -> None:
        """Close the streams, add the page map, then write the manifest (last)."""
        assert self.upload is not None and self._state_f and self._pages_f
        self._state_f.close()
        self._pages_f.close()
        self.upload.add_file(PAGES_META_IMG, pages_meta)
        self.upload.commit()

    def _discard(self) -> None:
        """Abort the upload (no manifest).  A store that is gone cannot have its lease
        removed either; the lease expires by itself, and the first error is the one
        worth reporting, so a failure here is not raised over it."""
        if self.upload is not None:
            with contextlib.suppress(CkptError):
                self.upload.abort()
