"""The migration channel: typed messages over TCP, authenticated, bounded, with deadlines.

What each mode protects:

* **HMAC (always on).**  Both hosts hold the same key file.  Every frame carries an
  HMAC-SHA256 under a key derived for this connection from that secret and two fresh
  nonces, over its direction, sequence number, kind and payload.  This gives *integrity
  and authenticity*: a host without the key cannot connect, and a frame that is altered,
  replayed, reordered, reflected or spliced from another connection is refused.  It gives
  *no confidentiality*: anyone on the path can read the pages and the state stream.  Use
  it on a private network (or a link you trust to be read-only to others).
* **TLS (``tls=ServerTLS(...)`` / ``ClientTLS(...)``).**  The same frames, HMAC and all,
  inside a TLS connection from the stdlib's ``ssl``: *confidentiality* too, and the client
  checks the server's certificate against a CA.  The key file still decides who may
  migrate; the certificate only proves which host the client reached.
* **Sealed (``encrypt=True``, ``--encrypt``).**  Every frame after the handshake is
  sealed with AES-256-GCM under a key per connection and direction derived from the
  same secret and nonces (``sealed.py``): *confidentiality* from the key file alone, no
  certificate needed, with the same refusals as the HMAC.  The source asks for it in its
  authenticated hello; a destination given ``encrypt=True`` accepts nothing else
  (``handshake.py``).  It composes with TLS (then the pages are encrypted twice).

Every receive has up to three deadlines: ``io_timeout`` seconds for one frame (a peer
that trickles bytes cannot stretch a frame past it), an optional overall ``deadline``
for the whole connection and an optional step deadline (``phase_timeout``): from each
frame this side sends, the peer has ``phase_timeout`` seconds, plus one second for each
``phase_min_rate`` bytes it delivers, to bring what this side waits for next (an image,
an answer).  A peer that sends a small valid frame just within each ``io_timeout`` can
stretch a step past neither.  The handshake has its own ``handshake_timeout``.  Any
error closes the connection and raises a one-line ``MigrationError``.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ckpt.migration import messages
from ckpt.migration.errors import DeadlineExceeded, MigrationError, PeerClosed, PeerError
from ckpt.migration.framing import DEFAULT_MAX_PAYLOAD, Deadline, Wire
from ckpt.migration.handshake import handshake
from ckpt.migration.sealed import SealedSealer

DEFAULT_IO_TIMEOUT = 30.0
DEFAULT_HANDSHAKE_TIMEOUT = 10.0


@dataclass(frozen=True)
class ServerTLS:
    """The destination's certificate chain and private key (PEM files)."""

    cert: Path
    key: Path

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise MigrationError(
                f"cannot load the TLS certificate {self.cert} and key {self.key}: {exc}"
            ) from exc
        return ctx


@dataclass(frozen=True)
class ClientTLS:
    """The CA that signed the destination's certificate; ``server_name`` defaults to the host."""

    ca: Path
    server_name: str | None = None

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_verify_locations(cafile=self.ca)
        except (OSError, ssl.SSLError) as exc:
            raise MigrationError(f"cannot load the TLS CA file {self.ca}: {exc}") from exc
        return ctx


def _tls_handshake(sock: ssl.SSLSocket, timeout: float) -> None:
    sock.settimeout(timeout)
    try:
        sock.do_handshake()
    except TimeoutError as exc:
        raise MigrationError("the TLS handshake did not finish before the deadline") from exc
    except (ssl.SSLError, OSError) as exc:
        raise MigrationError(f"the TLS handshake failed: {exc}") from exc


class NoPeer(MigrationError):
    """``Listener.accept`` waited its whole timeout and nobody connected."""


