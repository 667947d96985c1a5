"""A streaming verb on the control socket: the frames of an image come before the
reply line and reach ``on_event`` one by one; a handler that fails before its first
frame, or in the middle of the image, is re-raised by class with no end event; a
reader that gives up breaks the handler's writes (more than a socket buffer holds)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ckpt.errors import IntegrityError, SandboxError
from ckpt.images.pagexfer import PageRun, StreamEnd, StreamImage
from ckpt.sandbox.wire import protocol as p
from ckpt.sandbox.wire import rpc

PAGES = [(i, bytes([1 + i]) * 4096) for i in range(40)]
BIG = [(i, os.urandom(4096)) for i in range(2048)]  # 8 MiB that does not compress


@pytest.fixture
def server(tmp_path: Path, watchdog):  # type: ignore[no-untyped-def]
    seen: dict[str, BaseException] = {}
    done = threading.Event()

    def send(request: p.SendRequest, write) -> p.CheckpointReply:  # type: ignore[no-untyped-def]
        try:
            if request.after == "refuse":
                raise IntegrityError("refused before any frame")
            with StreamImage(write, metadata={"workload": "kv:1"}) as img:
                img.state_file.write(b"state")
                img.write_pages(iter(BIG if request.after == "big" else PAGES))
                if request.after == "fail":
                    raise SandboxError("the dump failed midway")
            return p.CheckpointReply(checkpoint_ns=1, cpu_usec=0, stopping=False, counters={})
        except BaseException as exc:
            seen["error"] = exc
            raise
        finally:
            done.set()

    srv = rpc.Server(tmp_path / "ctl.sock", {"send": send}, streams=frozenset({"send"}))
    srv.start()
    srv.seen, srv.done = seen, done  # type: ignore[attr-defined]
    yield srv
    srv.close()


def test_the_frames_come_before_the_reply(server: rpc.Server) -> None:
    events: list = []
    reply = rpc.call(server.path, p.SendRequest(pre_dump=False), on_event=events.append)
    assert isinstance(reply, p.CheckpointReply)
    assert events[0] == b"state" and isinstance(events[-1], StreamEnd)
    runs = [e for e in events if isinstance(e, PageRun)]
    assert sum(r.npages for r in runs) == len(PAGES)


@pytest.mark.parametrize(("after", "error"), [("refuse", IntegrityError), ("fail", SandboxError)])
def test_a_failed_handler_is_raised_by_class_without_an_end(
    server: rpc.Server, after: str, error: type
) -> None:
    events: list = []
    with pytest.raises(error):
        rpc.call(server.path, p.SendRequest(after=after), on_event=events.append)
    assert not any(isinstance(e, StreamEnd) for e in events)
    assert bool(events) == (after == "fail")


def test_a_reader_that_gives_up_breaks_the_writes(server: rpc.Server) -> None:
    class GaveUp(Exception):
        pass

    def on_event(event: object) -> None:
        raise GaveUp

    with pytest.raises(GaveUp):
        rpc.call(server.path, p.SendRequest(after="big"), on_event=on_event)
    assert server.done.wait(60)  # type: ignore[attr-defined]
    assert isinstance(server.seen.get("error"), OSError)  # type: ignore[attr-defined]
