"""Build the ``ckpt inspect statefile`` report as plain, JSON-able data (no printing).

The report reads the stream's own type table and records through
``state.inspect_stream``; it never imports or instantiates kernel classes, so it works on
an image written by another version of ckpt.  Integrity problems are reported in the
``integrity`` section (``ok: false``) instead of hiding everything else; a file that is
not a statefile at all raises ``StatefileError``.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from ckpt.errors import CkptError, IntegrityError, StatefileError
from ckpt.statefile.image_reader import Image, open_image, open_image_unverified

MAX_VALUE_CHARS = 200  # longer plain values are cut in the objects listing


def _inspect_stream() -> Any | None:
    """``state.inspect_stream`` if the state engine provides it (else None)."""
    try:
        from ckpt.state import inspect_stream
    except ImportError:
        return None
    return inspect_stream


def jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON-able rendering of a decoded field value; references become ``→#id``."""
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            return value[:MAX_VALUE_CHARS] + "…"
        return value
    if depth > 8:
        return "…"
    if isinstance(value, bytes | bytearray | memoryview):
        b = bytes(value)
        text = b[: MAX_VALUE_CHARS // 2].hex()
        return f"<{len(b)} bytes {text}{'…' if len(b) > MAX_VALUE_CHARS // 2 else ''}>"
    t = type(value)
    if t is dict:
        return {str(jsonable(k, depth + 1)): jsonable(v, depth + 1) for k, v in value.items()}
    if t in (list, tuple, set, frozenset):
        return [jsonable(v, depth + 1) for v in value]
    # state.Ref renders as →#id; value types (datetime, Decimal, OrderedDict, deque,
    # Counter, ...) as their repr, which names the type.
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…"


def _header(image: Image) -> dict[str, Any]:
    h = image.header
    return {
        "path": str(image.statefile),
        "format_version": h.version,
        "keyed": h.keyed,
        "compression": h.compression,
        "chunk_size": h.chunk_size,
        "chunks": h.chunk_count,
        "stream_bytes": h.stream_len,
        "file_bytes": h.file_size,
        "image_id": h.image_id.hex(),
        "encryption": f"aes-256-gcm (key id {h.key_id})" if h.encrypted else "none",
    }


def inspect_image(
    path: str | os.PathLike[str],
    key: bytes | None = None,
    *,
    objects: int = 0,
    verify: bool = False,
) -> dict[str, Any]:
    """Everything ``ckpt inspect statefile`` shows, as a dict.

    Keys: ``header``, ``metadata``, ``integrity``, ``types``, ``pages``, ``objects``,
    ``stream``.  ``integrity.ok`` is True (verified), False (a check failed; ``detail``
    says which) or None (signed image, no key given: nothing could be verified).
    """
    # Structure first: a non-statefile fails here with a one-line StatefileError.
    unverified = open_image_unverified(path)
    if unverified.header.encrypted:
        # Without the key (or with another) nothing of it is shown: the one-line
        # refusal names the image's key id.
        unverified = open_image(path, key)
    keyed = unverified.header.keyed
    integrity: dict[str, Any] = {
        "algorithm": unverified.integrity,
        "keyed": keyed,
        "checked": False,
        "ok": None,
        "detail": "",
    }
    report: dict[str, Any] = {
        "header": _header(unverified),
        "metadata": unverified.metadata,
        "integrity": integrity,
        "types": None,
        "pages": None,
        "objects": [],
        "stream": {"available": False, "decoded": False, "verified": False, "error": None},
        # What --verify asked for and whether it was done: a signed image read without
        # its key is decoded and its page map checked, but never reported verified.
        "verify": {"requested": verify, "complete": False, "detail": ""},
    }
    image = unverified
    if keyed and key is None:
        integrity["detail"] = "signed with HMAC-SHA256; pass --key-file to verify it"
        if verify:
            report["verify"]["detail"] = "the image is signed: pass --key-file to verify it"
    else:
        integrity["checked"] = True
        try:
            image = open_image(path, key)
        except IntegrityError as exc:
            integrity.update(ok=False, detail=str(exc))
            return report
        report["metadata"] = image.metadata

    try:
        data = image.read_state()
    except StatefileError as exc:
        integrity.update(ok=False, detail=str(exc))
        return report
    if integrity["checked"]:
        integrity.update(ok=True, detail=f"header, metadata and {image.header.chunk_count} chunks")

    if image.metadata.get("kind") == "pre-dump":
        report["stream"]["note"] = "a pre-dump: memory pages only, no kernel state"
    else:
        _describe_stream(report, data, objects=objects, verify=verify)
    _describe_pages(report, image, verify=verify)
    _describe_chain(report, image, key, verify=verify)
    if verify and integrity["ok"] is True and not report_failed(report):
        report["verify"].update(complete=True, detail="integrity, every record and every page")
    return report


def _describe_chain(report: dict[str, Any], image: Image, key: Any, *, verify: bool) -> None:
    """The images this one's pages depend on (``chain.py``), each checked as far as the
    key allows; a broken link fails the report."""
    if image.metadata.get("parent") is None:
        return
    from ckpt.statefile import chain

    report["chain"] = entries = chain.describe(image, key, verify=verify)
    broken = [e["error"] for e in entries if "error" in e]
    if broken and report["integrity"]["checked"]:
        report["integrity"].update(ok=False, detail=broken[0])


def _describe_stream(report: dict[str, Any], data: bytes, *, objects: int, verify: bool) -> None:
    stream = report["stream"]
    inspect_stream = _inspect_stream()
    if inspect_stream is None:
        stream["error"] = "this ckpt's state engine cannot inspect streams (no inspect_stream)"
        return
    stream["available"] = True
    try:
        view = inspect_stream(data)
        stream.update(
            decoded=True,
            version=getattr(view, "version", None),
            engine=getattr(view, "engine", None),
            root=getattr(view, "root", None),
        )
        report["types"] = [
            {"name": t.name, "fields": list(t.fields), "count": t.count, "bytes": t.nbytes}
            for t in view.types
        ]
        report["objects"] = [
            {"id": o.id, "type": o.type, "fields": jsonable(o.fields)}
            for o in itertools.islice(view.objects(), max(objects, 0))
        ]
        if verify:
            view.verify()
            stream["verified"] = True
    except CkptError as exc:
        stream["error"] = str(exc)


def _describe_pages(report: dict[str, Any], image: Image, *, verify: bool) -> None:
    integrity = report["integrity"]
    try:
        meta = image.pages_meta()
        pages: dict[str, Any] = meta.summary.as_dict()
        pages["compression"] = meta.compression
        pages["verified"] = False
        if verify:  # every page is read; tags are checked only with what verifies them
            image.check_pages()
            pages["verified"] = bool(integrity["checked"])
        report["pages"] = pages
    except StatefileError as exc:
        report["pages"] = {"error": str(exc)}
        if integrity["checked"]:
            integrity.update(ok=False, detail=str(exc))


def report_failed(report: dict[str, Any]) -> bool:
    """Whether the report records a failure the CLI should exit non-zero for."""
    wanted = report.get("verify", {})
    return (
        report["integrity"]["ok"] is False
        or bool(wanted.get("requested") and wanted.get("detail") and not wanted.get("complete"))
        or bool(report["stream"]["error"] and report["stream"]["available"])
        or bool(report["pages"] and "error" in report["pages"])
        or any("error" in e for e in report.get("chain") or ())
    )
