"""The Store interface, on the real S3 server and on a local directory alike."""

from __future__ import annotations

import pytest

from ckpt.storage.errors import ObjectExists, ObjectMissing, StorageError
from ckpt.storage.store import open_store


def test_put_get_range_head_list_delete(repo_url: str) -> None:
    store = open_store(repo_url)
    store.check()
    store.put("a/one", b"0123456789")
    store.put("a/two", b"xy")
    store.put("b/three", b"z")
    assert store.get("a/one") == b"0123456789"
    assert store.get("a/one", 3, 4) == b"3456"
    assert store.get("a/one", 7) == b"789"
    info = store.head("a/one")
    assert info is not None and info.size == 10 and info.modified > 0
    assert store.head("a/none") is None
    assert sorted(i.key for i in store.list("a/")) == ["a/one", "a/two"]
    assert sorted(i.key for i in store.list("")) == ["a/one", "a/two", "b/three"]
    store.put("a/one", b"new")
    assert store.get("a/one") == b"new"
    store.delete("a/one")
    store.delete("a/one")  # absent: not an error
    assert store.head("a/one") is None


def test_create_refuses_an_existing_object(repo_url: str) -> None:
    store = open_store(repo_url)
    store.create("m", b"first")
    with pytest.raises(ObjectExists):
        store.create("m", b"second")
    assert store.get("m") == b"first"


def test_missing_object_is_one_line(repo_url: str) -> None:
    store = open_store(repo_url)
    store.check()
    with pytest.raises(ObjectMissing) as err:
        store.get("nothing/here")
    assert "\n" not in str(err.value) and "nothing/here" in str(err.value)


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "./a"])
def test_bad_keys_are_refused(repo_url: str, key: str) -> None:
    with pytest.raises(StorageError):
        open_store(repo_url).put(key, b"x")
