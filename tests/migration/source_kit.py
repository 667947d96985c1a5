"""The source's session (``outgoing.Migration``) against fake destinations, in process.

``StandIn`` replaces the sandbox calls the source makes (``lifecycle``'s state, pause,
resume, delete, hang_up; ``send_client.send``; the step hook) with a record of one
sandbox: its status, and real, small images streamed as a sandbox streams them
(``pagexfer.StreamImage``).  A pre-dump's ``pages_written`` and ``dirty_after`` follow
a script of dirty counts.
``FakeDestination`` accepts on a real ``Listener`` and speaks the protocol through the
project's channel and messages: honest by default, and told where to lie, fail or
drop.  No sandbox process is started.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ckpt.errors import SandboxError
from ckpt.images.pagexfer import StreamImage, read_stream
from ckpt.migration import Listener, guard, proof
from ckpt.migration import messages as m
from ckpt.migration.errors import MigrationError
from ckpt.migration.outgoing import Migration, Options
from ckpt.sandbox.client import lifecycle, send_client
from ckpt.statefile import chain

from .conftest import SECRET

SID = "s1"
STATE = b"kernel-state " * 64
ADDRESS = "127.0.0.1:18080"


@dataclass
class StandIn:
    """One sandbox as the source's ``lifecycle`` sees it."""

    pages: int = 40  # allocated pages: the first round writes them all
    dirty: list[int] = field(default_factory=list)  # dirty after each pre-dump round
    status: str = "running"  # running | paused | deleted
    pre_dumps: int = 0
    calls: list[str] = field(default_factory=list)
    hooks: dict[str, Callable[[], None]] = field(default_factory=dict)  # at pause points
    told: list[bytes] = field(default_factory=list)  # what the source told its guard

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("state", "pause", "resume", "delete", "hang_up"):
            monkeypatch.setattr(lifecycle, name, getattr(self, name))
        monkeypatch.setattr(send_client, "send", self.send)
        told = self.told

        class RecordingGuard:
            """The guard, not forked: what it is told is recorded."""

            def __init__(self, workdir: Path, act: Any) -> None:
                self.pid = 0

            def say(self, what: bytes) -> None:
                told.append(what)

            def close(self) -> None:
                told.append(guard.DONE)

        monkeypatch.setattr(guard, "Guard", RecordingGuard)

    def _here(self, verb: str) -> None:
        self.calls.append(verb)
        if self.status == "deleted":
            raise SandboxError(f"no sandbox {SID}: cannot {verb} it")

    def state(self, root: Any, sid: str) -> Any:
        self._here("state")
        return SimpleNamespace(status=self.status, workload="kv:1", engine="", cpu=None, extra={})

    def pause(self, root: Any, sid: str, cgroup: bool = True) -> None:
        self._here("pause")
        self.status = "paused"

    def resume(self, root: Any, sid: str) -> None:
        self._here("resume")
        self.status = "running"

    def delete(self, root: Any, sid: str, force: bool = False) -> None:
        self.calls.append("delete")
        self.status = "deleted"

    def hang_up(self, root: Any, sid: str) -> bool:
        return True

    def pause_point(self, step: str) -> None:
        hook = self.hooks.get(step)
        if hook is not None:
            hook()

    def written(self, r: int) -> int:
        """Pages pre-dump round ``r`` writes: all at first, then what was dirty."""
        return self.pages if r == 0 else self.dirty[r - 1]

    def send(
        self,
        root: Any,
        sid: str,
        on_event: Callable[[Any], None],
        *,
        pre_dump: bool,
        after: str | None = None,
        engine: str | None = None,
    ) -> Any:
        """The image a sandbox would stream, read back event by event into ``on_event``."""
        self._here("send")
        meta: dict[str, Any] = {"sandbox_id": sid, "workload": "kv:1"}
        if pre_dump:
            r = self.pre_dumps
            self.pre_dumps += 1
            n, after_ = self.written(r), self.dirty[r]
            meta["kind"] = chain.PRE_DUMP
        else:
            n, after_ = (self.dirty[self.pre_dumps - 1] if self.pre_dumps else self.pages), 0
        frames = bytearray()
        with StreamImage(frames.extend, metadata=meta) as img:
            if not pre_dump:
                img.state_file.write(STATE)
            img.write_pages(iter([(i, bytes([1 + i % 250]) * 4096) for i in range(min(n, 8))]))
        stream = io.BytesIO(bytes(frames))
        for event in read_stream(stream.read):
            on_event(event)
        counters = {"pages_written": n, "dirty_after": after_, "image_id": img.image_id.hex()}
        return SimpleNamespace(counters=counters)


