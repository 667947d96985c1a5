"""``Location.parse``: the one place where the text of an image path is looked at."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckpt.errors import CkptError
from ckpt.images import BadLocation, Location


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("/srv/images/a", "/srv/images/a"),
        ("/srv/images/a/", "/srv/images/a"),
        ("file:///srv/images/a", "/srv/images/a"),
        ("file://localhost/srv/images/a", "/srv/images/a"),
        ("FILE:///srv/x", "/srv/x"),
        ("file:///srv/../srv/x", "/srv/x"),
        ("./weird:name", None),  # a colon without // is a file name, not a scheme
    ],
)
def test_local_forms(text: str, path: str | None) -> None:
    where = Location.parse(text)
    assert where.is_local and not where.in_store and where.url is None
    assert where.path == Path(path if path is not None else os.path.abspath(text))
    assert str(where) == str(where.path)


def test_relative_path_is_made_absolute_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    where = Location.parse("imgs/one")
    assert where.path == tmp_path / "imgs" / "one"
    monkeypatch.chdir("/")
    assert Location.parse(str(where)) == where  # the wire's string means the same place


@pytest.mark.parametrize(
    ("text", "url", "name"),
    [
        ("s3://bucket/prefix/img", "s3://bucket/prefix/img", "img"),
        ("s3://bucket/prefix/img/", "s3://bucket/prefix/img", "img"),
        ("S3://bucket/a/b/img", "s3://bucket/a/b/img", "img"),
    ],
)
def test_store_forms(text: str, url: str, name: str) -> None:
    where = Location.parse(text)
    assert where.in_store and not where.is_local and where.path is None
    assert where.url == url and str(where) == url and where.name == name
    assert where.parent == Location(url=url.rsplit("/", 1)[0])
    assert where.sibling("other") == Location(url=url.rsplit("/", 1)[0] + "/other")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "empty image path"),
        ("   ", "empty image path"),
        ("http://host/x", "unsupported scheme http://"),
        ("gs://bucket/x", "unsupported scheme gs://"),
        ("s3://", "name a bucket"),
        ("s3:///prefix/img", "name a bucket"),
        ("file://otherhost/x", "names a local directory"),
        ("file://", "names a local directory"),
        ("/a\0b", "NUL"),
    ],
)
def test_bad_forms_are_one_line_errors(text: str, said: str) -> None:
    with pytest.raises(BadLocation) as info:
        Location.parse(text)
    assert isinstance(info.value, CkptError)
    message = str(info.value)
    assert said in message and "\n" not in message


def test_a_store_url_never_becomes_a_path() -> None:
    where = Location.parse("s3://bucket/p/img")
    assert Location.parse(str(where)) == where and where.path is None  # as it travels
    assert where.parent.path is None and where.sibling("y").path is None
    assert Location.of(where) is where


def test_same_place() -> None:
    a, b = Location.parse("s3://b1/p/x"), Location.parse("s3://b1/p/y")
    assert a.same_place(b)
    assert not a.same_place(Location.parse("s3://b1/q/y"))
    assert not a.same_place(Location.parse("/tmp/y"))
    assert Location.parse("/tmp/x").same_place(Location.parse("/var/y"))


def test_store_image_needs_a_name_for_its_parent() -> None:
    with pytest.raises(BadLocation):
        _ = Location.parse("s3://bucket").parent


def test_neither_or_both_is_a_bug() -> None:
    with pytest.raises(ValueError):
        Location()
    with pytest.raises(ValueError):
        Location(path=Path("/x"), url="s3://b/x")
