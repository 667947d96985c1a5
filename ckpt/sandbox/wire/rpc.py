"""Sandbox control: the typed requests of ``protocol.py``, one JSON line each way over a
Unix stream socket, one request per connection.

The server decodes each line as a ``protocol.Request`` and hands it to the handler for
its type, which returns that verb's reply struct; a line of another protocol version,
or no request at all, is answered with one ``SandboxError`` line saying so.  The server
runs one *exclusive* request at a time; a second one arriving meanwhile is answered at
once with ``SandboxBusy`` rather than queued, so two concurrent checkpoints can never
interleave.  Cheap read-only verbs (``ping``) bypass the lock.  A *streaming* verb
(``send``) writes ``images.pagexfer`` frames on the connection before its reply line;
its handler takes the connection's ``sendall`` as a second argument, and ``call``
hands each frame's event to ``on_event``.  A failure carries the
``CkptError`` subclass's name, which the client re-raises, so an ``IntegrityError``
inside the sandbox reaches the CLI as an ``IntegrityError``.

This module is imported by the sandbox process: stdlib only, no typer or rich, and
``protocol`` (msgspec) only once a request arrives or is sent, so neither a sandbox's
start-up nor a CLI command that talks to no sandbox pays for it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading

from ckpt import errors
from ckpt.errors import CkptError, SandboxBusy, SandboxError, SandboxGone, SandboxTimeout

# Not ``typing.TYPE_CHECKING``: the sandbox process imports this module before it is
# ready, and ``typing`` is a measurable share of that start-up; annotations are strings.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    import msgspec

    from ckpt.sandbox.wire.protocol import Request

    Handler = Callable[[Any], msgspec.Struct]

MAX_MESSAGE = 1 << 20
STREAM_SEND_TIMEOUT_S = 120.0  # a reader that stops taking frames for this long is gone


def _read_line(sock: socket.socket, *, exact: bool = False) -> bytes:
    """One message line.  ``exact``: nothing past its newline is taken from the
    socket (a duplex verb's client writes frames right after its request)."""
    buf = bytearray()
    while not buf.endswith(b"\n"):
        chunk = sock.recv(65536, socket.MSG_PEEK if exact else 0)
        if not chunk:
            break
        if exact:
            end = chunk.find(b"\n")
            chunk = sock.recv(len(chunk) if end < 0 else end + 1)  # there: no wait
        buf += chunk
        if len(buf) > MAX_MESSAGE:
            raise ValueError("message larger than 1 MiB")
    return bytes(buf)


def _error_kind(exc: BaseException) -> str:
    for cls in type(exc).__mro__:
        if (
            isinstance(cls, type)
            and issubclass(cls, CkptError)
            and getattr(errors, cls.__name__, None) is cls
        ):
            return cls.__name__
    return "SandboxError"


class Server:
    """Serves ``handlers`` on a Unix socket from a background thread.

    ``handlers`` maps each verb (``protocol.Verb`` values, the request types' tags) to a
    function that takes that verb's request type and returns its reply type; keyed by
    name so that a sandbox can start serving before it imports ``protocol``.
    ``concurrent`` names the verbs that bypass the exclusive lock."""

    def __init__(
        self,
        path: Path,
        handlers: dict[str, Handler],
        *,
        concurrent: frozenset[str] = frozenset({"ping"}),
        streams: frozenset[str] = frozenset(),
        duplex: frozenset[str] = frozenset(),
        on_error: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        """``streams``: the verbs whose handler writes frames on the connection
        (``handler(request, sendall)``); ``duplex``: those that also read the
        client's frames meanwhile (``handler(request, connection)``)."""
        self.path = path
        self.handlers = handlers
        self.concurrent = concurrent
        self.streams = streams | duplex
        self.duplex = duplex
        self.on_error = on_error
        self.lock = threading.Lock()
        self.busy_with: str | None = None
        self._sock: socket.socket | None = None
        self._after_reply: list[Callable[[], None]] = []

    def start(self) -> None:
        """Bind (replacing a stale socket file), listen, and accept in a daemon thread."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._sock = listen_unix(self.path, 16)
        threading.Thread(target=self._accept_loop, name="rpc-accept", daemon=True).start()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def after_reply(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the current reply has been sent (e.g. exit after checkpoint)."""
        self._after_reply.append(fn)

    def _accept_loop(self) -> None:
        while self._sock is not None:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        from ckpt.sandbox.wire import protocol

        with conn:
            try:
                request = protocol.decode_request(_read_line(conn, exact=True))
            except protocol.ProtocolMismatch as exc:
                self._send(conn, protocol.failure("SandboxError", str(exc)))
                return
            except (ValueError, OSError) as exc:  # BadRequest, too long, connection lost
                self._send(conn, protocol.failure("SandboxError", f"bad request: {exc}"))
                return
            verb = protocol.verb_of(request)
            handler = self.handlers.get(verb)
            if handler is None:
                self._send(conn, protocol.failure("SandboxError", f"unknown verb {verb!r}"))
                return
            if verb in self.concurrent:
                self._send(conn, self._call(verb, handler, request))
                return
            if not self.lock.acquire(blocking=False):
                busy = (
                    f"sandbox is busy with {self.busy_with or 'another request'}; "
                    "retry when it finishes"
                )
                self._send(conn, protocol.failure("SandboxBusy", busy))
                return
            try:
                self.busy_with = verb
                if verb in self.streams:
                    conn.settimeout(STREAM_SEND_TIMEOUT_S)
                    handler = _bound(handler, conn if verb in self.duplex else conn.sendall)
                reply = self._call(verb, handler, request)
                callbacks, self._after_reply = self._after_reply, []
            except BaseException:
                self.busy_with = None
                self.lock.release()
                raise
            if callbacks:  # e.g. exit after checkpoint: stay busy until then
                self._send(conn, reply)
                for fn in callbacks:
                    fn()
                return
            # release before replying, so the client's next request never finds us busy
            self.busy_with = None
            self.lock.release()
            self._send(conn, reply)

    def _call(self, verb: str, handler: Handler, request: Request) -> bytes:
        """The handler's reply as a reply line, or its error as a failure line."""
        from ckpt.sandbox.wire import protocol

        try:
            return protocol.ok(handler(request))
        except CkptError as exc:
            return protocol.failure(_error_kind(exc), str(exc))
        except Exception as exc:  # a bug inside the sandbox: report it, keep serving
            if self.on_error is not None:
                self.on_error(verb, exc)
            return protocol.failure(
                "SandboxError",
                f"internal error in sandbox during {verb}: {type(exc).__name__}: {exc}",
            )

    @staticmethod
    def _send(conn: socket.socket, line: bytes) -> None:
        with contextlib.suppress(OSError):  # the client went away; nothing to tell it
            conn.sendall(line)


def listen_unix(path: Path | str, backlog: int) -> socket.socket:
    """A Unix stream socket listening at ``path``, made mode 0600 (the umask around
    ``bind``: never a moment open to others)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    sock.listen(backlog)
    return sock


def _bound(handler: Callable[..., Any], out: Any) -> Handler:
    return lambda request: handler(request, out)


def call(
    path: Path,
    request: Request,
    *,
    timeout: float | None = 30.0,
    what: str = "sandbox",
    peer_pid: int | None = None,
    on_event: Callable[[Any], None] | None = None,
    on_connect: Callable[[socket.socket], None] | None = None,
) -> Any:
    """Send one request and return its verb's reply (``protocol.REPLIES``), re-raising
    the sandbox's error class.

    ``on_event`` (a streaming verb): called with each event of the image the sandbox
    writes before its reply (``pagexfer.read_stream``); what it raises ends the call
    and closes the connection, which fails the sandbox's side.  ``on_connect`` (a
    duplex verb) is given the connection once the request is sent, to write on it
    from another thread while this one reads.

    With ``peer_pid``, ``path`` must be a socket itself (not a symlink to one) whose
    listening process is ``peer_pid`` (``SO_PEERCRED``), so a planted link or a stale
    file never sends the request to another sandbox."""
    from ckpt.sandbox.wire import protocol

    verb = protocol.verb_of(request)
    if peer_pid is not None:
        check_socket_file(path, what)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise SandboxError(
                f"{what} is not answering on {path} ({exc.strerror}); "
                "it may have exited: see `ckpt state`"
            ) from exc
        if peer_pid is not None and (got := peer_of(sock)) != peer_pid:
            raise SandboxError(
                f"{path} is served by pid {got}, not by {what} (pid {peer_pid}); "
                "refusing to talk to it: remove the stray socket"
            )
        try:
            sock.sendall(protocol.encode(request))
            if on_connect is not None:
                on_connect(sock)
            line = _read_line(sock) if on_event is None else _read_stream(sock, on_event)
        except TimeoutError as exc:
            raise SandboxTimeout(f"{what} did not answer {verb} within {timeout:g} s") from exc
        except ValueError as exc:  # longer than MAX_MESSAGE
            raise SandboxError(f"{what} sent a malformed reply to {verb}: {exc}") from exc
        except OSError as exc:
            line = b""
            if not isinstance(exc, ConnectionResetError):
                raise SandboxError(f"{what}: control socket error during {verb}: {exc}") from exc
    finally:
        sock.close()
    if not line:
        raise SandboxGone(f"{what} exited during {verb} without answering")
    try:
        envelope = protocol.decode_envelope(line)
        if envelope.ok:
            return protocol.decode_reply(request, envelope.result)
    except ValueError as exc:  # msgspec's DecodeError and ValidationError are ValueErrors
        raise SandboxError(f"{what} sent a malformed reply to {verb}: {exc}") from exc
    kind = getattr(errors, str(envelope.kind), None)
    if not (isinstance(kind, type) and issubclass(kind, CkptError)):
        kind = SandboxError
    raise kind(str(envelope.error))


def _read_stream(sock: socket.socket, on_event: Callable[[Any], None]) -> bytes:
    """The frames before the reply line, each event to ``on_event``; then the line.
    A reply that starts at once (``{``) is a failure before any frame."""
    from ckpt.images.pagexfer import read_stream

    f = sock.makefile("rb")
    try:

        def read_exact(n: int) -> bytes:
            data = f.read(n)
            if len(data) != n:
                raise ConnectionResetError("the sandbox closed its stream in a frame")
            return data

        if f.peek(1)[:1] not in (b"{", b""):
            for event in read_stream(read_exact):
                on_event(event)
        line = f.readline(MAX_MESSAGE + 1)
        if len(line) > MAX_MESSAGE:
            raise ValueError("message larger than 1 MiB")
        return line
    finally:
        f.close()


def check_socket_file(path: Path, what: str) -> None:
    """``path`` is a Unix socket itself: ``lstat``, so a symlink is refused, not followed."""
    import stat

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise SandboxError(
            f"{what} is not answering on {path} (no socket); it may have exited: see `ckpt state`"
        ) from None
    except OSError as exc:
        raise SandboxError(f"{what}: cannot check its socket {path}: {exc.strerror}") from exc
    if not stat.S_ISSOCK(mode):
        kind = "a symlink" if stat.S_ISLNK(mode) else "not a socket"
        raise SandboxError(
            f"{what}: control socket {path} is {kind}; refusing to use it: remove it"
        )


def peer_of(sock: socket.socket) -> int:
    """The pid of the process that listens on the other end (``SO_PEERCRED``)."""
    import struct

    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)[0]


__all__ = ["SandboxBusy", "SandboxGone", "Server", "call", "check_socket_file", "peer_of"]
