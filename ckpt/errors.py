"""Every error a user can cause is a CkptError subclass.

The CLI renders a CkptError as one line (``error: ...``) and exits non-zero;
anything else is a bug and keeps its traceback.  Messages say what went wrong
and, where there is one, what to do about it.
"""

from __future__ import annotations


class CkptError(Exception):
    """Base of every user-facing error.  ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class UsageError(CkptError):
    """Options that contradict each other; exits 2, as click's own usage errors do."""

    exit_code = 2


class StateError(CkptError):
    """The object-graph engine cannot save or load: bad stream, bad type, bad field."""


class StatefileError(CkptError):
    """An image file is malformed, truncated, or fails its integrity check."""


class IntegrityError(StatefileError):
    """An image fails its HMAC or checksum: wrong key, flipped bits, or truncation."""


class ImageExistsError(StatefileError):
    """The target image directory already holds an image (use --force to replace it)."""


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


class WaitTimeout(SandboxError):
    """``ckpt wait --timeout`` passed with the sandbox still running (exit 124, as
    timeout(1))."""

    exit_code = 124
