"""Errors of the storage layer: each one line that says what to do."""

from __future__ import annotations

from ckpt.errors import (
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    CkptError,
    ImageExistsError,
    IntegrityError,
)


class StorageError(CkptError):
    """A store cannot be reached, read or written."""


class BadStoreURL(StorageError):
    """An image URL or its AWS settings cannot be used."""


class StoreAuthError(StorageError):
    """The store refused the credentials (wrong key, or not allowed)."""


class NoSuchBucket(StorageError):
    """The bucket named in the URL does not exist."""

    exit_code = EXIT_NOT_FOUND


class StoreUnreachable(StorageError):
    """The store did not answer within the deadline."""


class StoreServerError(StorageError):
    """The store answered with a 5xx: it is up but cannot serve the object now."""


class ObjectMissing(StorageError):
    """An object (a manifest or a chunk) is not in the store."""

    exit_code = EXIT_NOT_FOUND


class ObjectExists(StorageError):
    """A create-if-absent found the object already there."""


class StoreBusy(StorageError):
    """Another ckpt holds a lease that excludes this operation (upload against prune)."""


class ImageExists(StorageError, ImageExistsError):
    """The image URL already holds a manifest (use --force to replace it)."""


class ChunkIntegrityError(StorageError, IntegrityError):
    """A chunk or a manifest does not match its hash or HMAC: tampered or corrupt."""


class ImageInUse(StorageError):
    """Another image names this one as its parent (use --force to remove it anyway)."""

    exit_code = EXIT_REFUSED


class ImageChanged(StorageError):
    """An image (or the parent an upload names) changed while the upload ran: another
    writer got there first, and this upload wrote nothing."""