@dataclass
class FakeDestination:
    """A destination speaking the real protocol; ``misbehave(phase, ch)`` is called at
    each phase (``offer``, ``round``, ``final``, ``restored``, ``done``) and returns
    True when it took over (sent an Error, closed, lied) and the session ends there."""

    misbehave: Callable[[str, Any], bool] = lambda phase, ch: False
    lie: Callable[[m.Offer, bytes], bytes] | None = None  # the proof it sends instead
    keeps: bool = False  # it read Done: it runs the sandbox
    got_done: bool = False
    told_at_done: list[bytes] = field(default_factory=list)  # the source's guard, then
    sandbox: StandIn | None = None
    rounds: int = 0
    error: BaseException | None = None

    def run(self, ch: Any) -> None:
        offer = ch.recv()
        assert isinstance(offer, m.Offer)
        if self.misbehave("offer", ch):
            return
        ch.send(m.Ack(seq=ch.frames_received))
        while True:
            sha = hashlib.sha256()
            msg = ch.recv()
            while not isinstance(msg, m.RoundEnd):
                if isinstance(msg, m.StateChunk):
                    sha.update(msg.data)
                msg = ch.recv()
            if msg.final:
                break
            self.rounds += 1
            if self.misbehave("round", ch):
                return
            ch.send(m.Ack(seq=ch.frames_received))
        if self.misbehave("final", ch):
            return
        shown = proof.proof(offer.nonce, offer.sandbox_id, ADDRESS, sha.digest())
        if self.lie is not None:
            shown = self.lie(offer, sha.digest())
        ch.send(m.Restored(address=ADDRESS, restore_ms=1.0, proof=shown))
        if self.misbehave("restored", ch):
            return
        done = ch.recv()  # an Error from the source raises: it cancelled
        if self.sandbox is not None:
            self.told_at_done = list(self.sandbox.told)
        self.got_done = isinstance(done, m.Done)
        assert self.got_done, done
        self.keeps = True
        if self.misbehave("done", ch):
            return
        ch.send(m.Ack(seq=ch.frames_received))


@dataclass
class Outcome:
    sandbox: StandIn
    dest: FakeDestination
    error: MigrationError | None
    report: Any = None  # the Migration's report, as ``--json`` prints it

    def running_copies(self) -> int:
        return int(self.sandbox.status == "running") + int(self.dest.keeps)


def migrate(
    tmp_path: Path,
    sandbox: StandIn,
    dest: FakeDestination,
    monkeypatch: pytest.MonkeyPatch,
    rounds: int | None = None,
) -> Outcome:
    """Run one ``Migration`` of ``sandbox`` to ``dest``; returns what became of both."""
    sandbox.install(monkeypatch)
    dest.sandbox = sandbox
    root = SimpleNamespace(path=tmp_path)
    with Listener("127.0.0.1", 0, SECRET, io_timeout=10) as lst:

        def serve() -> None:
            try:
                with lst.accept(timeout=10) as ch:
                    dest.run(ch)
            except BaseException as exc:  # the source gave up first: kept for the test
                dest.error = exc

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        host, port = lst.address
        error = None
        opts = Options(rounds=rounds, io_timeout=10, at=sandbox.pause_point)
        mig = Migration(root, SID, host, port, SECRET, opts)
        try:
            mig.run()
        except MigrationError as exc:
            error = exc
        finally:
            t.join(30)
        assert not t.is_alive()
    assert not list(tmp_path.glob(".migrate-*")), "the source's working directory is left"
    return Outcome(sandbox, dest, error, mig.report)


def iter_phases() -> Iterator[str]:
    yield from ("offer", "round", "final", "restored", "done")
