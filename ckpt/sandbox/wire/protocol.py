"""The control protocol between the CLI and a sandbox process, as types.

One request and one reply type per verb, encoded with msgspec as one JSON line each way
(so a person can still talk to a sandbox with ``socat``).  Every request carries the
protocol version; a sandbox answers a request of another version with
``ProtocolMismatch`` instead of guessing, so a CLI and a sandbox of different code say so
clearly.  Outcomes are enums, never strings for the other side to match.

::

    CLI                                   sandbox (rpc.Server)
    {"verb":"checkpoint","protocol":1,...}  ──▶  decode(REQUESTS) → handler(CheckpointRequest)
    {"ok":true,"result":{...}}             ◀──  encode(CheckpointReply)
    {"ok":false,"kind":"SandboxBusy",...}  ◀──  a CkptError, re-raised by class on the CLI

Counters (``counters``) are the free-form figures a command prints with ``--stats`` and
``--json`` (CRIU's names where they exist); nothing decides anything on them.  Whatever
the CLI acts on is a typed field.
"""

from __future__ import annotations

import enum

import msgspec

PROTOCOL = 1
"""Bumped whenever a request or reply changes shape in a way an older peer misreads."""

Counters = dict[str, int | float | str | bool | None]


class Verb(enum.Enum):
    PING = "ping"
    BOOT = "boot"
    RESTORE = "restore"
    CHECKPOINT = "checkpoint"
    PAUSE = "pause"
    RESUME = "resume"
    FINGERPRINT = "fingerprint"
    CONNECTIONS = "connections"
    STOP = "stop"
    TASKS = "tasks"
    COUNTERS = "counters"
    SEND = "send"
    PAGES = "pages"


class Step(enum.Enum):
    """A step of moving a sandbox's connections with its address (``connmove.py``)."""

    PARK = "park"
    CUT = "cut"
    BACK = "back"
    REBUILD = "rebuild"
    LIVE = "live"


class Listener(enum.Enum):
    """What a restored sandbox serves on."""

    HANDED_OVER = "handed over"  # the checkpointed sandbox's socket, with its queue
    BOUND_ANEW = "bound anew"  # a new socket: clients were refused in between


class BindReason(enum.Enum):
    """Why a restore bound its listener anew instead of taking the held one."""

    NO_TEMPLATE = "no template"
    TEMPLATE_UNREACHABLE = "template unreachable"
    NOTHING_HELD = "nothing held"
    NOT_LISTENING = "the held listener no longer listens"
    OTHER_PORT = "the held socket is on another port"
    OTHER_SANDBOX = "the held socket belongs to another sandbox ID"
    IMAGE_NAMES_NO_SANDBOX = "the image names no sandbox"
    REFUSED = "the template refused"

    @property
    def sockets_lost(self) -> bool:
        """Nothing held them any more: clients were refused meanwhile (not a restore
        that chose to bind elsewhere)."""
        return self in (
            BindReason.NO_TEMPLATE,
            BindReason.TEMPLATE_UNREACHABLE,
            BindReason.NOTHING_HELD,
        )


class Handover(enum.Enum):
    """Where a checkpoint that stops the sandbox left its listening socket."""

    TEMPLATE = "template"  # held for the restore: clients queue instead of being refused
    NONE = "none"  # closed: clients are refused until the restore binds anew
    UNKNOWN = "unknown"  # the template did not answer in time: it may hold them


