"""The forked child's set-up, from the template's warm copy to a sandbox host: it
joins the sandbox's cgroup before anything else (so every instruction after is charged
to the sandbox), leaves the template's session, keeps only its log, the ready pipe and
the standard descriptors, takes the asking command's ``CKPT_*`` settings, and becomes the
sandbox process (``process.serve``).  Never returns: the child ends with ``os._exit``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import time

from ckpt import faults
from ckpt.faults import Fault
from ckpt.sandbox.template.checks import close_all
from ckpt.sandbox.wire import handover

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def become_sandbox(spec: dict[str, Any], keep_out: list[int]) -> None:
    """In the forked child: join the cgroup, detach, and run the sandbox.  Never returns."""
    code = 0
    try:
        for fd in spec["cgroup_fds"]:  # first of all: every instruction from here is charged
            os.write(fd, b"0")
        stall = faults.delay(Fault.JOIN_STALL)
        if stall:
            time.sleep(stall)
        os.setsid()  # its own session: a signal to the template's group never reaches it
        os.write(spec["joined_w"], b"joined")
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        close_all([*keep_out, spec["joined_w"]])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(spec["log_fd"], 1)
        os.dup2(spec["log_fd"], 2)
        ready = os.dup2(spec["ready_fd"], 3, inheritable=False)
        os.closerange(4, _max_fd())
        import random

        random.seed()
        for key in [k for k in os.environ if k.startswith("CKPT_") and k != "CKPT_ROOT"]:
            del os.environ[key]
        os.environ.update(spec["env"])  # the asking command's CKPT_* settings
        os.environ[handover.ENV] = spec["template_socket"]
        gc.unfreeze()
        gc.enable()
        from ckpt.sandbox.host import process
        from ckpt.sandbox.wire import title

        title.set_title(title.sandbox_title(spec["id"], spec["root"]))
        process.log("forked from the warm template")
        process.serve(spec["id"], spec["socket"], ready)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:
        with contextlib.suppress(Exception):
            sys.stderr.write(f"sandbox start failed in template child: {exc!r}\n")
            sys.stderr.flush()
        code = 1
    os._exit(code)


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        return 4096
