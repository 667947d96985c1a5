"""Live migration between hosts: the authenticated channel, the session on top of it.

Public API::

    secret = read_key_file(path)                 # O_NOFOLLOW, mode 0600, >= 32 bytes
    with Listener(host, port, secret, tls=ServerTLS(cert, key) | None,
                  encrypt=False) as lst:         # encrypt: accept only sealed channels
        ch = lst.accept(timeout=...)             # TLS (optional), then the handshake
    ch = connect(host, port, secret, tls=ClientTLS(ca) | None, encrypt=False,
                 io_timeout=30.0, deadline=None, max_payload=8 MiB)  # encrypt: seal
    ch.send(msg); msg = ch.recv(); ch.send_error(code, text); ch.close()
    pack_pages(round, [(index, page), ...]) -> PageRuns; unpack_pages(msg) -> [(index, page)]

Messages: ``Hello``, ``Offer``, ``PageRuns``, ``StateChunk``, ``RoundEnd``,
``Connections``, ``Ack``, ``Restored``, ``Error``, ``Done``; ``session.py`` says in which order.  Every
failure is a ``MigrationError``; see ``channel.py`` for what the HMAC, sealed and TLS modes
protect.
"""

from ckpt.keyfile import read_key_file
from ckpt.migration.channel import Channel, ClientTLS, Listener, ServerTLS, connect
from ckpt.migration.errors import (
    AuthenticationError,
    DeadlineExceeded,
    EncryptionRefused,
    FrameError,
    HandshakeError,
    KeyFileError,
    KeyMismatch,
    MigrationError,
    PeerClosed,
    PeerError,
)
from ckpt.migration.messages import (
    Ack,
    Connections,
    Done,
    Error,
    ErrorCode,
    Hello,
    Kind,
    Message,
    Offer,
    PageRuns,
    Restored,
    RoundEnd,
    StateChunk,
    pack_pages,
    unpack_pages,
)

__all__ = [
    "Ack",
    "AuthenticationError",
    "Channel",
    "ClientTLS",
    "Connections",
    "DeadlineExceeded",
    "Done",
    "EncryptionRefused",
    "Error",
    "ErrorCode",
    "FrameError",
    "HandshakeError",
    "Hello",
    "KeyFileError",
    "KeyMismatch",
    "Kind",
    "Listener",
    "Message",
    "MigrationError",
    "Offer",
    "PageRuns",
    "PeerClosed",
    "PeerError",
    "Restored",
    "RoundEnd",
    "ServerTLS",
    "StateChunk",
    "connect",
    "pack_pages",
    "read_key_file",
    "unpack_pages",
]