class _Message(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    pass


class Request(_Message, tag_field="verb", kw_only=True):
    protocol: int = PROTOCOL


# -- requests -------------------------------------------------------------------------


class PingRequest(Request, tag="ping"):
    pass


class BootRequest(Request, tag="boot"):
    workload: str
    options: dict[str, int | float | str | bool] = {}
    port: int = 0
    host: str | None = None  # None: 127.0.0.1; else the sandbox's own address (netns.py)
    netns: str | None = None  # the named namespace the listener is made in


class RestoreRequest(Request, tag="restore"):
    image: str
    engine: str | None = None
    stats: bool = False
    background: bool = False
    key_hex: str | None = None
    port: int | None = None  # None: the port the image was listening on
    any_port: bool = False  # that port is taken here: listen on any free one instead
    store_env: dict[str, str] | None = None  # object-store images: the AWS_* settings
    stage_dir: str | None = None  # object-store images: where it is fetched to
    host: str | None = None  # as BootRequest's
    netns: str | None = None
    feed: str | None = None  # post-copy: the page feed's socket (images/pagefeed.py)


class CheckpointRequest(Request, tag="checkpoint"):
    image: str
    leave_running: bool = False
    compression: str = "zstd"
    level: int | None = None
    engine: str | None = None
    stats: bool = False
    key_hex: str | None = None
    force: bool = False
    drain_timeout: float | None = None
    pre_dump: bool = False  # pages only, the sandbox keeps serving (host/precopy.py)
    parent: str | None = None  # the last image of this sandbox: write what is dirty since
    pre_copy: bool = False  # rounds of pre-dumps, then the final freeze
    store_env: dict[str, str] | None = None  # object-store images: the AWS_* settings
    sync: bool = True  # fsync the image; False: one read back at once and removed
    encrypt: bool = False  # seal the image's pieces with the key (statefile/seal.py)


class SendRequest(Request, tag="send"):
    """Write an image down this connection, as ``images.pagexfer`` frames, and then
    reply: nothing of it touches a disk here (a migration's rounds and final image).

    ``pre_dump``: pages only, the sandbox serving throughout; else the kernel's state
    and pages, the kernel frozen meanwhile (left frozen if it was).  ``after``: the
    ``image_id`` of the last image this sandbox wrote or sent, so only the pages
    dirtied since it go (None: every page)."""

    pre_dump: bool = True
    after: str | None = None
    compression: str = "zstd"
    level: int | None = None
    engine: str | None = None
    post_copy: bool = False  # the final image without pages: they are served after


class PagesRequest(Request, tag="pages"):
    """After a ``post_copy`` send, with the kernel still frozen: the pages that image
    left out, down this connection as ``images.pagexfer`` RUN frames and an END, the
    pages the client asks for (``images.pagefeed`` WANT frames it writes meanwhile)
    first (host/pageserver.py).  ``resend``: after a reconnect, only the pages the
    client names first (``AGAIN`` frames, an empty one last), sent or not."""

    resend: bool = False


class PauseRequest(Request, tag="pause"):
    pass


class ResumeRequest(Request, tag="resume"):
    pass


class FingerprintRequest(Request, tag="fingerprint"):
    pass


class ConnectionsRequest(Request, tag="connections"):
    """A migration moving a sandbox's connections with its address (``connmove.py``):
    ``op``: park, cut or back on the source, rebuild or live on the destination;
    ``net`` the sandbox's ``netns.Net`` record; ``path`` the file of their states."""

    op: Step
    net: dict[str, str | int] | None = None
    path: str | None = None
    drain_timeout: float | None = None


class StopRequest(Request, tag="stop"):
    pass


class TasksRequest(Request, tag="tasks"):
    """The simulated kernel's tasks (``ckpt ps``); read-only."""

    limit: int = 4096  # at most this many rows; the reply says how many were left out


class CountersRequest(Request, tag="counters"):
    """The simulated kernel's counters (``ckpt events``); read-only."""


AnyRequest = (
    PingRequest
    | BootRequest
    | RestoreRequest
    | CheckpointRequest
    | PauseRequest
    | ResumeRequest
    | FingerprintRequest
    | ConnectionsRequest
    | StopRequest
    | TasksRequest
    | CountersRequest
    | SendRequest
    | PagesRequest
)

# -- replies --------------------------------------------------------------------------


class PingReply(_Message):
    pid: int
    booted: bool
    frozen: bool
    address: str | None = None
    cpu_usec: int = 0
    busy_with: str | None = None
    sandbox_id: str = ""


class BootReply(_Message):
    address: str | None
    cpu_usec: int


class RestoreReply(_Message):
    address: str | None
    workload: str
    restore_ns: int
    cpu_usec: int
    listener: Listener | None = None  # None: the workload serves no socket
    bind_reason: BindReason | None = None  # set when listener is BOUND_ANEW
    bind_detail: str = ""  # the reason in words, as shown (e.g. the template's error)
    held_for: str = ""  # the sandbox ID whose held sockets the template may now close
    counters: Counters = {}
    stats: dict[str, object] | None = None
    stats_text: str | None = None


class CheckpointReply(_Message):
    checkpoint_ns: int
    cpu_usec: int
    stopping: bool
    handover: Handover | None = None  # None: the sandbox keeps running, or serves no socket
    handover_detail: str = ""  # why not, when handover is NONE or UNKNOWN
    counters: Counters = {}
    stats: dict[str, object] | None = None
    stats_text: str | None = None
    rounds: list[dict[str, object]] | None = None  # pre-copy rounds, oldest first


class FrozenReply(_Message):
    frozen: bool


class FingerprintReply(_Message):
    fingerprint: str  # a digest of everything a process in the sandbox could observe
    describe: str  # the same, in words a person can compare


class StopReply(_Message):
    stopping: bool = True


class ConnectionsReply(_Message):
    connections: int = 0  # parked, cut, given back, rebuilt or made live


class TaskInfo(_Message):
    """One task (thread) as ``ps`` shows it."""

    tid: int
    tgid: int
    ppid: int  # the parent task's tid; 0 for init
    comm: str
    state: str  # R, S, T or Z, as /proc/PID/stat
    threads: int  # live threads of its thread group
    cpu_ns: int  # its thread group's user + system time
    exit_code: int | None = None


class TasksReply(_Message):
    tasks: list[TaskInfo]
    omitted: int = 0  # tasks past the request's limit


class CountersReply(_Message):
    """The kernel's figures at one moment (``booted`` False: none yet)."""

    booted: bool
    frozen: bool
    cpu_usec: int  # the sandbox process's own CPU (user + system)
    uptime_ns: int = 0  # the kernel's monotonic clock
    tasks: int = 0
    processes: int = 0
    zombies: int = 0
    pages_allocated: int = 0
    pages_dirty: int = 0
    pages_unfetched: int = 0
    sockets: int = 0
    open_files: int = 0
    timers: int = 0
    http_requests: int = 0
    restores: int = 0


REPLIES: dict[type[Request], type[_Message]] = {
    PingRequest: PingReply,
    BootRequest: BootReply,
    RestoreRequest: RestoreReply,
    CheckpointRequest: CheckpointReply,
    PauseRequest: FrozenReply,
    ResumeRequest: FrozenReply,
    FingerprintRequest: FingerprintReply,
    ConnectionsRequest: ConnectionsReply,
    StopRequest: StopReply,
    TasksRequest: TasksReply,
    CountersRequest: CountersReply,
    SendRequest: CheckpointReply,
    PagesRequest: CheckpointReply,
}
"""The reply type of each request type: the client decodes ``result`` as this."""


class Envelope(msgspec.Struct, omit_defaults=True):
    """A reply on the wire: the verb's reply in ``result``, or a ``CkptError``'s class
    name and message."""

    ok: bool
    result: msgspec.Raw = msgspec.Raw(b"null")
    kind: str | None = None
    error: str | None = None


_encoder = msgspec.json.Encoder()
_request_decoder = msgspec.json.Decoder(AnyRequest)
_envelope_decoder = msgspec.json.Decoder(Envelope)
_reply_decoders: dict[type[_Message], msgspec.json.Decoder] = {}


def encode(message: msgspec.Struct) -> bytes:
    """One line: the message as JSON and a newline."""
    return _encoder.encode(message) + b"\n"


class _Version(msgspec.Struct):
    protocol: int = 0


_version_decoder = msgspec.json.Decoder(_Version)


class ProtocolMismatch(ValueError):
    """A well-formed request of another protocol version."""


class BadRequest(ValueError):
    """Anything that is not a request of this protocol."""


def decode_request(line: bytes) -> Request:
    """A request line as its type.  A request of another protocol version raises
    ``ProtocolMismatch`` (checked first: an older or newer request may not decode at
    all); anything else malformed raises ``BadRequest``."""
    try:
        request = _request_decoder.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        try:  # a request without the field is older than the field: protocol 0
            theirs = _version_decoder.decode(line).protocol
        except (msgspec.DecodeError, msgspec.ValidationError):
            theirs = PROTOCOL
        if theirs != PROTOCOL:
            raise _mismatch(theirs) from None
        raise BadRequest(str(exc)) from None
    if request.protocol != PROTOCOL:
        raise _mismatch(request.protocol)
    return request


def _mismatch(theirs: int) -> ProtocolMismatch:
    return ProtocolMismatch(
        f"the request speaks control protocol {theirs}, this sandbox speaks {PROTOCOL}: "
        "use the ckpt that started the sandbox, or restart it"
    )


def decode_envelope(line: bytes) -> Envelope:
    return _envelope_decoder.decode(line)


def decode_reply(request: Request, raw: bytes) -> _Message:
    """``result`` of the reply to ``request``, as that verb's reply type."""
    cls = REPLIES[type(request)]
    dec = _reply_decoders.get(cls)
    if dec is None:
        dec = _reply_decoders[cls] = msgspec.json.Decoder(cls)
    return dec.decode(raw)


def ok(reply: msgspec.Struct) -> bytes:
    return encode(Envelope(True, msgspec.Raw(_encoder.encode(reply))))


def failure(kind: str, error: str) -> bytes:
    return encode(Envelope(False, kind=kind, error=error))


def verb_of(request: Request) -> str:
    """The request's verb, as on the wire (the struct's tag)."""
    return type(request).__struct_config__.tag  # type: ignore[return-value]
