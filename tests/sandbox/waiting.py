"""Small helpers the sandbox tests share: bounded waits, process checks, free ports."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

import psutil

T = TypeVar("T")
WAIT_S = 90.0  # for waits that decide an outcome; each ends as soon as the event happens
HOST = "127.0.0.1"


def wait_for(pred: Callable[[], T | None], what: str, timeout: float = WAIT_S) -> T:
    """Poll ``pred`` until it returns something true; fail naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


def gone(pid: int) -> bool:
    """Exited (or a zombie init has not reaped yet), in one look."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def free_port() -> int:
    """A port nobody listens on now (bound, then closed), for ``run --port``."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]
