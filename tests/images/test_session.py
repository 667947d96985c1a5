"""``ImageSession``: what the sandbox host keeps between the steps of one checkpoint of
an object-store image (the store, the upload started before the freeze, the parent's
manifest id), held by the host instead of module globals.  Its store is a repository
in a local directory here; the storage tests run the same steps against SeaweedFS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ckpt.images.store_sink import StoreImageWriter
from ckpt.sandbox.host.remote_image import ImageSession, location_of
from ckpt.statefile import ImageWriter
from ckpt.statefile.format import PAGE_SIZE
from ckpt.storage.lease import PREFIX as LEASES
from ckpt.storage.store import LocalStore

REPO = "s3://bucket/repo"
META = {"sandbox_id": "sb"}


@pytest.fixture
def session(tmp_path: Path) -> ImageSession:
    s = ImageSession()
    store = LocalStore(tmp_path / "store")
    s.store = lambda params: (store, location_of(params).name)  # type: ignore[method-assign]
    return s


def _write(w: Any) -> None:
    with w as img:
        img.write_pages([(0, b"\x05" * PAGE_SIZE)])


def test_a_checkpoint_into_a_store_uses_what_was_prepared(session: ImageSession) -> None:
    _write(session.image_writer({"image": f"{REPO}/p"}, metadata=META))
    child = {"image": f"{REPO}/c", "parent": f"{REPO}/p", "force": False}
    with session.parent_image(child, None) as (_, name, url):
        assert (name, url) == ("p", f"{REPO}/p")
    parent_id = session.parent_ids[f"{REPO}/p"]
    session.prepare(child, "sb")  # before the freeze: the upload and its lease
    prepared = session.prepared[f"{REPO}/c"][0]
    w = session.image_writer(child, metadata=META)
    assert isinstance(w, StoreImageWriter)
    assert w._started is prepared and w._parent_id == parent_id and w._parent == "p"
    assert session.prepared == {} and session.parent_ids == {}  # taken, not kept
    _write(w)
    repo, _ = session.open_repository(child, None)
    assert {i.name: i.parent for i in repo.images()} == {"p": None, "c": "p"}


def test_an_upload_prepared_for_another_sandbox_is_not_taken(session: ImageSession) -> None:
    params = {"image": f"{REPO}/x"}
    session.prepare(params, "other")
    w = session.image_writer(params, metadata=META)
    assert w._started is None  # aborted: its lease was another sandbox's
    _write(w)


def test_discard_ends_an_upload_no_writer_took(session: ImageSession, tmp_path: Path) -> None:
    params = {"image": f"{REPO}/y"}
    store, _ = session.store(params)
    session.prepare(params, "sb")
    assert list(store.list(LEASES))  # the upload holds its lease
    session.discard_prepared()
    assert session.prepared == {} and list(store.list(LEASES)) == []  # gone at once
    _write(session.image_writer(params, metadata=META))  # no lease is left in the way


def test_a_local_image_touches_no_store(tmp_path: Path) -> None:
    s = ImageSession()
    params = {"image": str(tmp_path / "img")}
    s.prepare(params, "sb")
    s.begin_restore(params, None)
    assert s.prepared == {} and s.early is None and s.warm == {}
    w = s.image_writer(params, metadata=META)
    assert type(w) is ImageWriter
    _write(w)
    image, staged = s.open_for_restore(params, None)
    assert staged is None and image.metadata["sandbox_id"] == "sb"


def test_sessions_share_nothing(session: ImageSession) -> None:
    session.prepare({"image": f"{REPO}/z"}, "sb")
    assert ImageSession().prepared == {}
    session.discard_prepared()
