"""Sandbox lifecycle as library functions: run, list, state, pause, resume, set_cpu, kill,
delete, checkpoint, restore.  They raise ``SandboxError`` (or another ``CkptError``) and
never print.

A sandbox is a detached process (its own session) running ``ckpt.sandbox.host.process``,
placed in cgroup ``ckpt/<root hash>/ID`` (``Root.cgroup_name``) *before it executes
anything* (``spawn.py``), so even interpreter start-up is charged to the cgroup and runs
under its CPU quota.  The verbs live here; what they stand on has a module each:
``spawn`` makes a sandbox (record, cgroup, process) and undoes it, ``group`` is its
cgroup, ``pids`` verifies and stops its processes, ``deadlines`` says how long to wait,
``outcomes`` words how a checkpoint or restore ended.

The rule for failures: a failed ``run`` or ``restore`` leaves no process, cgroup or
state directory behind; a failed ``checkpoint`` leaves the sandbox as it was.

Every sandbox stays accounted for: its record is written before anything else, then
again as soon as its cgroup and then its process exist (``status: creating`` until the
command ends, with the creating CLI's pid), so a CLI killed at any point leaves a record
that ``list`` shows and ``delete --force`` cleans.  Nothing in a record is trusted: a
cgroup must be this root's own name for the ID, a pid must match its start time and be in
that cgroup (or be the peer of the sandbox's socket), and the socket must be a socket.

Fault point: ``CKPT_FAULT=pause:VERB:STEP`` stops the CLI at that step
(``testhooks.py``).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckpt.engines import ENGINE_NAMES
from ckpt.errors import (
    CgroupError,
    CkptError,
    ImageNotFound,
    SandboxError,
    SandboxGone,
    SandboxNotFound,
    SandboxRefused,
    SandboxTimeout,
)
from ckpt.sandbox.client import template_client
from ckpt.sandbox.client.deadlines import (
    CHECKPOINT_TIMEOUT_ENV,
    RESTORE_TIMEOUT_ENV,
    checkpoint_timeout,
    restore_timeout,
)
from ckpt.sandbox.client.group import cpu_usec, freezable, open_cgroup, own_group, remove_cgroup
from ckpt.sandbox.client.outcomes import checkpoint_died, image_identity, listener_notes, said
from ckpt.sandbox.client.pids import (
    EXIT_TIMEOUT_S,
    REAP_TIMEOUT_S,
    alive,
    kill_pid,
    stop_all,
    wait_dead,
    wait_reaped,
)
from ckpt.sandbox.client.spawn import discard, finish, make_sandbox, note_start, remove_files
from ckpt.sandbox.client.status import CHECKPOINTED, KILLED, STOPPED_KEY, live, refresh, unreadable
from ckpt.sandbox.client.testhooks import pause_point
from ckpt.sandbox.wire import handover, rpc, template_proto
from ckpt.sandbox.wire.paths import PAUSED, RUNNING, STOPPED, Root, SandboxState, now_iso
from ckpt.sandbox.wire.timings import (
    CHECKPOINT,
    RESTORE,
    RESUME_TOTAL,
    SANDBOX_CREATE,
    SUSPEND_TOTAL,
    Timings,
)

if TYPE_CHECKING:  # protocol (msgspec) is imported by the commands that talk to a sandbox
    from ckpt.sandbox.wire import protocol as p


@dataclass
class RunResult:
    state: SandboxState
    timings: Timings
    notes: list[str] = field(default_factory=list)


@dataclass
class CheckpointResult:
    state: SandboxState
    image: Path | str  # str: an object-store URL
    timings: Timings
    stats: dict[str, Any] | None = None
    stats_text: str | None = None
    rounds: list[dict[str, Any]] | None = None  # pre-copy rounds, oldest first


@dataclass
class Prepared:
    """A sandbox process made for a restore that has not been asked for yet
    (``prepare_restore``): its record says creating, its cgroup and process exist."""

    st: SandboxState
    mgr: Any
    spawned: Any
    notes: list[str]
    handed_over: bool
    created: str | None = None  # the replaced sandbox's creation time, which it keeps


@dataclass
class RestoreResult:
    state: SandboxState
    timings: Timings
    stats: dict[str, Any] | None = None
    stats_text: str | None = None
    notes: list[str] = field(default_factory=list)


# -- status ----------------------------------------------------------------------------


def list_sandboxes(root: Root) -> list[SandboxState]:
    """Every sandbox under the root; one whose record cannot be read is listed as
    ``unreadable`` (``delete --force`` removes it), never left out."""
    out = []
    for sandbox_id in root.ids():
        try:
            out.append(refresh(root, sandbox_id))
        except SandboxNotFound:
            continue  # deleted meanwhile
        except SandboxError:
            out.append(unreadable(sandbox_id))
    return out


def _call(root: Root, st: SandboxState, request: p.Request, **kw: Any) -> Any:
    """An RPC to the sandbox on its own socket (this root's path for the ID, never the
    record's), which must be a socket whose listener is the recorded pid; returns the
    request's reply type (``protocol.REPLIES``)."""
    return rpc.call(
        root.socket_path(st.id),
        request,
        what=f"sandbox {st.id}",
        peer_pid=st.pid,
        **kw,
    )


def _check_engine(engine: str | None) -> None:
    if engine is not None and engine not in ENGINE_NAMES:
        raise SandboxError(f"unknown engine {engine!r}: choose one of {', '.join(ENGINE_NAMES)}")


# -- commands --------------------------------------------------------------------------


def run(
    root: Root,
    sandbox_id: str,
    workload: str,
    *,
    cpus: float | None = None,
    port: int = 0,
    engine: str | None = None,
    ignore_cgroups: bool = False,
    options: dict[str, Any] | None = None,
    template: bool | None = None,
    bridge: str | None = None,
    ip: str | None = None,
) -> RunResult:
    """Start a sandbox running ``workload``; returns once it is ready (and listening).
    With ``bridge`` and ``ip`` it listens on an address of its own (``wire/netns.py``)."""
    _check_engine(engine)
    if root.exists(sandbox_id):
        st = refresh(root, sandbox_id)
        raise SandboxError(
            f"sandbox {sandbox_id} already exists ({st.status}); `ckpt delete {sandbox_id}` first"
        )
    from ckpt.sandbox.wire import netns

    net = netns.plan(netns.root_hash(root.cgroup_parent()), sandbox_id, bridge, ip)
    if net is not None:
        netns.check_unused(root, net)
    notes: list[str] = []
    timings = Timings()
    t0 = time.perf_counter_ns()
    st, _mgr, spawned = make_sandbox(
        root,
        sandbox_id,
        cpus,
        ignore_cgroups,
        engine,
        workload,
        notes,
        template,
        "run",
        extra={netns.KEY: net.record()} if net else None,
    )
    timings.phases_ns[SANDBOX_CREATE] = spawned.create_ns
    try:
        from ckpt.sandbox.wire.protocol import BootRequest

        if net is not None:
            netns.create(net)
        request = BootRequest(
            workload=workload, port=port, options=options or {}, **netns.request_fields(net)
        )
        reply: p.BootReply = _call(root, st, request, timeout=120)
    except BaseException:
        discard(root, st)
        raise
    timings.phases_ns["Run"] = time.perf_counter_ns() - t0
    st.address = reply.address
    st.status = RUNNING
    finish(root, st, "run")
    note_start(timings, root, spawned)
    return RunResult(st, timings, notes)


def state(root: Root, sandbox_id: str) -> SandboxState:
    return refresh(root, sandbox_id)


def pause(root: Root, sandbox_id: str, *, cgroup: bool = True) -> SandboxState:
    """Freeze the kernel (HTTP requests start waiting), then the cgroup (not with
    ``cgroup=False``: a migration's final image, which the process writes at once)."""
    st = live(root, sandbox_id, "pause")
    if st.status == PAUSED:
        return st
    from ckpt.sandbox.wire.protocol import PauseRequest, ResumeRequest

    _call(root, st, PauseRequest())
    mgr = freezable(open_cgroup(st.cgroup and own_group(root, st, strict=True))) if cgroup else None
    if mgr is not None:
        try:
            mgr.freeze()
        except CgroupError:  # leave it as it was: thawed and running
            with contextlib.suppress(CgroupError):
                mgr.thaw()
            _call(root, st, ResumeRequest())
            raise
    st.status = PAUSED
    root.write(st)
    return st


def resume(root: Root, sandbox_id: str) -> SandboxState:
    """Thaw the cgroup, then the kernel; waiting HTTP requests are answered."""
    st = live(root, sandbox_id, "resume")
    if st.status == RUNNING:
        return st
    mgr = freezable(open_cgroup(st.cgroup and own_group(root, st, strict=True)))
    if mgr is not None:
        mgr.thaw()
    from ckpt.sandbox.wire.protocol import ResumeRequest

    _call(root, st, ResumeRequest())
    st.status = RUNNING
    root.write(st)
    return st


def set_cpu(root: Root, sandbox_id: str, cpus: float | None) -> SandboxState:
    """Put a running sandbox under a quota of ``cpus`` CPUs (None: uncapped) through its
    own cgroup, and record it.  A sandbox without a cgroup can only stay uncapped."""
    st = live(root, sandbox_id, "set the CPU quota of")
    if st.cgroup is None:
        if cpus is not None:
            raise CgroupError(
                f"sandbox {sandbox_id} runs without a cgroup, so quota {cpus:g} cannot be "
                "applied; start it without --ignore-cgroups or use --cpu uncapped"
            )
        return st
    group = own_group(root, st, strict=True)
    mgr = open_cgroup(group)
    if mgr is None:
        raise CgroupError(
            f"cgroup {group} of sandbox {sandbox_id} is gone; `ckpt kill {sandbox_id}` and "
            "run it again"
        )
    mgr.set_cpu_quota(cpus)
    st.cpu = cpus
    root.write(st)
    return st


def _release_held(root: Root, sandbox_id: str) -> None:
    """Have the template close the sockets it holds for ``sandbox_id``, if it holds any."""
    path = template_proto.socket_path(str(root.path))
    if os.path.exists(path):
        handover.release(path, sandbox_id)


def kill(root: Root, sandbox_id: str) -> SandboxState:
    """SIGKILL every process of the sandbox (its cgroup's members, its verified pid) and
    free the cgroup; the sockets a checkpoint handed to the template for it are closed
    too.  Succeeds only when nothing of it is left."""
    st = refresh(root, sandbox_id)
    group = own_group(root, st, strict=True)
    _release_held(root, sandbox_id)
    if st.status != STOPPED:  # one that had already stopped keeps its reason
        st.extra[STOPPED_KEY] = {"reason": KILLED, "signal": "KILL"}
    stop_all(root, st, group)
    _clean_checkpoint(st)
    st.extra.pop("checkpointing_to", None)
    st.status = STOPPED
    st.address = None
    st.extra.pop("creating_by", None)
    try:
        root.write(st)
    except CkptError as exc:
        raise SandboxError(
            f"sandbox {sandbox_id} was stopped, but its record was not updated ({exc}); "
            f"`ckpt delete --force {sandbox_id}` removes it"
        ) from exc
    return st


def delete(root: Root, sandbox_id: str, *, force: bool = False) -> None:
    """Remove a stopped sandbox's files (and, with ``force``, kill a running one first).
    Writes no record on the way, so it works on a full disk.  With ``force``, a record
    that cannot be read is removed too, after whatever of the sandbox can be found
    without it (this root's group for the ID, the process serving its socket)."""
    try:
        st = refresh(root, sandbox_id)
    except SandboxNotFound:
        raise
    except SandboxError:
        if not force:
            raise
        st = unreadable(sandbox_id)
    group = own_group(root, st, strict=True)
    if st.status != STOPPED and not force:
        raise SandboxRefused(
            f"sandbox {sandbox_id} is {st.status}; `ckpt kill {sandbox_id}` first or pass --force"
        )
    _release_held(root, sandbox_id)
    stop_all(root, st, group)
    _clean_checkpoint(st)
    from ckpt.sandbox.wire import netns

    netns.remove_recorded(root, st, strict=not force)
    remove_files(root, sandbox_id)


HANG_UP_TIMEOUT_S = 5.0


def hang_up(root: Root, sandbox_id: str, timeout: float = HANG_UP_TIMEOUT_S) -> bool:
    """Have a running or paused sandbox shut down its client connections and exit (its
    cgroup thawed for that), so its clients hear at once: after a SIGKILL they wait
    while the kernel frees the process's memory, which takes a while for a large one.
    Best effort, returns whether it answered; ``delete`` removes what is left."""
    from ckpt.sandbox.wire.protocol import StopRequest

    try:
        st = live(root, sandbox_id, "hang up")
        mgr = freezable(open_cgroup(st.cgroup and own_group(root, st, strict=True)))
        if mgr is not None:
            mgr.thaw()
        _call(root, st, StopRequest(), timeout=timeout)
    except CkptError:
        return False
    return True


def _clean_checkpoint(st: SandboxState) -> None:
    """Remove what a checkpoint cut short left beside its image (a CLI killed while the
    sandbox wrote): ``statefile.clean_stale`` touches only leftovers of dead writers."""
    image = st.extra.get("checkpointing_to")
    if not isinstance(image, str) or not image:
        return
    from ckpt import statefile

    if st.pid and st.pid_start:
        wait_reaped(st.pid, st.pid_start, REAP_TIMEOUT_S)
    from ckpt.images import Location

    with contextlib.suppress(CkptError, OSError):
        where = Location.parse(image)
        if where.path is not None:  # a store keeps no temporary files of its own
            statefile.clean_stale(where.path)


def checkpoint(
    root: Root,
    sandbox_id: str,
    image: Path | str,
    *,
    leave_running: bool = False,
    compression: str = "zstd",
    level: int | None = None,
    engine: str | None = None,
    stats: bool = False,
    key: bytes | None = None,
    force: bool = False,
    drain_timeout: float | None = None,
    options: dict[str, Any] | None = None,
    force_children: bool = False,
) -> CheckpointResult:
    """Have the sandbox write its image; it stops afterwards unless ``leave_running``.

    A sandbox that stops first drains: it stops accepting, lets accepted requests finish
    (for at most ``drain_timeout`` seconds, else the checkpoint fails and it goes on
    serving), and hands its listening socket and idle connections to the template for
    the restore (``wire/handover.py``)."""
    _check_engine(engine)
    from ckpt.images import Location
    from ckpt.images.remote import attach, remote_before, request_fields

    where = Location.of(image)  # a directory, file:// or a store's URL: decided here
    remote = request_fields(where)
    if force and not force_children and where.is_local:
        _refuse_parent_of_others(where.path)
    st = live(root, sandbox_id, "checkpoint")
    if not leave_running and not (options or {}).get("pre_dump"):
        template_client.wait_warming(root.path)  # somewhere for its sockets to go
    t0 = time.perf_counter_ns()
    engine = engine or st.engine
    mgr = open_cgroup(own_group(root, st, strict=True))
    refreeze = freezable(mgr) if st.status == PAUSED else None
    if refreeze is not None:
        refreeze.thaw()  # the kernel stays frozen; the process must run to write the image
    cpu0 = cpu_usec(mgr)
    timings = Timings()
    from ckpt.sandbox.wire.protocol import CheckpointRequest, Handover

    request = CheckpointRequest(
        image=str(where),
        leave_running=leave_running,
        compression=compression,
        level=level,
        engine=engine,
        stats=stats,
        key_hex=key.hex() if key else None,
        force=force,
        drain_timeout=drain_timeout,
        **(options or {}),  # pre_dump, parent, pre_copy: see precopy_options.py
    )
    request = attach(request, remote)
    image = where.path if where.path is not None else str(where)
    before = remote_before(str(where)) if remote else image_identity(image)
    st.extra["checkpointing_to"] = request.image  # kill and delete clean its leftovers
    root.write(st)
    pause_point("checkpoint:sending")
    deadline = checkpoint_timeout()
    try:
        with timings.phase(CHECKPOINT):
            reply: p.CheckpointReply = _call(root, st, request, timeout=deadline)
    except CkptError as exc:
        _checkpoint_failed(root, st, exc, deadline, image, before, key)
        if refreeze is not None:
            refreeze.freeze()
        st.extra.pop("checkpointing_to", None)
        with contextlib.suppress(CkptError):
            root.write(st)
        raise
    pause_point("checkpoint:replied")
    if reply.stopping:
        if not wait_dead(st.pid, st.pid_start, EXIT_TIMEOUT_S):
            kill_pid(st.pid, st.pid_start)
        cpu1 = cpu_usec(mgr)
        remove_cgroup(root.cgroup_name(sandbox_id))
        st.status = STOPPED
        st.address = None
        st.extra[STOPPED_KEY] = {"reason": CHECKPOINTED}
    else:
        cpu1 = cpu_usec(mgr)
        if refreeze is not None:
            refreeze.freeze()
    used = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
    _settle(timings, SUSPEND_TOTAL, t0, used, reply)
    timings.counters["checkpoint_in_sandbox_ms"] = round(reply.checkpoint_ns / 1e6, 3)
    if reply.handover is not None:
        timings.counters["handover"] = said(reply.handover.value, reply.handover_detail)
    if (lasting := _lasting(root, request.image, remote)) is not None:
        st.extra["last_checkpoint"] = lasting  # a working copy leaves the last real one
    st.extra["handover"] = "template" if reply.handover is Handover.TEMPLATE else ""
    st.extra.pop("checkpointing_to", None)
    try:
        root.write(st)
    except CkptError as exc:
        raise SandboxError(
            f"checkpoint of {sandbox_id} was written to {request.image} (sandbox "
            f"{st.status}), but its record was not updated: {exc}"
        ) from exc
    return CheckpointResult(st, image, timings, reply.stats, reply.stats_text, reply.rounds)


def _refuse_parent_of_others(image: Path | str) -> None:
    """Refuse to ``--force`` over an image that another image beside it names as its
    parent: that child would be broken, and it would be found out only at its restore."""
    from ckpt.statefile.chain import children

    kids = children(image)
    if kids:
        more = f" and {len(kids) - 1} more" if len(kids) > 1 else ""
        raise SandboxRefused(
            f"{Path(image).absolute()} is the parent of the image {kids[0]}{more}; replacing it "
            "would break that chain: write to another path, or pass --force-children"
        )


def _lasting(root: Root, image: str, remote: dict[str, Any]) -> str | None:
    """``image`` as a sandbox's record keeps it: its final location, or None for a
    working copy inside the root (a migration's rounds, sent or received), which is
    removed when the migration ends and must not be named afterwards."""
    if remote:
        return image
    path = os.path.realpath(image)
    top = os.path.realpath(root.path)
    return None if os.path.commonpath([path, top]) == top else path


def _checkpoint_failed(
    root: Root,
    st: SandboxState,
    exc: CkptError,
    deadline: float,
    image: Path | str,
    before: Any,
    key: bytes | None,
) -> None:
    """Raise what a failed checkpoint RPC means when the sandbox is still writing (the
    deadline passed) or died (its remains are removed, and the message says what is left
    at ``image``); return when it is alive and was left as it was."""
    sandbox_id = st.id
    if isinstance(exc.__cause__, TimeoutError) and alive(st.pid, st.pid_start):
        raise SandboxTimeout(
            f"checkpoint of {sandbox_id} did not finish within {deadline:g} s; the "
            f"sandbox is still at it: `ckpt state {sandbox_id}` shows when it ends, "
            f"`ckpt kill {sandbox_id}` stops it (set {CHECKPOINT_TIMEOUT_ENV} to wait "
            "longer)"
        ) from exc
    if isinstance(exc, SandboxGone):  # EOF can come a moment before the exit shows
        wait_dead(st.pid, st.pid_start, EXIT_TIMEOUT_S)
    if not alive(st.pid, st.pid_start):
        from ckpt import statefile

        with contextlib.suppress(CkptError):
            stop_all(root, st, root.cgroup_name(sandbox_id))
        wait_reaped(st.pid, st.pid_start, REAP_TIMEOUT_S)
        if isinstance(image, Path):  # a store keeps no temporary files of its own
            statefile.clean_stale(image)
        raise SandboxError(checkpoint_died(sandbox_id, image, before, key, exc)) from exc


def _settle(timings: Timings, total: str, t0: int, cgroup_cpu: int | None, reply: Any) -> None:
    """Close a checkpoint's or restore's timings: phase ``total`` from ``t0`` to now, the
    CPU used (from the sandbox's cgroup, which counts exactly the work inside it, when it
    has one; else what the sandbox process counted, ``reply.cpu_usec``), and the
    sandbox's counters."""
    timings.phases_ns[total] = time.perf_counter_ns() - t0
    if cgroup_cpu is not None:
        timings.cpu_usec, timings.cpu_source = cgroup_cpu, "cgroup"
    else:
        timings.cpu_usec, timings.cpu_source = reply.cpu_usec, "process"
    timings.counters = dict(reply.counters)


def restore(
    root: Root,
    sandbox_id: str,
    image: Path | str,
    *,
    cpus: float | None = None,
    engine: str | None = None,
    stats: bool = False,
    background: bool = False,
    key: bytes | None = None,
    port: int | None = None,
    ignore_cgroups: bool = False,
    template: bool | None = None,
    prepared: Prepared | None = None,
    any_port: bool = False,
    feed: str | None = None,
) -> RestoreResult:
    """Start a new sandbox process (in its cgroup, under its quota) from an image.

    Replaces a stopped sandbox of the same ID; refuses a running one.  On failure,
    nothing of the new sandbox is left behind.  With ``prepared`` (the same ID's, from
    ``prepare_restore``), its process is the one restored: only the image is loaded.
    With ``any_port``, a port that is taken here gives way to any free one.  ``feed``:
    a post-copy migration's page feed, which brings the pages the image lacks.
    """
    _check_engine(engine)
    from ckpt.images import Location
    from ckpt.images.remote import STAGE_DIR, attach, request_fields

    where = Location.of(image)
    remote = request_fields(where, background=background)  # a store's settings
    t0 = time.perf_counter_ns()
    image = where.path if where.path is not None else Path(os.devnull)  # a store's: no size
    if where.is_local and not image.exists():
        if prepared is not None:
            discard(root, prepared.st)
        raise ImageNotFound(f"no image at {image}: check --image-path")
    if prepared is None:
        prepared = prepare_restore(root, sandbox_id, cpus, engine, ignore_cgroups, template)
    st, mgr, spawned, notes = prepared.st, prepared.mgr, prepared.spawned, prepared.notes
    handed_over = prepared.handed_over
    timings = Timings()
    timings.phases_ns[SANDBOX_CREATE] = spawned.create_ns
    from ckpt.sandbox.wire import netns
    from ckpt.sandbox.wire.protocol import Listener, RestoreRequest

    request = RestoreRequest(
        image=str(where),
        engine=engine,
        stats=stats,
        background=background,
        key_hex=key.hex() if key else None,
        port=port,
        any_port=any_port,
        feed=feed,
        **netns.request_fields(netns.of(root, st)),
    )
    request = attach(request, remote, stage=root.dir(sandbox_id) / STAGE_DIR)
    deadline = restore_timeout(image, cpus if mgr is not None else None)
    try:
        try:
            reply: p.RestoreReply = _call(root, st, request, timeout=deadline)
        except SandboxError as exc:
            if not isinstance(exc.__cause__, TimeoutError):
                raise
            raise SandboxTimeout(
                f"restore of {sandbox_id} did not finish within {deadline:g} s; the sandbox "
                f"was removed (set {RESTORE_TIMEOUT_ENV} for a slower restore)"
            ) from exc
        cpu = cpu_usec(mgr)
    except BaseException:
        discard(root, st)
        raise
    timings.phases_ns[RESTORE] = reply.restore_ns
    _settle(timings, RESUME_TOTAL, t0, cpu, reply)
    if reply.listener is Listener.HANDED_OVER:
        timings.counters["listener"] = reply.listener.value
    elif reply.listener is Listener.BOUND_ANEW:
        timings.counters["listener"] = said(reply.listener.value, reply.bind_detail)
    if not (workload := reply.workload) and where.is_local:
        workload = _image_workload(image)  # the kernel names none: the image may
    st.workload = workload or "unknown"
    st.address = reply.address
    st.status = RUNNING
    st.restored_from = _lasting(root, request.image, remote)
    st.created, st.restored_at = prepared.created or st.created, now_iso()
    finish(root, st, "restore")
    note_start(timings, root, spawned)
    if reply.held_for == sandbox_id:  # on the handed-over sockets: the template lets go
        _release_held(root, sandbox_id)
    else:
        notes.extend(listener_notes(reply, handed_over))
    return RestoreResult(st, timings, reply.stats, reply.stats_text, notes)


def prepare_restore(
    root: Root,
    sandbox_id: str,
    cpus: float | None = None,
    engine: str | None = None,
    ignore_cgroups: bool = False,
    template: bool | None = None,
    net: Any = None,
    attached: bool = True,
) -> Prepared:
    """The first half of ``restore``: the sandbox's record, cgroup and process, waiting
    for its image, so that a restore whose image is still arriving (a migration) costs
    only the load once it is there.  ``discard(root, prepared.st)`` undoes it.  ``net``
    (a ``netns.Net``: an arriving sandbox's address) stands for the stopped one's; not
    ``attached``, its link stays cut off until the migration's ``connections.live``."""
    _check_engine(engine)
    from ckpt.sandbox.wire import netns

    old = _clear_stopped(root, sandbox_id)
    if net is None and old is not None:
        net = netns.of(root, old)  # its address comes back
    handed_over = old is not None and old.extra.get("handover") == "template"
    created = old.created if old is not None and isinstance(old.created, str) else None
    notes: list[str] = []
    st, mgr, spawned = make_sandbox(
        root,
        sandbox_id,
        cpus,
        ignore_cgroups,
        engine,
        "(restoring)",
        notes,
        template,
        "restore",
        extra={netns.KEY: net.record()} if net else None,
    )
    if net is not None:
        try:
            if netns.ensure(
                net, attached=attached
            ):  # made anew: what the template holds is unreachable
                _release_held(root, sandbox_id)
                handed_over = False
        except BaseException:
            discard(root, st)
            raise
    return Prepared(st, mgr, spawned, notes, handed_over, created or None)


def _clear_stopped(root: Root, sandbox_id: str) -> SandboxState | None:
    """Remove what is left of a stopped sandbox of this ID before a restore into it
    (refusing one that is not stopped); returns its record, if there was one."""
    if not root.exists(sandbox_id):
        return None
    old = refresh(root, sandbox_id)
    if old.status != STOPPED:
        raise SandboxError(
            f"sandbox {sandbox_id} is {old.status}; restore into a new ID, or kill and "
            f"delete it first"
        )
    stop_all(root, old, own_group(root, old, strict=True))
    remove_files(root, sandbox_id)
    return old


def _image_workload(image: Path) -> str | None:
    try:
        from ckpt import statefile

        return statefile.open_image_unverified(image).metadata.get("workload")
    except CkptError:
        return None


def fingerprint(root: Root, sandbox_id: str) -> p.FingerprintReply:
    """The kernel's fingerprint and description (for before/after comparisons)."""
    from ckpt.sandbox.wire.protocol import FingerprintRequest

    st = live(root, sandbox_id, "fingerprint")
    return _call(root, st, FingerprintRequest())


def read_key(path: Path | None) -> bytes | None:
    """The HMAC key from ``--key-file``, read as ``ckpt inspect statefile`` reads it."""
    if path is None:
        return None
    from ckpt import statefile

    return statefile.read_key_file(str(path))


def parse_cpu(value: str | float | None) -> float | None:
    """``--cpu``: a positive number of CPUs, or ``uncapped``/``max`` for no quota."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("uncapped", "max", "none", ""):
        return None
    try:
        cpus = float(value)
    except ValueError:
        raise SandboxError(
            f"bad CPU quota {value!r}: give a positive number such as 0.5, or 'uncapped'"
        ) from None
    if not cpus > 0 or cpus != cpus:
        raise SandboxError(f"bad CPU quota {value!r}: must be a positive number of CPUs")
    return cpus
