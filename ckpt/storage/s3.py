"""The S3 store, on obstore (Rust's object_store).

Why obstore and not boto3: a fresh process imports obstore and builds a client several
times faster than boto3, and every ``ckpt restore`` from a bucket pays that start-up in
a new sandbox process.  Chunked images use small PUTs and GETs and a lazy restore uses
range GETs; on those the two clients are even or obstore is ahead.  boto3 is ahead on
one large GET, which ckpt does not make.  Both refuse ``If-None-Match: *`` when the
object exists (in obstore, ``mode="create"``).  obstore has no bucket calls; ckpt never
creates buckets.  ``python3 -m ckpt.bench.s3clients`` measures the two side by side
(figures in docs/performance-history.md).

Settings come from the standard AWS variables only (:meth:`S3Settings.from_env`).
Every request has a deadline: connect within CONNECT_TIMEOUT, each request within
REQUEST_TIMEOUT, retries of transient errors stop after RETRY_TIMEOUT.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ckpt.storage.errors import (
    BadStoreURL,
    NoSuchBucket,
    ObjectExists,
    ObjectMissing,
    StorageError,
    StoreAuthError,
    StoreServerError,
    StoreUnreachable,
)
from ckpt.storage.store import ObjectInfo, check_key

CONNECT_TIMEOUT = "5s"
REQUEST_TIMEOUT = "60s"  # one request: a 512 KiB chunk at a slow 100 KB/s still fits
RETRY_TIMEOUT = datetime.timedelta(seconds=15)
MAX_RETRIES = 3
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True, slots=True)
class S3Settings:
    """Where an S3 store is and how to sign for it."""

    bucket: str
    prefix: str  # "" or without leading/trailing "/"
    endpoint: str | None  # None: AWS's own https endpoint for the region
    access_key: str
    secret_key: str
    region: str
    session_token: str | None = None

    @classmethod
    def from_env(cls, url: str, env: dict[str, str] | None = None) -> S3Settings:
        """Parse ``s3://BUCKET[/PREFIX]`` and read AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
        AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and AWS_REGION.  Plain http is used
        only when AWS_ENDPOINT_URL itself says ``http://``."""
        env = dict(os.environ) if env is None else env
        bucket, prefix = parse_s3_url(url)
        endpoint = env.get("AWS_ENDPOINT_URL") or None
        if endpoint is not None:
            parts = urlsplit(endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise BadStoreURL(
                    f"AWS_ENDPOINT_URL={endpoint!r}: use http://HOST[:PORT] or https://HOST[:PORT]"
                )
            endpoint = endpoint.rstrip("/")
        access = env.get("AWS_ACCESS_KEY_ID", "")
        secret = env.get("AWS_SECRET_ACCESS_KEY", "")
        if not access or not secret:
            raise BadStoreURL(f"{url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        token = env.get("AWS_SESSION_TOKEN") or None
        return cls(bucket, prefix, endpoint, access, secret, region, token)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://BUCKET/PRE/FIX`` -> ("BUCKET", "PRE/FIX"), checked."""
    if not url.startswith("s3://"):
        raise BadStoreURL(f"{url}: not an s3:// URL")
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if not (3 <= len(bucket) <= 63) or not all(c.isalnum() or c in ".-" for c in bucket):
        raise BadStoreURL(f"{url}: bad bucket name {bucket!r} (3-63 of a-z 0-9 . -)")
    prefix = prefix.strip("/")
    if prefix:
        try:
            check_key(prefix)
        except StorageError:
            raise BadStoreURL(f"{url}: bad prefix {prefix!r}") from None
    return bucket, prefix


def _error(exc: Exception, url: str, key: str) -> StorageError:
    """One line for an obstore error: what failed and what to do."""
    from obstore import exceptions as ox

    text = str(exc)
    where = f"{url}/{key}" if key else url
    if "NoSuchBucket" in text:
        return NoSuchBucket(f"{url}: no such bucket; create it or fix the URL")
    if isinstance(exc, ox.AlreadyExistsError | ox.PreconditionError):
        return ObjectExists(f"{where} already exists")
    auth_codes = ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "403 Forbidden")
    if isinstance(exc, ox.PermissionDeniedError | ox.UnauthenticatedError) or any(
        code in text for code in auth_codes
    ):
        return StoreAuthError(
            f"{url}: the store refused the credentials; check AWS_ACCESS_KEY_ID and"
            " AWS_SECRET_ACCESS_KEY"
        )
    if isinstance(exc, ox.NotFoundError | FileNotFoundError):
        return ObjectMissing(f"{where} does not exist")
    if "error sending request" in text or "timed out" in text or "Timeout" in text:
        return StoreUnreachable(
            f"{url}: the store did not answer (endpoint down or unreachable); check"
            " AWS_ENDPOINT_URL and the network"
        )
    status = re.search(r"status code: (5\d\d)", text)
    if status:
        return StoreServerError(
            f"{where}: the store failed to serve it (HTTP {status.group(1)}); check the"
            " store's servers (one may be down) and retry"
        )
    first = text.splitlines()[0] if text else type(exc).__name__
    return StorageError(f"{where}: {first[:200]}")


class S3Store:
    """A store in ``BUCKET/PREFIX`` of an S3 endpoint; thread-safe (one client shared by
    every worker thread)."""

    def __init__(self, settings: S3Settings) -> None:
        from obstore.store import S3Store as _S3Store

        self.settings = settings
        self.url = settings.url
        config: dict[str, Any] = {
            "access_key_id": settings.access_key,
            "secret_access_key": settings.secret_key,
            "region": settings.region,
        }
        if settings.session_token:
            config["session_token"] = settings.session_token
        if settings.endpoint:
            config["endpoint"] = settings.endpoint
        client: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT, "timeout": REQUEST_TIMEOUT}
        if settings.endpoint and settings.endpoint.startswith("http://"):
            client["allow_http"] = True
        self._store = _S3Store(
            settings.bucket,
            prefix=settings.prefix or None,
            client_options=client,
            conditional_put="etag",  # swap: PUT with If-Match
            retry_config={"max_retries": MAX_RETRIES, "retry_timeout": RETRY_TIMEOUT},
            **config,
        )

    @classmethod
    def from_url(cls, url: str, env: dict[str, str] | None = None) -> S3Store:
        return cls(S3Settings.from_env(url, env))

    def check(self) -> None:
        """Raise the one-line error for a store that cannot be used: unreachable, wrong
        credentials, no such bucket.  (SeaweedFS creates a bucket on a PUT to it, so the
        check lists instead.)"""
        import obstore

        try:
            next(iter(obstore.list(self._store, None, chunk_size=1)), None)
        except Exception as exc:
            raise _error(exc, self.url, "") from None

    def put(self, key: str, data: bytes | memoryview) -> None:
        import obstore

        try:
            obstore.put(self._store, check_key(key), data, use_multipart=False)
        except Exception as exc:
            raise _error(exc, self.url, key) from None

    def create(self, key: str, data: bytes | memoryview) -> None:
        import obstore

        try:
            obstore.put(self._store, check_key(key), data, mode="create", use_multipart=False)
        except Exception as exc:
            raise _error(exc, self.url, key) from None

    def swap(self, key: str, data: bytes | memoryview, etag: str) -> None:
        import obstore

        try:
            obstore.put(
                self._store, check_key(key), data, mode={"e_tag": etag}, use_multipart=False
            )
        except Exception as exc:
            raise _error(exc, self.url, key) from None

    def get(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        import obstore

        try:
            if start == 0 and length is None:
                return obstore.get(self._store, check_key(key)).bytes().to_bytes()
            if length == 0:
                return b""
            if length is None:
                info = self.head(key)
                if info is None:
                    raise ObjectMissing(f"{self.url}/{key} does not exist")
                length = info.size - start
                if length <= 0:
                    return b""
            return obstore.get_range(
                self._store, check_key(key), start=start, length=length
            ).to_bytes()
        except StorageError:
            raise
        except Exception as exc:
            raise _error(exc, self.url, key) from None

    def head(self, key: str) -> ObjectInfo | None:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            meta = obstore.head(self._store, check_key(key))
        except (NotFoundError, FileNotFoundError) as exc:
            if "NoSuchBucket" in str(exc):
                raise _error(exc, self.url, key) from None
            return None
        except Exception as exc:
            raise _error(exc, self.url, key) from None
        return ObjectInfo(
            key, meta["size"], meta["last_modified"].timestamp(), meta.get("e_tag") or None
        )

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        import obstore

        try:
            for batch in obstore.list(self._store, prefix.rstrip("/") or None, chunk_size=1000):
                for meta in batch:
                    yield ObjectInfo(meta["path"], meta["size"], meta["last_modified"].timestamp())
        except Exception as exc:
            raise _error(exc, self.url, prefix) from None

    def children(self, prefix: str) -> list[str]:
        import obstore

        try:
            result = obstore.list_with_delimiter(self._store, prefix.rstrip("/") or None)
        except Exception as exc:
            raise _error(exc, self.url, prefix) from None
        return [p.rstrip("/").rsplit("/", 1)[-1] for p in result["common_prefixes"]]

    def delete(self, key: str) -> None:
        import obstore

        try:
            obstore.delete(self._store, check_key(key))
        except Exception as exc:
            err = _error(exc, self.url, key)
            if not isinstance(err, ObjectMissing):
                raise err from None
