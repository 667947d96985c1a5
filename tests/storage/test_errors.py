"""One-line errors for what a user gets wrong: credentials, bucket, endpoint, URL."""

from __future__ import annotations

import socket

import pytest

from ckpt.storage.errors import (
    BadStoreURL,
    NoSuchBucket,
    StoreAuthError,
    StoreUnreachable,
)
from ckpt.storage.repository import Repository, split_image_url
from ckpt.storage.s3 import S3Settings, S3Store
from ckpt.storage.store import LocalStore, open_store


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text, text
    return text


@pytest.mark.slow
def test_wrong_credentials(s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    store = open_store(s3_url)
    with pytest.raises(StoreAuthError) as err:
        store.check()
    assert "AWS_SECRET_ACCESS_KEY" in one_line(err.value)
    with pytest.raises(StoreAuthError):
        store.put("x", b"x")
    with pytest.raises(StoreAuthError):
        Repository(store).upload("img", sandbox_id="s").start()


@pytest.mark.slow
def test_no_such_bucket(s3_env: dict[str, str]) -> None:
    store = open_store("s3://ckpt-no-such-bucket/prefix")
    with pytest.raises(NoSuchBucket) as err:
        store.check()
    assert "no such bucket" in one_line(err.value)
    with pytest.raises(NoSuchBucket):
        store.get("x")
    with pytest.raises(NoSuchBucket):
        Repository(store).upload("img", sandbox_id="s").start()


@pytest.mark.slow
def test_unreachable_store_fails_within_its_deadline(s3_env: dict[str, str]) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**s3_env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    store = S3Store.from_url("s3://ckpt-tests/x", env)
    with pytest.raises(StoreUnreachable) as err:
        store.check()
    assert "AWS_ENDPOINT_URL" in one_line(err.value)


@pytest.mark.parametrize(
    ("url", "env", "words"),
    [
        ("s3://ab/x", {}, "bad bucket name"),
        ("s3://bucket_with_underscore", {}, "bad bucket name"),
        ("s3://bucket/x", {"AWS_ACCESS_KEY_ID": ""}, "AWS_ACCESS_KEY_ID"),
        ("s3://bucket/x", {"AWS_ENDPOINT_URL": "ftp://host"}, "AWS_ENDPOINT_URL"),
        ("s3://bucket/a/../b", {}, "bad prefix"),
    ],
)
def test_bad_urls_and_settings(url: str, env: dict[str, str], words: str) -> None:
    base = {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"}
    with pytest.raises(BadStoreURL) as err:
        S3Settings.from_env(url, {**base, **env})
    assert words in one_line(err.value)


def test_plain_http_only_when_the_endpoint_says_so() -> None:
    base = {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"}
    aws = S3Settings.from_env("s3://bucket/p", base)
    assert aws.endpoint is None and aws.region == "us-east-1" and aws.prefix == "p"
    https = S3Settings.from_env("s3://bucket", {**base, "AWS_ENDPOINT_URL": "https://h:9/"})
    assert https.endpoint == "https://h:9"
    assert S3Store(https)._store is not None
    assert S3Store(aws)._store is not None


def test_other_schemes_and_image_urls(tmp_path: object) -> None:
    with pytest.raises(BadStoreURL):
        open_store("gs://bucket/x")
    assert isinstance(open_store(f"file://{tmp_path}"), LocalStore)
    assert split_image_url("s3://bucket/team/img1") == ("s3://bucket/team", "img1")
    assert split_image_url("/srv/images/a.b-c") == ("/srv/images", "a.b-c")
    repo, name = Repository.for_image(f"{tmp_path}/repo/img")
    assert name == "img" and repo.image_url(name) == f"{tmp_path}/repo/img"
    for bad in ("s3://bucket", "img", "s3://bucket/.chunks", "/srv/x y"):
        with pytest.raises(BadStoreURL):
            split_image_url(bad)


def test_import_stays_lazy() -> None:
    """Opening a local store or importing the package never imports the S3 client."""
    import subprocess
    import sys

    code = (
        "import sys, ckpt.storage.repository, ckpt.storage.store as s; "
        "s.open_store('/tmp'); assert 'obstore' not in sys.modules, 'obstore imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
