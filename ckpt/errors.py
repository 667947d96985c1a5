"""Every error a user can cause is a CkptError subclass.

The CLI renders a CkptError as one line (``error: ...``) and exits with its class's
``exit_code``; anything else is a bug and keeps its traceback.  Messages say what went
wrong and, where there is one, what to do about it.

Exit codes are few and documented (``EXIT_CODES``), so a script can tell a typo from a
missing sandbox from a refusal it may override with ``--force``: a class states its code
once and its subclasses inherit it.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_REFUSED = 4
EXIT_DEADLINE = 124  # as timeout(1)

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "ok",
    EXIT_FAILED: "failed",
    EXIT_USAGE: "usage: a bad option, argument or combination of them",
    EXIT_NOT_FOUND: "not found: no such sandbox or image",
    EXIT_REFUSED: "refused as unsafe: it would replace an image or a parent (see --force)",
    EXIT_DEADLINE: "a deadline passed",
}


class CkptError(Exception):
    """Base of every user-facing error.  ``exit_code`` is what the CLI exits with."""

    exit_code = EXIT_FAILED


class UsageError(CkptError):
    """A missing or contradictory option that the parser alone cannot see."""

    exit_code = EXIT_USAGE


class StateError(CkptError):
    """The object-graph engine cannot save or load: bad stream, bad type, bad field."""


class StatefileError(CkptError):
    """An image file is malformed, truncated, or fails its integrity check."""


class IntegrityError(StatefileError):
    """An image fails its HMAC or checksum: wrong key, flipped bits, or truncation."""


class ImageExistsError(StatefileError):
    """The target image directory already holds an image (use --force to replace it)."""

    exit_code = EXIT_REFUSED


class NotAnImage(StatefileError):
    """The target directory holds files no image has: ckpt writes only into a new or
    empty directory or over an image, never over someone's files (not even with --force)."""

    exit_code = EXIT_REFUSED


class ImageNotFound(StatefileError):
    """No image at the path given."""

    exit_code = EXIT_NOT_FOUND


class KeyFileError(CkptError):
    """A key file is missing, unsafe (a link, not private, not the caller's) or too short."""


class CgroupError(CkptError):
    """A cgroup cannot be created, configured, read or removed."""


class KernelError(CkptError):
    """The simulated kernel refused an operation (bad workload name, bad argument)."""


class SandboxError(CkptError):
    """A sandbox cannot be started, reached, checkpointed or restored."""


class SandboxNotFound(SandboxError):
    """No sandbox with that ID exists under the root directory."""

    exit_code = EXIT_NOT_FOUND


class SandboxRefused(SandboxError):
    """An action refused as unsafe without ``--force``: it would remove a running
    sandbox or break an image chain."""

    exit_code = EXIT_REFUSED


class SandboxBusy(SandboxError):
    """The sandbox is already serving a request that cannot run concurrently."""


class SyscallError(KernelError):
    """A simulated system call failed; ``errno`` says why, as Linux would (EBADF, EAGAIN...)."""

    def __init__(self, errno_value: int, message: str) -> None:
        import errno as _errno

        self.errno = errno_value
        name = _errno.errorcode.get(errno_value, str(errno_value))
        super().__init__(f"{name}: {message}")


class SandboxGone(SandboxError):
    """The sandbox process went away in the middle of a request (killed or crashed)."""


class SandboxTimeout(SandboxError):
    """A sandbox did not answer a request within its deadline."""

    exit_code = EXIT_DEADLINE


class WaitTimeout(SandboxError):
    """``ckpt wait --timeout`` passed with the sandbox still running (exit 124, as
    timeout(1))."""

    exit_code = EXIT_DEADLINE
