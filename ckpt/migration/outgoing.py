"""The source's half of a session: pre-copy rounds, the final freeze, the commit.

Each round is a pre-dump the sandbox streams to this process down its control
connection (``send_client.send``, only the pages dirtied since the image before), each
run going on to the destination as it arrives (``pagechannel.ChannelSink``): no page
touches the source's disk.  Rounds are run by ``precopy_policy.run_rounds``, the
engine ``checkpoint --pre-copy`` uses: they stop when few pages are dirty, when a round
is over 10% larger than the one before, or after ``rounds`` rounds.

Then the sandbox is paused (requests wait in its kernel, none is refused), and its
final image (kernel state and the pages dirtied since the last round) is streamed the
same way with the sandbox left paused.  Once the destination says ``Restored`` with
its proof (``proof.py``), the guard is told the migration commits, ``Done`` is sent,
and on the destination's ``Ack`` the source's copy is deleted.  Any failure before
``Done``, and an ``Error`` in answer to it (the destination cancels only before it
commits), resumes the sandbox exactly where it was paused; only a destination that
goes silent after ``Done`` leaves it paused, since it may or may not have kept it.

``Options.at`` is called at each named step (``round``, ``frozen``, ``restored``,
``committing``, ``committed``): tests stop or fail the source there; by default it is
``testhooks.from_env()``, None unless ``CKPT_FAULT`` names a pause.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpt.errors import CkptError
from ckpt.migration import messages as m
from ckpt.migration import proof
from ckpt.migration.errors import FrameError, MigrationError, PeerError
from ckpt.migration.guard import CANCELLED, COMMITTED, COMMITTING, PAGING
from ckpt.migration.pagechannel import ChannelSink
from ckpt.migration.postcopy import SourcePager, answer_faults
from ckpt.migration.reconnect import reconnect_s
from ckpt.sandbox.client import send_client, testhooks
from ckpt.sandbox.host.precopy_policy import StopRule, run_rounds
from ckpt.statefile.format import MAX_PAGES, PAGE_SIZE

WORK_PREFIX = ".migrate-"
RESTORE_WAIT_FACTOR = 5  # the wait for Restored: the destination restores meanwhile
POSTCOPY_COUNTS = ("postcopy_pushed", "postcopy_wanted", "postcopy_bytes")


def io_timeout() -> float:
    """One frame, or one answer, from the destination: ``CKPT_MIGRATE_IO_TIMEOUT_S``; a
    cut link is noticed after this long (tests shorten it)."""
    from ckpt import settings

    return settings.current().migrate_io_timeout_s


MODES = ("pre-copy", "post-copy", "auto")
POSTCOPY_ROUNDS = 1  # pre-copy rounds before a post-copy freeze, unless told


@dataclass
class Options:
    rounds: int | None = None  # None: precopy_policy.MAX_ROUNDS (post-copy: 1)
    mode: str = "pre-copy"  # or "post-copy"; "auto": post-copy if the rounds diverge
    port: int | None = None  # where the destination binds (None: the same port if free)
    io_timeout: float = field(default_factory=io_timeout)
    tls: Any = None  # ClientTLS
    encrypt: bool = False  # seal every frame after the handshake (sealed.py)
    reconnect_s: float = field(default_factory=reconnect_s)  # post-copy: a cut's wait
    at: Callable[[str], None] | None = field(default_factory=testhooks.from_env)


@dataclass
class Report:
    """What a migration did: the line ``ckpt migrate`` prints and its ``--json``."""

    sandbox_id: str
    destination: str
    address: str | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, Any] = field(default_factory=dict)
    bytes_sent: int = 0
    memory_bytes: int = 0
    downtime_ms: float = 0.0
    frozen_time_ms: float = 0.0
    total_ms: float = 0.0

    def line(self) -> str:
        """The one line ``ckpt migrate`` prints: where the sandbox went, where it
        serves now (not the server's address), and what it cost."""
        mib = self.bytes_sent / (1 << 20)
        serving = f", serving http://{self.address}/" if self.address else ""
        return (
            f"migrated {self.sandbox_id} to {self.destination}{serving}: frozen "
            f"{self.frozen_time_ms:.0f} ms, downtime {self.downtime_ms:.0f} ms, "
            f"{len(self.rounds)} rounds, {mib:.1f} MiB sent"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "sandbox_id": self.sandbox_id,
            "destination": self.destination,
            "address": self.address,
            **self.counters,
            "frozen_time_ms": self.frozen_time_ms,
            "downtime_ms": self.downtime_ms,
            "total_time_ms": self.total_ms,
            "bytes_sent": self.bytes_sent,
            "memory_bytes": self.memory_bytes,
            "rounds": self.rounds,
        }


def _peer_gone(ch: Any) -> bool:
    """The peer has closed its side already (it died): checked without waiting."""
    import socket

    # a plain socket on a duplicate of the descriptor: TLS sockets refuse MSG_PEEK, and
    # a killed peer sends no close_notify, only the TCP FIN or RST looked for here
    raw = socket.socket(fileno=os.dup(ch._wire.sock.fileno()))
    try:
        return raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
    finally:
        raw.close()


def _expect(ch: Any, kind: type[m.Message], what: str) -> Any:
    msg = ch.recv()
    if not isinstance(msg, kind):
        raise FrameError(f"the destination sent a {type(msg).__name__} {what}")
    return msg


class Migration:
    """One ``ckpt migrate``: call ``run``; it cleans up after itself whatever happens."""

    def __init__(
        self, root: Any, sandbox_id: str, host: str, port: int, secret: bytes, opts: Options
    ) -> None:
        self.root = root
        self.sid = sandbox_id
        self.host, self.port = host, port
        self.secret = secret
        self.opts = opts
        self.report = Report(sandbox_id, f"{host}:{port}")
        self.paused = False
        self.committing = False  # Done may be on its way: a failure cannot tell the outcome
        self.moving: Any = None  # the netns.Net whose connections are parked or cut
        self.nonce = proof.new_nonce()
        self.after: str | None = None  # the last image sent: the next holds what is dirty since
        self.t_end = 0.0  # when the last stream's image ended
        self.round_step_done = False  # the "round" step is taken once, in the first round
        self.stage = "connecting"
        self._ch: Any = None
        self._carried = 0  # bytes sent on channels a cut ended
        self.pager: SourcePager | None = None  # post-copy, from the freeze
        self._streams: list[dict[str, Any]] = []  # post-copy: each page stream's counters
        self.resent = 0  # post-copy: pages sent again after a reconnect
        self.reconnects = 0  # post-copy: channels the window took after a cut
        self.paging = False  # committed, post-copy: the destination lacks pages held here
        self.dirty: int | None = None  # pages dirty after the last round

    def sent(self) -> int:
        """Bytes sent so far (read from another thread, for a progress line)."""
        ch = self._ch
        return self._carried + (ch.bytes_sent if ch is not None else 0)

    def _stage(self, text: str) -> None:
        self.stage = text  # read by a progress line, from another thread

    def run(self) -> Report:
        from ckpt.migration.guard import Guard, source_act
        from ckpt.sandbox.client import lifecycle
        from ckpt.sandbox.wire.paths import RUNNING

        st = lifecycle.state(self.root, self.sid)
        if st.status != RUNNING:
            raise MigrationError(
                f"sandbox {self.sid} is {st.status}; only a running sandbox migrates"
            )
        t0 = time.perf_counter()
        workdir = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{self.sid}.", dir=self.root.path))
        guard = Guard(workdir, source_act(self.root, self.sid))
        ch = None
        try:
            ch = self._connect()
            self._ch = ch
            self._session(ch, st, workdir, guard)
        except BaseException as exc:
            if not self.committing:
                if ch is not None:
                    reason = "the source gave up" if isinstance(exc, PeerError) else str(exc)
                    ch.send_error(m.ErrorCode.CANCELLED, reason)
                if self.pager is not None:  # its stream holds the sandbox: ended first
                    self.pager.stop()
                resumed: CkptError | None = None
                if self.moving is not None:  # before the resume: they are served again
                    from ckpt.migration import connections

                    connections.back(self.root, self.sid, self.moving)
                if self.paused:
                    try:
                        lifecycle.resume(self.root, self.sid)
                    except CkptError as why:
                        resumed = why
                if isinstance(exc, CkptError):
                    raise MigrationError(
                        f"migration of {self.sid} to {self.host}:{self.port} failed, and "
                        f"{self._here(resumed)}: {exc}"
                    ) from exc
            raise
        finally:
            if ch is not None:
                ch.close()
                self._ch.close()
                self.report.bytes_sent = self.sent()
            shutil.rmtree(workdir, ignore_errors=True)
            guard.close()
        self.report.total_ms = round((time.perf_counter() - t0) * 1e3, 3)
        return self.report

    def _connect(self) -> Any:
        from ckpt.migration.channel import connect

        return connect(
            self.host,
            self.port,
            self.secret,
            tls=self.opts.tls,
            io_timeout=self.opts.io_timeout,
            encrypt=self.opts.encrypt,
        )

    def _here(self, resume_failed: CkptError | None) -> str:
        """What became of the sandbox here after a failed migration, as it is now: a
        concurrent migration of the same sandbox may have moved and deleted it."""
        from ckpt.sandbox.client import lifecycle
        from ckpt.sandbox.wire.paths import RUNNING

        try:
            st = lifecycle.state(self.root, self.sid)
        except CkptError:
            return f"{self.sid} is no longer here (another migration or a delete removed it)"
        if st.status == RUNNING:
            return f"{self.sid} runs on here as before"
        why = f" (resuming it failed: {resume_failed})" if resume_failed is not None else ""
        return f"{self.sid} is {st.status} here{why}: `ckpt resume {self.sid}` or check it"

    def _session(self, ch: Any, st: Any, workdir: Path, guard: Any) -> None:
        from ckpt.migration import connections
        from ckpt.sandbox.client import lifecycle

        ch.send(
            m.Offer(
                sandbox_id=self.sid,
                workload=st.workload,
                engine=st.engine or "",
                pages=MAX_PAGES,
                cpus=st.cpu,
                port=self.opts.port,
                nonce=self.nonce,
                post_copy=self.opts.mode != "pre-copy",
                **_offered_net(self.root, st),
            )
        )
        _expect(ch, m.Ack, "instead of accepting the offer")
        import ckpt.cgroups  # noqa: F401  (the pause's: imported now, not while frozen)

        if self.opts.mode != "pre-copy":  # the pager's too (pagefeed: 12 ms to import)
            from ckpt.images import pagefeed  # noqa: F401

        rounds = self.opts.rounds
        if rounds is None and self.opts.mode == "post-copy":
            rounds = POSTCOPY_ROUNDS
        rule = StopRule() if rounds is None else StopRule(max_rounds=rounds)
        records = run_rounds(rule, lambda r: self._round(ch, r))
        written = [r["pages_written"] for r in records]
        post = self.opts.mode == "post-copy" or (
            self.opts.mode == "auto" and not rule.converged(written, self.dirty)
        )
        self.report.counters["mode"] = "post-copy" if post else "pre-copy"
        # The final step: requests wait in the paused kernel; its image has the rest.
        self._stage(f"round {len(self.report.rounds)}, final (paused)")
        # A sandbox with its own address first parks its connections between requests.
        t_pause = time.perf_counter()
        net = connections.net_of(self.root, st)
        if net is not None:
            self.moving = net
            connections.park(self.root, self.sid, net)
        lifecycle.pause(self.root, self.sid, cgroup=False)  # the kernel only: it writes now
        self.paused = True
        sent0 = ch.bytes_sent
        moved = b""
        if net is not None:  # the address goes quiet; the connections' states are read
            moved = connections.cut(self.root, self.sid, net, workdir)
        state_hash = hashlib.sha256()
        final_no = len(self.report.rounds)
        sink = ChannelSink(ch, final_no, final=True, state_hash=state_hash, at=self._progress)
        more = {"post_copy": True} if post else {}  # the pages left out come after
        reply = send_client.send(
            self.root, self.sid, sink, pre_dump=False, after=self.after, **more
        )
        if net is not None:
            ch.send(m.Connections(data=moved))
        if post:  # the map first, then the pages, pushed or asked for, as it runs there
            self.pager = SourcePager(self.root, self.sid, ch, final_no + 1)
            self.pager.start()
            self.pager.mapped.wait(self.opts.io_timeout)
            if not self.pager.map_pages:  # none dirty since the last round: none to page
                self.pager.join(self.opts.io_timeout)
                self.pager = None
        elif self.opts.mode != "pre-copy":
            ch.send(m.PageMap(runs=[], last=True))
        t_final_sent = time.perf_counter()
        t_dumped = self.t_end
        if not self.report.rounds:
            self.report.memory_bytes = sink.pages * PAGE_SIZE
        self._stage("restoring there")
        ch.io_timeout = self.opts.io_timeout * RESTORE_WAIT_FACTOR  # it restores meanwhile
        restored = self._expect(ch, m.Restored, "instead of Restored")
        ch.io_timeout = self.opts.io_timeout
        t_restored = time.perf_counter()
        self.report.rounds.append(
            {
                "round": final_no,
                "final": True,
                "pages": sink.pages,
                "bytes": ch.bytes_sent - sent0,
                "ms": round((t_restored - t_pause) * 1e3, 3),
                "dump_ms": round((t_dumped - t_pause) * 1e3, 3),
                "send_ms": round((t_final_sent - t_dumped) * 1e3, 3),
                "restore_wait_ms": round((t_restored - t_final_sent) * 1e3, 3),
            }
        )
        expected = proof.proof(self.nonce, self.sid, restored.address, state_hash.digest())
        if not proof.matches(expected, restored.proof):
            raise MigrationError(
                "the destination said Restored without proof that it restored this sandbox's state"
            )
        self._at("restored")
        if _peer_gone(ch):  # it died after saying so: nothing there to commit to
            raise MigrationError("the destination closed the connection after restoring")
        guard.say(COMMITTING)
        self.committing = True  # from here silence cannot tell: the sandbox stays paused
        try:
            ch.send(m.Done(frames=ch.frames_sent))
            self._at("committing")
            self._expect(ch, m.Ack, "instead of acknowledging Done")
        except PeerError as exc:
            # the destination cancels only before it reads Done: it runs nothing
            guard.say(CANCELLED)
            self.committing = False
            raise MigrationError(f"the destination cancelled after restoring: {exc}") from exc
        except MigrationError as exc:
            raise MigrationError(
                f"{self.sid} was restored on {self.host}:{self.port}, but the destination "
                f"did not confirm it keeps it ({exc}); it stays paused here: check the "
                f"destination, then `ckpt delete --force {self.sid}` or `ckpt resume "
                f"{self.sid}` here"
            ) from exc
        t_committed = time.perf_counter()
        if self.pager is not None:
            try:
                self._pages_go(ch, guard, t_pause)
            except CkptError as exc:
                raise MigrationError(
                    f"{self.sid} runs on {self.host}:{self.port}, but the pages it still "
                    f"lacks did not all go ({exc}); the copy here holds them, paused: the "
                    f"destination stops it for want of them, then `ckpt resume {self.sid}` "
                    "here brings it back as it was when it froze"
                ) from exc
        guard.say(COMMITTED)
        self._at("committed")
        t_delete = time.perf_counter()
        lifecycle.hang_up(self.root, self.sid)  # its waiting clients go to the destination
        lifecycle.delete(self.root, self.sid, force=True)
        t_deleted = time.perf_counter()
        self.report.address = restored.address
        self.report.frozen_time_ms = round((t_dumped - t_pause) * 1e3, 3)
        self.report.downtime_ms = round((t_restored - t_pause) * 1e3, 3)
        counters = dict(reply.counters)
        counters.pop("image_id", None)
        counters["restore_time_ms"] = restored.restore_ms
        counters["done_ack_ms"] = round((t_committed - t_restored) * 1e3, 3)
        counters["source_delete_ms"] = round((t_deleted - t_delete) * 1e3, 3)
        counters["rounds"] = len(self.report.rounds)
        counters["pages_written"] = sum(
            r.get("pages_written", r["pages"]) for r in self.report.rounds
        )
        self.report.counters = {**self.report.counters, **counters}

    def _expect(self, ch: Any, kind: type[m.Message], what: str) -> Any:
        if self.opts.mode == "pre-copy":
            return _expect(ch, kind, what)
        return answer_faults(ch, self.pager, kind, what)  # its relay sends keep-alives

    def _pages_go(self, ch: Any, guard: Any, t_pause: float) -> None:
        """Post-copy, committed: the pages go on until the destination holds them all
        (its ``Ack``); the paused copy here is kept meanwhile, whatever happens."""
        assert self.pager is not None
        guard.say(PAGING)
        self.paging = True
        self.pager.hang_up()  # its clients go to the destination now, not at the end
        self._at("paging")  # tests: committed, pages still going
        self._stage("post-copy: sending pages")
        t0 = time.perf_counter()
        first = self.pager
        cut_at: float | None = None
        while True:
            try:
                answer_faults(self._ch, self.pager, m.Ack, "instead of saying it holds every page")
                break
            except PeerError:
                raise
            except (MigrationError, OSError) as exc:
                if self.pager is not None and self.pager.failed_here():
                    raise
                cut_at = cut_at or time.monotonic()  # one deadline, however many cuts
                self._rejoin(exc, cut_at + self.opts.reconnect_s, first)
        t_held = time.perf_counter()
        if self.pager is not None:
            self._streams.append(dict(self.pager.join(self.opts.io_timeout).counters))
        self.paging = False
        c = {k: sum(int(s.get(k) or 0) for s in self._streams) for k in POSTCOPY_COUNTS}
        if len(self.report.rounds) == 1:  # no round: every page came after
            self.report.memory_bytes = first.map_pages * PAGE_SIZE
        self.report.counters.update(
            postcopy_pages=first.map_pages,
            postcopy_pushed=c["postcopy_pushed"],
            postcopy_faulted=c["postcopy_wanted"],
            postcopy_bytes=c["postcopy_bytes"],
            postcopy_ms=round((t_held - t0) * 1e3, 3),
            last_page_ms=round((t_held - t_pause) * 1e3, 3),
            postcopy_window=[list(x) for x in first.window],
            postcopy_reconnects=self.reconnects,
            postcopy_resent=self.resent,
        )

    def _rejoin(self, why: BaseException, deadline: float, first: SourcePager) -> None:
        """Committed, the channel broke: end the sandbox's page stream, connect again
        and resume (``reconnect.rejoin``), and stream only the pages the destination
        lacks, before the deadline; else the paused copy here is kept."""
        from ckpt.migration import reconnect

        pager, ch = self.pager, self._ch
        if pager is not None:
            pager.stop()
            self._streams.append(dict(pager.result_counters()))
        self._carried += ch.bytes_sent
        ch.close()
        self._stage("post-copy: reconnecting")
        self._at("reconnecting")  # tests: the link is down
        new, missing = reconnect.rejoin(
            self._connect, self.sid, self.nonce, MAX_PAGES, deadline, why
        )
        self._ch = new
        self.reconnects += 1
        self.resent += sum(count for _, count in missing)
        self._stage("post-copy: sending pages")
        self.pager = None
        if missing:  # none: every page is there, only its Ack was lost
            round_no = first.sink.round_no
            self.pager = SourcePager(
                self.root, self.sid, new, round_no, resend=missing, carry=first
            )
            self.pager.start()

    def _round(self, ch: Any, r: int) -> tuple[dict[str, Any], int | None]:
        """Pre-copy round ``r``: the sandbox streams the pages dirtied since the image
        before (all of them first), each run on to the destination as it comes."""
        self._stage(f"round {r}, pre-copy")
        t = time.perf_counter()
        sent0 = ch.bytes_sent
        sink = ChannelSink(ch, r, final=False, at=self._progress)
        reply = send_client.send(self.root, self.sid, sink, pre_dump=True, after=self.after)
        t_dumped = self.t_end
        _expect(ch, m.Ack, f"instead of acknowledging round {r}")
        t_sent = time.perf_counter()
        counters = reply.counters
        self.after = str(counters["image_id"]) if counters.get("image_id") else None
        dirty = counters.get("dirty_after")
        self.dirty = dirty if isinstance(dirty, int) else None
        record = {
            "round": r,
            "pages": sink.pages,
            "pages_written": int(counters.get("pages_written") or 0),
            "bytes": ch.bytes_sent - sent0,
            "ms": round((t_sent - t) * 1e3, 3),
            "dump_ms": round((t_dumped - t) * 1e3, 3),
            "send_ms": round((t_sent - t_dumped) * 1e3, 3),
        }
        self.report.rounds.append(record)
        if r == 0:
            self.report.memory_bytes = sink.pages * PAGE_SIZE
        return record, dirty if isinstance(dirty, int) else None

    def _progress(self, step: str, sink: ChannelSink) -> None:
        """A stream's progress: the time its image ended (the dump, as the sandbox
        saw it), and the test steps inside it."""
        if step == "end":
            self.t_end = time.perf_counter()
            if sink.final:
                self._at("frozen")  # tests: the final image is taken, not all of it sent
        elif sink.round_no == 0 and not self.round_step_done and sink.pages >= m.MAX_BATCH_PAGES:
            self.round_step_done = True
            self._at("round")  # tests: part of the first round is sent

    def _at(self, step: str) -> None:
        if self.opts.at is not None:
            self.opts.at(f"migrate:{step}")


def _offered_net(root: Any, st: Any) -> dict[str, Any]:
    """The sandbox's own address and MAC, for a destination that serves a bridge."""
    from ckpt.sandbox.wire import netns

    net = netns.of(root, st)
    if net is None:
        return {}
    return {"ip": net.ip, "prefix": net.prefix, "mac": net.mac, "bridge": net.bridge}
