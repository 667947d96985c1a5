"""The migration channel's errors: each one line, each saying what to do.

They live here, not in ``ckpt/errors.py``, because only this package raises them; they
are ``CkptError`` subclasses, so the CLI renders them as one line like every other error.
"""

from __future__ import annotations

from ckpt.errors import EXIT_DEADLINE, CkptError
from ckpt.errors import KeyFileError as KeyFileError  # raised by ckpt.keyfile


class MigrationError(CkptError):
    """A migration cannot proceed: bad peer, bad key, broken link or deadline passed."""


class HandshakeError(MigrationError):
    """The peer is not a ckpt migration peer, or speaks another protocol version."""


class KeyMismatch(HandshakeError):
    """The peer's first authenticated frame fails its MAC: the two key files differ."""


class EncryptionRefused(HandshakeError):
    """One side wants the frames sealed (``--encrypt``) and the other does not."""


class FrameError(MigrationError):
    """The peer sent a malformed frame: an oversized length, an unknown kind, bad payload."""


class AuthenticationError(FrameError):
    """A frame fails its MAC: tampered, replayed, reordered, spliced or reflected."""


class DeadlineExceeded(MigrationError):
    """The peer did not answer (or trickled) past the deadline."""

    exit_code = EXIT_DEADLINE


class PeerClosed(MigrationError):
    """The peer closed the connection (or the link went down) in the middle of the protocol."""


class PeerError(MigrationError):
    """The peer reported a failure with an ``Error`` message; ``code`` says which."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)
