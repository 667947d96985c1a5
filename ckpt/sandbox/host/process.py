"""The sandbox process: hosts one simulated kernel, serves its control socket and HTTP.

Started by ``ckpt run`` / ``ckpt restore`` as ``python -m ckpt.sandbox.host.process --id ID
--socket PATH --ready-fd N``, already inside cgroup ``ckpt/ID`` (the parent joins it in
``preexec_fn`` before exec), in its own session, with stdout/stderr going to the sandbox
log.  It starts empty: binds its control socket, writes ``ready`` to the ready pipe, then
waits for ``boot`` (build a workload) or ``restore`` (load an image).  Keeping start-up
to the control socket makes ``SandboxCreate`` the cost of the process alone; the kernel,
state engine and statefile modules are imported by the request that needs them, so that
work is charged to this process (and its cgroup's CPU quota).

Threads: the RPC server (one exclusive request at a time), the HTTP server (one thread
per connection), and a ticker that advances the kernel's clock.  All kernel access goes
through ``Host.cond``; while the kernel is frozen, HTTP requests wait on it and are
answered after thaw.

Fault points (``ckpt/faults.py``): ``checkpoint-stall`` sleeps after the object stream is
written and before the image is committed, so tests can kill a sandbox mid-checkpoint,
or hold a checkpoint open for exactly as long as they need (its release file) whatever
the machine's load; ``restore-stall`` sleeps at the start of a restore, so tests can see
the restore's deadline end the wait and clean up.

Stdlib and ``ckpt`` only; no typer, rich, argparse or typing, so start-up stays fast.

Why one file: ``Host`` is one state machine.  Its RPC handlers, the HTTP responder and
the ticker share one lock (``Host.cond``), the frozen flag and the listener, and each
handler's failure path undoes the others' steps (a failed restore drops the kernel it
loaded, a failed checkpoint thaws and accepts again).  What stands apart has its module:
the image (``dump.py``), pre-copy (``precopy.py``), the listening socket kept or bound
anew (``listener.py``), the template's sockets (``wire/handover.py``), HTTP
(``http.py``), read-only views (``introspect.py``).  Argument
parsing stays here, in the cold start's entry point: one module fewer to import.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

from ckpt import faults
from ckpt.errors import KernelError, SandboxError, StatefileError
from ckpt.faults import Fault
from ckpt.sandbox.host import introspect
from ckpt.sandbox.host.http import HttpServer
from ckpt.sandbox.host.pacing import Pacer
from ckpt.sandbox.wire import rpc
from ckpt.sandbox.wire.sandboxlog import exit_now, log

# Annotations are strings; importing ``typing`` (or ``argparse``, which brings ``re``
# and ``gettext``) would be a large share of the time before the process is ready.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ckpt.sandbox.host import dump, listener, precopy
    from ckpt.sandbox.wire import protocol as p

TICK_S = 0.05
TICK_IDLE_MAX = 20  # ticks an idle ticker may sleep at once (1 s)
# Timer slack of a quiet sandbox: with no HTTP request for QUIET_AFTER_S, the ticker
# wakes at most every TICK_SLACK ticks (250 ms), and events due sooner run then, in
# order and at their simulated times, as Linux lets an idle task's timers fire late.
# The kernel's clock already lags real time by up to TICK_IDLE_MAX ticks while nothing
# is due, so nothing a request can see changes; what changes is how often an idle
# sandbox wakes (20 -> 4 a second for nginx's 50 ms timer).
TICK_SLACK = 5
QUIET_AFTER_S = 1.0
DRAIN_TIMEOUT_S = 10.0


def ticks_to_sleep(now_ns: int, due_ns: int | None, quiet: bool) -> int:
    """Whole ticks the ticker sleeps: until the next due event (``None``: nothing is
    ever due), at least one and at most TICK_IDLE_MAX; at least TICK_SLACK if quiet."""
    step_ns = int(TICK_S * 1e9)
    ahead = TICK_IDLE_MAX if due_ns is None else (due_ns - now_ns) // step_ns
    ticks = max(1, min(TICK_IDLE_MAX, ahead))
    return max(ticks, TICK_SLACK) if quiet else ticks


def self_cpu_usec() -> int:
    """CPU (user + system) of this process, all threads, in microseconds."""
    t = os.times()
    return int((t.user + t.system) * 1_000_000)


def _stall(seconds: float, release: str | None) -> None:
    """Sleep ``seconds``, or less if file ``release`` appears meanwhile."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if release is not None and os.path.exists(release):
            log("checkpoint: stall released (CKPT_FAULT)")
            return
        time.sleep(min(left, 0.02) if release is not None else left)


