"""``ckpt serve``: accept migrations into a root, one at a time, until told to stop.

One session at a time keeps the destination's memory and disk use to one migration's
and makes "an ID that already exists" a simple check.  SIGTERM and SIGINT raise
``Stopping`` wherever the server is: a session in progress is abandoned (what it
restored is stopped, what it received removed, the source told) and the server exits 0.
Every wait has a deadline: ``accept`` wakes every ``POLL_S`` to notice a stop, and each
session's channel has per-frame and overall deadlines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from ckpt.errors import CkptError
from ckpt.migration.errors import MigrationError

POLL_S = 0.5
SESSION_DEADLINE_S = 3600.0  # a whole migration, however large, ends by then
READY_FD_ENV = "CKPT_SERVE_READY_FD"


class Stopping(BaseException):
    """SIGTERM or SIGINT: unwind whatever is running, then exit cleanly."""


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise Stopping(signal.Signals(signum).name)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def parse_address(text: str, what: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port), or a one-line error."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise MigrationError(f"{what} {text!r}: give HOST:PORT, such as 198.18.0.2:7070")
    return host, int(port)


def serve(
    root: Any,
    host: str,
    port: int,
    secret: bytes,
    *,
    tls: Any = None,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    on_ready: Callable[[str], None] | None = None,
    debug: bool = False,
) -> None:
    """Listen on ``host:port`` and receive migrations into ``root`` until a signal."""
    from ckpt.migration.channel import Listener, NoPeer
    from ckpt.migration.incoming import sweep
    from ckpt.migration.outgoing import io_timeout
    from ckpt.migration.session import receive

    root.ensure()
    for name in sweep(root.path):
        say(f"removed {name}, left by a server that died mid-migration")
    with _signals_raise():
        try:
            with Listener(
                host,
                port,
                secret,
                tls=tls,
                io_timeout=io_timeout(),
                deadline=SESSION_DEADLINE_S,
            ) as listener:
                bound = "{}:{}".format(*listener.address)
                say(f"listening on {bound} (root {root.path})")
                if on_ready is not None:
                    on_ready(bound)
                while True:
                    try:
                        ch = listener.accept(timeout=POLL_S)
                    except NoPeer:
                        continue
                    except MigrationError as exc:
                        say(f"refused a peer: {exc}")
                        continue
                    with ch:
                        try:
                            got = receive(ch, root)
                        except CkptError as exc:
                            say(f"migration failed: {exc}")
                            continue
                        except Exception as exc:  # a bug must not take the server down
                            say(f"migration failed (internal error, --debug shows it): {exc!r}")
                            if debug:
                                traceback.print_exc()
                            continue
                    say(f"received {got.sandbox_id}: running at {got.address}")
        except Stopping as sig:
            say(f"stopping on {sig}")


def ready_line_writer() -> Callable[[str], None] | None:
    """For ``--detach``: the child tells its parent the bound address on this fd."""
    fd = os.environ.pop(READY_FD_ENV, "")
    if not fd.isdigit():
        return None

    def ready(bound: str) -> None:
        with contextlib.suppress(OSError):
            os.write(int(fd), f"{bound}\n".encode())
            os.close(int(fd))

    return ready
