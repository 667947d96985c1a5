"""Process titles: each ckpt process says what it is in ``ps`` and ``top``.

A sandbox forked from the template would otherwise show the template's command line
(``python3 -S -m ckpt.sandbox.template --root ...``), so the two could not be told
apart.  ``setproctitle`` rewrites the argv area that ``ps`` reads; it is imported by
the template before it forks, so a forked sandbox pays nothing.  Without it, only the
kernel's 15-byte ``comm`` name changes (``prctl(PR_SET_NAME)``), which ``ps -o comm``
and ``top`` show.

Titles::

    ckpt template ROOT
    ckpt sandbox ID (ROOT)
"""

from __future__ import annotations

PR_SET_NAME = 15
COMM_MAX = 15  # TASK_COMM_LEN is 16 bytes with the NUL


def template_title(root: str) -> str:
    return f"ckpt template {root}"


def sandbox_title(sandbox_id: str, root: str) -> str:
    return f"ckpt sandbox {sandbox_id} ({root})"


def shows(argv: list[str] | list[bytes], title: str) -> bool:
    """Does a command line, split at NULs as ``/proc/PID/cmdline`` is, show exactly
    ``title`` (what ``set_title`` leaves: the title, then padding)?  A title is as easy
    to fake as a command line: callers check it beside a start time, a cgroup or a
    socket's peer, never alone."""
    if not argv:
        return False
    first = argv[0] if isinstance(argv[0], str) else argv[0].decode(errors="replace")
    return first == title and not any(argv[1:])


def set_title(title: str) -> None:
    """Show ``title`` as this process's command line, or at least as its name."""
    try:
        import setproctitle
    except ImportError:
        _set_comm(title)
        return
    setproctitle.setproctitle(title)


def _set_comm(title: str) -> None:
    """The kernel's short name (what ``top`` shows); best effort."""
    import ctypes  # only here: it costs a millisecond of every cold start

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_NAME, title.encode()[:COMM_MAX], 0, 0, 0)
    except (OSError, AttributeError):
        pass