def _key(key_hex: str | None) -> bytes | None:
    return bytes.fromhex(key_hex) if key_hex else None


def _warm_imports(sandbox_id: str, root: str | None) -> None:
    """Name the process (``ckpt sandbox ID (ROOT)``) and import the kernel, state engine
    and statefile once the process is ready.

    They are needed by the first ``boot`` or ``restore``; doing this after the ready
    handshake keeps SandboxCreate the cost of the process alone, and any import still
    running when the request arrives is waited for and counted as ``import_ms``.
    """
    if root is not None:
        from ckpt.sandbox.wire import title

        title.set_title(title.sandbox_title(sandbox_id, root))
    from ckpt import kernel, state, statefile  # noqa: F401
    from ckpt.images import pagexfer  # noqa: F401  (a migration's first image, frozen)
    from ckpt.sandbox.host import dump, precopy, send  # noqa: F401  (checkpoint, migration)
    from ckpt.sandbox.wire import timings  # noqa: F401  (the checkpoint path)


def _warm_netns(name: str) -> None:
    """Have this process's thread in namespace ``name`` start entering it (the
    listener is bound there, and a migration's connections rebuilt, once the image is
    loaded); a bad name is refused then, by ``netns.listen``."""
    from ckpt.sandbox.wire import netmove, netns, nsthread

    with contextlib.suppress(OSError):
        netns.check_netns_name(name)
        nsthread.warm(netmove.netns_path(name))