class Channel:
    """One authenticated connection; ``send`` and ``recv`` may run in two threads."""

    def __init__(
        self,
        sock: socket.socket,
        secret: bytes,
        *,
        client: bool,
        io_timeout: float = DEFAULT_IO_TIMEOUT,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
        deadline: float | None = None,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        phase_timeout: float | None = None,
        phase_min_rate: float = 0.0,
        encrypt: bool = False,
    ) -> None:
        """Take ``sock`` (already TLS-wrapped if wanted) and run the handshake on it.
        ``encrypt``: a client asks for sealed frames, a server accepts only those."""
        self._wire = Wire(sock)
        self.io_timeout = io_timeout
        self.deadline = Deadline(deadline)
        self.phase_timeout = phase_timeout
        self.phase_min_rate = phase_min_rate
        self._phase_start = time.monotonic()
        self._phase_bytes = 0
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        self._closed = False
        self._recv_broken = False
        self.frames_sent = self.frames_received = 0
        self.bytes_sent = self.bytes_received = 0
        try:
            self._sealer, self._opener, self.peer_hello = handshake(
                self._wire,
                secret,
                client=client,
                deadline=Deadline(handshake_timeout).earlier(self.deadline),
                max_payload=max_payload,
                encrypt=encrypt,
            )
        except BaseException:
            self.close()
            raise
        self._phase_start = time.monotonic()
        self.sealed = isinstance(self._sealer, SealedSealer)  # the frames are encrypted

    def _frame_deadline(self) -> Deadline:
        return Deadline(self.io_timeout).earlier(self.deadline)

    def _recv_deadline(self) -> Deadline:
        """The frame's deadline, or the step's if that comes first."""
        frame = self._frame_deadline()
        if self.phase_timeout is None:
            return frame
        budget = self.phase_timeout
        if self.phase_min_rate > 0:
            budget += self._phase_bytes / self.phase_min_rate
        step = Deadline.until(
            self._phase_start + budget,
            f"in time: a step of the migration may take {self.phase_timeout:g} s plus "
            f"1 s per {self.phase_min_rate:g} bytes it brings",
        )
        return frame.earlier(step)

    def send(self, msg: messages.Message) -> None:
        """Seal and send ``msg``; a failure closes the channel."""
        payload = messages.encode(msg)
        if len(payload) > self.peer_hello.max_payload:
            raise MigrationError(
                f"a {msg.KIND.name} of {len(payload)} bytes exceeds the peer's "
                f"{self.peer_hello.max_payload}-byte frame limit"
            )
        with self._send_lock:
            self._check_open()
            frame = self._sealer.seal(msg.KIND, payload)
            try:
                self._wire.write(frame, self._frame_deadline(), f"frame {self._sealer.seq - 1}")
            except MigrationError:
                self.close()
                raise
            self.frames_sent += 1
            self.bytes_sent += len(frame)
            self._phase_start = time.monotonic()  # this side answered: the next step begins
            self._phase_bytes = 0

    def recv(self) -> messages.Message:
        """The next message; an ``Error`` from the peer is raised as ``PeerError``."""
        with self._recv_lock:
            self._check_open()
            if self._recv_broken:
                raise PeerClosed("the migration channel stopped receiving after a deadline")
            try:
                kind, payload = self._opener.read(self._wire, self._recv_deadline())
                msg = messages.decode(kind, payload)
            except DeadlineExceeded:
                # the frame stream is cut mid-frame, but sending still works: this side
                # can tell the peer which deadline it missed (``send_error``)
                self._recv_broken = True
                raise
            except MigrationError:
                self.close()
                raise
            self.frames_received += 1
            self.bytes_received += len(payload)
            self._phase_bytes += len(payload)
        if isinstance(msg, messages.Error):
            self.close()
            raise PeerError(msg.code, f"the peer gave up: {msg.message}")
        return msg

    def send_error(self, code: messages.ErrorCode, message: str, linger: float = 0.0) -> None:
        """Tell the peer why this side gives up (best effort), then close.

        With ``linger`` seconds, what the peer still sends is read and dropped until it
        closes (or that time passes), so a peer in the middle of sending reads the
        ``Error`` at its next receive instead of failing on a reset connection."""
        line = message.replace("\n", " ")[: messages.MAX_TEXT]
        with contextlib.suppress(MigrationError):
            self.send(messages.Error(int(code), line))
            if linger > 0:
                self._drain(linger)
        self.close()

    def _drain(self, seconds: float) -> None:
        sock = self._wire.sock
        deadline = Deadline(seconds)
        with contextlib.suppress(OSError, MigrationError):
            while True:
                sock.settimeout(deadline.remaining("closing"))
                if not sock.recv(1 << 16):
                    return

    def _check_open(self) -> None:
        if self._closed:
            raise PeerClosed("the migration channel is closed")

    def close(self) -> None:
        self._closed = True
        sock = self._wire.sock
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    host: str,
    port: int,
    secret: bytes,
    *,
    tls: ClientTLS | None = None,
    connect_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
    **options: float | int | None,
) -> Channel:
    """Open a channel to a listening peer; ``options`` go to ``Channel`` (``encrypt``:
    ask for sealed frames)."""
    try:
        sock = socket.create_connection((host, port), timeout=connect_timeout)
    except TimeoutError as exc:
        raise MigrationError(f"cannot reach {host}:{port}: no answer in time") from exc
    except OSError as exc:
        raise MigrationError(f"cannot reach {host}:{port}: {exc.strerror or exc}") from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is not None:
        try:
            ctx = tls.context()
            sock = ctx.wrap_socket(
                sock, server_hostname=tls.server_name or host, do_handshake_on_connect=False
            )
            _tls_handshake(sock, connect_timeout)
        except BaseException:
            sock.close()
            raise
    return Channel(sock, secret, client=True, **options)  # type: ignore[arg-type]


class Listener:
    """A listening socket that turns each accepted connection into a ``Channel``."""

    def __init__(
        self,
        host: str,
        port: int,
        secret: bytes,
        *,
        tls: ServerTLS | None = None,
        backlog: int = 4,
        **options: float | int | None,
    ) -> None:
        self._secret = secret
        self._ctx = tls.context() if tls is not None else None
        self._options = options
        try:
            self._sock = socket.create_server((host, port), backlog=backlog)
        except OSError as exc:
            raise MigrationError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._sock.getsockname()[:2]
        return host, port

    def accept(self, timeout: float | None = None) -> Channel:
        """Wait up to ``timeout`` seconds for a peer, then handshake with it."""
        return self.open(self.accept_socket(timeout)[0])

    def accept_socket(self, timeout: float | None = None) -> tuple[socket.socket, str]:
        """The next connection and its peer's address, before any byte is exchanged."""
        self._sock.settimeout(timeout)
        try:
            sock, peer = self._sock.accept()
        except TimeoutError as exc:
            raise NoPeer("no peer connected before the deadline") from exc
        except OSError as exc:  # out of descriptors, a connection reset while queued
            raise MigrationError(f"cannot accept a connection: {exc.strerror or exc}") from exc
        return sock, str(peer[0])

    def open(self, sock: socket.socket) -> Channel:
        """TLS (if configured) and the handshake on an accepted ``sock``, both within one
        ``handshake_timeout``; ``sock`` is closed if either fails."""
        pre_auth = Deadline(
            float(self._options.get("handshake_timeout") or DEFAULT_HANDSHAKE_TIMEOUT)
        )
        options = dict(self._options)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ctx is not None:
                sock = self._ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                _tls_handshake(sock, pre_auth.remaining("the TLS handshake") or 0.0)
            options["handshake_timeout"] = pre_auth.remaining("the handshake")
        except BaseException:
            sock.close()
            raise
        return Channel(sock, self._secret, client=False, **options)  # type: ignore[arg-type]

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