class Host:
    """The kernel and everything serving it inside this process."""

    def __init__(self, sandbox_id: str, socket_path: str) -> None:
        self.id = sandbox_id
        self.cond = threading.Condition()
        self.kernel: Any = None
        self.frozen = False
        self.http: HttpServer | None = None
        self.handed_over = False
        self.title_root: str | None = None  # set by a cold start: see ``serve``
        self.exiting = threading.Event()
        self.last_request = 0.0  # monotonic time of the last HTTP request
        stall = faults.injected(Fault.CHECKPOINT_STALL)  # None: no hook on the path
        self.stall = stall.seconds if stall is not None else 0.0
        self.stall_release = (stall.text or None) if stall is not None else None
        self.last_dump: str | None = None  # image id of the last dump (see precopy.py)
        from ckpt.sandbox.host.remote_image import ImageSession

        self.images = ImageSession()  # an object-store image's store, upload, fetch
        self.server = rpc.Server(
            socket_path,
            {
                "ping": self.ping,
                "boot": self.boot,
                "restore": self.restore,
                "checkpoint": self.checkpoint,
                "pause": self.pause,
                "resume": self.resume,
                "fingerprint": self.fingerprint,
                "connections": self.connections,
                "stop": self.stop,
                "send": self.send,
                "pages": self.serve_pages,
                **introspect.handlers(self),
            },
            concurrent=frozenset({"ping", "fingerprint", *introspect.VERBS}),
            streams=frozenset({"send"}),
            duplex=frozenset({"pages"}),
            on_error=lambda method, exc: log(f"internal error in {method}: {exc!r}"),
        )

    # -- serving -----------------------------------------------------------------------

    def respond(self, method: str, path: str, body: bytes = b"") -> tuple[int, dict | bytes]:
        """Answer one HTTP request from kernel state; waits while the kernel is frozen."""
        self.last_request = time.monotonic()  # the ticker keeps full pace while served
        with self.cond:
            while self.frozen:
                self.cond.wait()
            return self.kernel.http_request(method, path, body)

    def tick(self) -> None:
        """Advance the kernel's clock in real time while it runs.

        It sleeps whole ticks until the kernel's next due event (at most
        ``TICK_IDLE_MAX`` ticks), then runs the kernel for the ticks it slept: the clock
        moves as it did tick by tick, but an idle sandbox wakes about once a second.
        A quiet one (no request for QUIET_AFTER_S) wakes at most every TICK_SLACK ticks.
        A kernel that asks for a pace is run that often instead (``pacing.py``).
        """
        step_ns = int(TICK_S * 1e9)
        ticks, paced = 1, Pacer(step_ns)
        while not self.exiting.wait(paced.sleep_s() if paced.pace else TICK_S * ticks):
            with self.cond:
                slept, ticks, since = ticks, 1, paced.since()
                k = self.kernel
                if k is None or self.frozen:  # the thaw moves the clock over a freeze
                    paced.owed = 0
                    continue
                k.run_for(paced.run_ns(since) if paced.pace else step_ns * slept)
                if not paced.ask(k.pace_ns()):
                    quiet = time.monotonic() - self.last_request > QUIET_AFTER_S
                    ticks = ticks_to_sleep(k.now, k.next_event_ns(), quiet)

    def _listen(
        self,
        port: int,
        adoption: listener.Adoption | None = None,
        host: str | None = None,
        netns: str | None = None,
        any_port: bool = False,
    ) -> str | None:
        """Serve the workload's listening socket for real (see listener.py); with
        ``any_port``, on a free port when ``port`` is taken (a migration to the same
        host).  Returns ``host:port``."""
        from ckpt.sandbox.host import listener

        if not listener.serves_http(self.kernel):
            return None
        sock, conns = listener.take_or_bind(port, adoption, host, netns, any_port)
        host, real_port = sock.getsockname()[:2]
        self.kernel.set_http_listen_address(host, real_port)
        self.http = HttpServer(sock, self.respond, conns)
        self.http.start()
        return f"{host}:{real_port}"

    def _address(self) -> str | None:
        if self.http is None:
            return None
        host, port = self.http.address
        return f"{host}:{port}"

    # -- RPC handlers ------------------------------------------------------------------

    def ping(self, request: p.PingRequest) -> p.PingReply:
        from ckpt.sandbox.wire.protocol import PingReply

        return PingReply(
            pid=os.getpid(),
            booted=self.kernel is not None,
            frozen=self.frozen,
            address=self._address(),
            cpu_usec=self_cpu_usec(),
            busy_with=self.server.busy_with,
            sandbox_id=self.id,
        )

    def fingerprint(self, request: p.FingerprintRequest) -> p.FingerprintReply:
        from ckpt.sandbox.wire.protocol import FingerprintReply

        with self.cond:
            if self.kernel is None:
                raise SandboxError("sandbox has no kernel yet")
            return FingerprintReply(self.kernel.fingerprint(), self.kernel.describe())

    def boot(self, request: p.BootRequest) -> p.BootReply:
        if self.kernel is not None:
            raise SandboxError("sandbox already has a kernel")
        from ckpt import kernel as kernel_mod
        from ckpt import statefile  # noqa: F401  (loaded now, not during the checkpoint)
        from ckpt.sandbox.wire.protocol import BootReply

        workload = request.workload
        try:
            k = kernel_mod.build_workload(workload, **request.options)
        except TypeError as exc:
            raise KernelError(f"workload {workload!r}: {exc}") from exc
        with self.cond:
            self.kernel = k
            address = self._listen(request.port, host=request.host, netns=request.netns)
        log(f"booted workload {workload} address={address}")
        return BootReply(address=address, cpu_usec=self_cpu_usec())

    def restore(self, request: p.RestoreRequest) -> p.RestoreReply:
        """Load an image into this (empty) process and resume it."""
        if self.kernel is not None:
            raise SandboxError("sandbox already has a kernel")
        stall = faults.injected(Fault.RESTORE_STALL)
        if stall is not None:
            log(f"restore: stalling {stall.seconds:g} s (CKPT_FAULT)")
            _stall(stall.seconds, None)
        t0 = time.perf_counter_ns()
        if request.netns:  # its thread enters the namespace while the image loads
            _warm_netns(request.netns)
        self.images.begin_restore(request, _key(request.key_hex))  # a store's: while importing
        from ckpt import kernel, state  # kernel: registers its savable types
        from ckpt.sandbox.host import listener
        from ckpt.sandbox.wire.protocol import Listener, RestoreReply

        del kernel
        t_import = time.perf_counter_ns()
        stats = state.Stats() if request.stats else None
        from ckpt.statefile import chain

        image, staged = self.images.open_for_restore(request, _key(request.key_hex))
        if chain.is_pre_dump(image):
            raise StatefileError(
                f"{request.image} is a pre-dump (memory pages, no kernel state); restore "
                "the final image, taken with --parent-path or --pre-copy"
            )
        from ckpt.sandbox.host.remote_image import image_key

        # every link checked first (an encrypted store image's files open without a key)
        images = chain.open_chain(image, image_key(staged, _key(request.key_hex)))
        reader = image.state_reader()
        try:
            k = state.load(reader, engine=request.engine or None, stats=stats)
        finally:
            close = getattr(reader, "close", None)
            if close is not None:
                close()
        t_state = time.perf_counter_ns()
        # The page map is checked against what the kernel state declares before any
        # page is read: its address space, and one recorded page per allocated frame.
        mf = k.memory_file
        pages = chain.open_pages(
            images,
            lazy=request.background,
            on_error=self._pages_failed,
            limit=mf.next_frame,
            frames=len(mf.refs),
        )
        if request.feed:  # post-copy: the pages the image lacks come from the feed
            from ckpt.images.pagefeed import attach

            pages = attach(request.feed, pages, mf.next_frame, self._pages_failed)
        mf.restore_pages(pages)
        if staged is not None:  # an image fetched from a store: loaded, not needed now
            staged.remove()
        t_pages = time.perf_counter_ns()
        k.note_restored()
        port = request.port
        if port is None:
            saved = k.http_listen_address()
            port = saved[1] if saved else 0
        with self.cond:
            self.kernel = k
            self.frozen = True
            where = request.host or listener.HOST
            adoption = listener.adopt(self.id, k, image.metadata, int(port), where)
            try:
                address = self._listen(
                    int(port), adoption, request.host, request.netns, request.any_port
                )
            except BaseException:
                self.kernel = None
                raise
            k.resume()
            self.frozen = False
            self.last_dump = image.header.image_id.hex()  # memory is this image's, clean
            self.cond.notify_all()
        t_end = time.perf_counter_ns()
        log(f"restored from {request.image} address={address}")
        counters: dict[str, Any] = {
            "import_ms": round((t_import - t0) / 1e6, 3),
            "restore_state_ms": round((t_state - t_import) / 1e6, 3),
            "restore_pages_ms": round((t_pages - t_state) / 1e6, 3),
            "restore_time_ms": round((t_end - t_import) / 1e6, 3),
            "pages_restored": len(getattr(pages, "indices", ()) or ()),
            "lazy_pages": request.background,
            "chain_images": len(images),
        }
        reply = RestoreReply(
            address=address,
            workload=k.workload,
            restore_ns=t_end - t_import,
            cpu_usec=self_cpu_usec(),
            held_for=adoption.held_for,
            counters=counters,
            stats=stats.as_dict() if stats is not None else None,
            stats_text=str(stats) if stats is not None else None,
        )
        if address is not None:
            adopted = adoption.listener is not None
            reply.listener = Listener.HANDED_OVER if adopted else Listener.BOUND_ANEW
            reply.bind_reason, reply.bind_detail = adoption.reason, adoption.why
            counters["connections_adopted"] = len(adoption.conns)
        return reply

    def _pages_failed(self, exc: BaseException) -> None:
        """A background page load found the page file damaged, or its store failed:
        stop, never run on with memory we do not have (called once, from the thread
        that found it)."""
        from ckpt.sandbox.host.remote_image import load_failure

        log(
            f"restore: {load_failure(exc)} during background load: {exc}; "
            "stopping the sandbox rather than run with wrong memory"
        )
        self.exiting.set()
        exit_now(70)  # EX_SOFTWARE

    def _freeze(self) -> None:
        with self.cond:
            self.frozen = True
            self.kernel.pause()
            if self.http is not None:
                self.http.pause_reading(True)

    def _thaw(self) -> None:
        with self.cond:
            self.kernel.resume()
            self.frozen = False
            if self.http is not None:
                self.http.pause_reading(False)
            self.cond.notify_all()

    def pause(self, request: p.PauseRequest) -> p.FrozenReply:
        from ckpt.sandbox.wire.protocol import FrozenReply

        if self.kernel is None:
            raise SandboxError("sandbox has no kernel to pause")
        if not self.frozen:
            self._freeze()
        return FrozenReply(frozen=True)

    def resume(self, request: p.ResumeRequest) -> p.FrozenReply:
        from ckpt.sandbox.host import pageserver
        from ckpt.sandbox.wire.protocol import FrozenReply

        if self.kernel is None:
            raise SandboxError("sandbox has no kernel to resume")
        if self.frozen:
            self._thaw()
        pageserver.listen_again(self)  # a post-copy source the destination lost
        return FrozenReply(frozen=False)

    def checkpoint(self, request: p.CheckpointRequest) -> p.CheckpointReply:
        """Freeze, write the image, then exit (or thaw with ``leave_running``).

        Any failure thaws the kernel again if it was running: a failed checkpoint leaves
        the sandbox as it was.
        """
        if self.kernel is None:
            raise SandboxError("sandbox has no kernel to checkpoint")
        from ckpt.sandbox.host import dump, precopy, remote_image, snapshot
        from ckpt.sandbox.wire.protocol import CheckpointReply
        from ckpt.sandbox.wire.timings import Timings

        where = remote_image.location_of(request)
        if request.pre_copy and not where.is_local:
            raise SandboxError(
                "--pre-copy writes a local image directory; pass a local --image-path, or "
                "chain --pre-dump and --parent-path into the object store"
            )
        if request.key_hex:  # here once, not in every forked writer nor while frozen
            from ckpt.statefile import seal

            seal.preload()
        params = {f: getattr(request, f) for f in request.__struct_fields__}
        if request.pre_dump:
            return self._pre_dump(params)
        was_running = not self.frozen
        leave_running = request.leave_running
        cpu0 = self_cpu_usec()
        t0 = time.perf_counter_ns()
        rounds = precopy.Rounds(self, params) if request.pre_copy else None
        link = self._link(request, rounds)  # a store's parent is read (and checked) here
        self.images.prepare(request, self.id)  # a store is asked, or fails, now
        try:
            clock = Timings()
            with clock.phase("freezing"):
                with clock.phase("drain"):
                    drained = self._drain(request.drain_timeout) if not leave_running else None
                if was_running:
                    self._freeze()
        except BaseException:
            self.images.discard_prepared()
            raise
        job = self._dump_job(request, link, rounds, clock.phases_ns["freezing"])
        use_fork = bool(
            leave_running
            and was_running
            and not self.stall
            and where.is_local  # a store's client is not forked
            and snapshot.usable(self.kernel)
        )
        try:
            written = self._write_forked(job) if use_fork else dump.write_image(job)
            self.last_dump = written["image_id"]
        except BaseException as exc:
            self.images.discard_prepared()  # if it failed before its writer took it
            precopy.untake(self, job.dirty, job.last)
            self._undo_checkpoint(request, rounds, was_running, drained, exc)
            if isinstance(exc, OSError):
                raise dump.image_write_error(exc, request.image) from exc
            raise
        counters = written["counters"]
        reply = CheckpointReply(
            checkpoint_ns=written["t_end"] - t0,
            cpu_usec=0,
            stopping=not leave_running,
            counters=counters,
            stats=written["stats"],
            stats_text=written["stats_text"],
            rounds=rounds.results if rounds is not None else None,
        )
        if drained is not None:
            counters["drain_time_ms"] = dump.ms(clock.phases_ns["drain"])
            counters["connections_parked"] = drained
            reply.handover, reply.handover_detail = self._hand_over()
        if leave_running:
            if was_running and self.frozen:
                self._thaw()
        else:
            self.server.after_reply(self._exit)
        log(f"checkpoint written to {request.image} (leave_running={leave_running})")
        reply.cpu_usec = self_cpu_usec() - cpu0
        return reply

    def _undo_checkpoint(
        self,
        request: p.CheckpointRequest,
        rounds: precopy.Rounds | None,
        was_running: bool,
        drained: int | None,
        exc: BaseException,
    ) -> None:
        """Leave the sandbox as it was before a checkpoint that failed: its pre-copy
        rounds removed, the kernel thawed if it was running, new connections accepted."""
        if rounds is not None:
            rounds.discard()
        if was_running and self.frozen:
            self._thaw()
        if drained is not None and self.http is not None:
            self.http.undrain()
        log(f"checkpoint to {request.image} failed: {exc!r}; sandbox left as it was")

    def _dump_job(
        self,
        request: p.CheckpointRequest,
        link: dict[str, Any],
        rounds: precopy.Rounds | None,
        freezing_ns: int,
    ) -> dump.Dump:
        """What the image of the kernel, just frozen, is written from."""
        from ckpt import state
        from ckpt.sandbox.host.dump import Dump

        frozen_at = time.perf_counter_ns()
        engine = request.engine or state.default_engine()
        k = self.kernel
        mf = k.memory_file
        job = Dump(
            request,
            kernel=k,
            key=_key(request.key_hex),
            stall=self._stall_checkpoint if self.stall else None,
            images=self.images,
            engine=engine,
            metadata={
                "sandbox_id": self.id,
                "workload": k.workload,
                "engine": engine,
                "address": self._address(),
                **link,
            },
            link=link,
            rounds=rounds,
            stats=state.Stats() if request.stats else None,
            frozen_at=frozen_at,
            freezing_ns=freezing_ns,
            allocated=len(mf.refs),
            dirty=mf.take_dirty_marks(),  # reset tracking; a child writes only these
        )
        job.last, self.last_dump = self.last_dump, None  # put back if the dump fails
        return job

    def _write_forked(self, job: dump.Dump) -> dict[str, Any]:
        """``--leave-running``: a forked child writes the image from its copy-on-write
        copy of the frozen kernel while this process thaws at once; the frozen time is
        the fork."""
        from ckpt.sandbox.host import dump, snapshot

        pid, fd = snapshot.start(lambda: dump.write_image(job))
        self._thaw()
        t_thawed = time.perf_counter_ns()
        written = snapshot.collect(pid, fd)
        counters = written["counters"]
        counters["frozen_time_ms"] = dump.ms(t_thawed - job.frozen_at)
        counters["snapshot"] = "fork"
        written["t_end"] = time.perf_counter_ns()
        return written

    def _stall_checkpoint(self) -> None:
        """``CKPT_FAULT=checkpoint-stall``: hold the checkpoint between the object stream
        and the commit (see the module docstring)."""
        log(f"checkpoint: state written, stalling {self.stall:g} s (CKPT_FAULT)")
        _stall(self.stall, self.stall_release)

    def _link(self, request: p.CheckpointRequest, rounds: precopy.Rounds | None) -> dict[str, Any]:
        """The metadata linking this image to its parent: the last pre-copy round's, the
        ``--parent-path`` image's, or none (a full image)."""
        from ckpt.sandbox.host import precopy

        key = _key(request.key_hex)
        try:
            if rounds is not None:
                return rounds.run().parent_metadata(key)
            if request.parent:
                return precopy.parent_metadata(self, request.parent, request.image, key, request)
            return {}
        except BaseException:
            if rounds is not None:
                rounds.discard()
            raise

    def send(self, request: p.SendRequest, write: Any) -> p.CheckpointReply:
        """An image down the control connection, not to a path (``send.py``)."""
        from ckpt.sandbox.host import send

        return self._streamed(lambda: send.send(self, request, write))

    def serve_pages(self, request: p.PagesRequest, conn: Any) -> p.CheckpointReply:
        """A post-copy source's pages, those asked for first (``pageserver.py``)."""
        from ckpt.sandbox.host import pageserver

        return self._streamed(lambda: pageserver.serve_pages(self, request, conn))

    def _streamed(self, write: Any) -> p.CheckpointReply:
        from ckpt.sandbox.wire.protocol import CheckpointReply

        cpu0 = self_cpu_usec()
        t0 = time.perf_counter_ns()
        counters = write()
        return CheckpointReply(
            checkpoint_ns=time.perf_counter_ns() - t0,
            cpu_usec=self_cpu_usec() - cpu0,
            stopping=False,
            counters=counters,
        )

    def _pre_dump(self, params: dict[str, Any]) -> p.CheckpointReply:
        """``checkpoint --pre-dump``: pages only, the sandbox serving throughout."""
        from ckpt.sandbox.host import precopy
        from ckpt.sandbox.wire.protocol import CheckpointReply

        cpu0 = self_cpu_usec()
        t0 = time.perf_counter_ns()
        try:
            counters = precopy.pre_dump(self, params)
        except OSError as exc:
            from ckpt.sandbox.host.dump import image_write_error

            raise image_write_error(exc, params["image"]) from exc
        counters.update(rounds=1, freezing_time_ms=0.0, frozen_time_ms=0.0)
        log(f"pre-dump written to {params['image']}")
        return CheckpointReply(
            checkpoint_ns=time.perf_counter_ns() - t0,
            cpu_usec=self_cpu_usec() - cpu0,
            stopping=False,
            counters=counters,
        )

    def _drain(self, given: float | None) -> int | None:
        """Before a checkpoint that stops the sandbox: stop accepting and let accepted
        requests finish (see ``HttpServer.drain``) for ``given`` seconds (None: the
        default).  Returns the connections parked."""
        if self.http is None:
            return None
        timeout = DRAIN_TIMEOUT_S if given is None else float(given)
        from ckpt.sandbox.host.http import DrainTimeout

        try:
            return self.http.drain(timeout)
        except DrainTimeout as exc:
            if self.frozen:
                raise SandboxError(
                    f"checkpoint of {self.id} not taken: {exc}, read before the sandbox "
                    "was paused; it stays paused. Resume it (they are answered) and "
                    "checkpoint again"
                ) from None
            raise SandboxError(
                f"checkpoint of {self.id} not taken: {exc}; the sandbox goes on serving. "
                "Retry, or give the requests longer with --drain-timeout"
            ) from None

    def _hand_over(self) -> tuple[p.Handover, str]:
        """Give the drained sockets to the template for the restore: what happened, and
        why in words when they were not (or perhaps not) taken."""
        from ckpt.sandbox.wire import handover
        from ckpt.sandbox.wire.protocol import Handover

        if self.http is None:
            return Handover.NONE, ""
        outcome, why = handover.hold(self.id, self.http.handover())
        if outcome is Handover.UNKNOWN:
            log(f"sockets perhaps handed over ({why}): closing without shutting them down")
            self.handed_over = True  # _exit then closes our descriptors only
        elif outcome is Handover.NONE:
            log(f"sockets not handed over ({why}): clients are refused until the restore")
        else:
            self.handed_over = True
        return outcome, why

    def connections(self, request: p.ConnectionsRequest) -> p.ConnectionsReply:
        """A step of moving the connections with the address (``connmove.py``)."""
        from ckpt.sandbox.host import connmove
        from ckpt.sandbox.wire.protocol import ConnectionsReply

        return ConnectionsReply(connections=connmove.handle(self, request))

    def stop(self, request: p.StopRequest) -> p.StopReply:
        from ckpt.sandbox.wire.protocol import StopReply

        self.server.after_reply(self._exit)
        return StopReply(stopping=True)

    def _exit(self) -> None:
        log("exiting")
        if self.http is not None:
            # handed over: the sockets live on in the template; only our fds close
            self.http.close(shutdown=not self.handed_over)
        self.server.close()
        # only now: the main thread, woken, finalizes the interpreter, which ends this
        # thread at its next switch, before the sockets above were shut down
        self.exiting.set()
        exit_now(0)

    def serve_forever(self, ready_fd: int | None) -> None:
        self.server.start()
        threading.Thread(target=self.tick, name="ticker", daemon=True).start()
        if ready_fd is not None:
            os.write(ready_fd, f"ready {os.getpid()}\n".encode())
            os.close(ready_fd)
        log(f"sandbox {self.id} ready on {self.server.path}")
        threading.Thread(
            target=_warm_imports, args=(self.id, self.title_root), name="warm-imports", daemon=True
        ).start()
        self.exiting.wait()


USAGE = (
    "usage: python -m ckpt.sandbox.host.process --id ID --socket PATH [--ready-fd N] [--root ROOT]"
)


def _usage_error(msg: str) -> SystemExit:
    sys.stderr.write(f"{USAGE}\npython -m ckpt.sandbox.host.process: error: {msg}\n")
    return SystemExit(2)


def parse_args(argv: list[str]) -> tuple[str, str, int | None, str | None]:
    """``(id, socket, ready_fd, root)`` from ``--id ID --socket PATH [--ready-fd N]
    [--root ROOT]`` (the root only names the process in ``ps``).

    Parsed by hand rather than with argparse, which (with ``re`` and ``gettext``) costs
    a fifth of this process's start-up.  Accepts ``--opt value`` and ``--opt=value``;
    anything else exits with status 2 and the usage line, as argparse would.
    """
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(USAGE + "\n")
        raise SystemExit(0)
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name not in ("--id", "--socket", "--ready-fd", "--root"):
            raise _usage_error(f"unrecognized argument: {arg}")
        if not eq:
            if i + 1 >= len(argv):
                raise _usage_error(f"argument {name}: expected one argument")
            i += 1
            value = argv[i]
        opts[name] = value
        i += 1
    missing = [n for n in ("--id", "--socket") if n not in opts]
    if missing:
        raise _usage_error(f"the following arguments are required: {', '.join(missing)}")
    ready_fd: int | None = None
    if "--ready-fd" in opts:
        try:
            ready_fd = int(opts["--ready-fd"])
        except ValueError:
            raise _usage_error(
                f"argument --ready-fd: invalid int value: {opts['--ready-fd']!r}"
            ) from None
    return opts["--id"], opts["--socket"], ready_fd, opts.get("--root")


def serve(sandbox_id: str, socket_path: str, ready_fd: int | None, root: str | None = None) -> None:
    """Be sandbox ``sandbox_id`` until told to exit: the cold start's ``main`` and the
    template's forked child both end here.  With ``root`` (a cold start), the process
    names itself in ``ps`` once it is ready (a forked one was named by the template)."""
    host = Host(sandbox_id, socket_path)
    signal.signal(signal.SIGTERM, lambda *_: host._exit())
    host.title_root = root
    host.serve_forever(ready_fd)


def main(argv: list[str] | None = None) -> None:
    serve(*parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
