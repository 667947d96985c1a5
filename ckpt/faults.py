"""Fault injection, for tests: one enum of the points where ckpt can be made to stall,
wait or stop, and one variable naming at most one of them,
``CKPT_FAULT=POINT[:ARGUMENT]`` (as CRIU's ``CRIU_FAULT``).

The variable is read through the settings object (``ckpt/settings.py``), which parses
it with ``parse`` here: an unknown point, or an argument the point cannot use, is
refused with one line naming the variable, never ignored.  The processes ckpt starts
inherit it, so a test sets it once on the command it runs and the point is met in
whichever process owns it.  Code that can take a hook (a checkpoint's stall, a
migration's pause) asks once and passes ``None`` on when the variable is unset, so
nothing of tests runs on the production path; the remaining points are one
comparison at a step that happens once per request.

A leaf: it imports nothing of ckpt at module level.
"""

from __future__ import annotations

import enum
import math
from collections import namedtuple


class Fault(enum.Enum):
    """Every fault point, by the name ``CKPT_FAULT`` gives it."""

    CHECKPOINT_STALL = "checkpoint-stall"
    RESTORE_STALL = "restore-stall"
    PAGES_FILL_DELAY = "pages-fill-delay"
    PUSH_DELAY = "push-delay"
    SPAWN_REPLY_DELAY = "spawn-reply-delay"
    JOIN_STALL = "join-stall"
    HOLD_DELAY = "hold-delay"
    WARM_DELAY = "warm-delay"
    PAUSE = "pause"


# point -> (its argument, what it does); docs/cli.md prints this table
MEANINGS: dict[Fault, tuple[str, str]] = {
    Fault.CHECKPOINT_STALL: (
        "[SECONDS[:PATH]]",
        "the sandbox sleeps SECONDS (5) after the object stream is written and before "
        "the image is committed; file PATH appearing ends the sleep early",
    ),
    Fault.RESTORE_STALL: ("[SECONDS]", "the sandbox sleeps SECONDS (5) as a restore starts"),
    Fault.PAGES_FILL_DELAY: (
        "SECONDS",
        "a lazily restored page file sleeps before each run of its background fill",
    ),
    Fault.PUSH_DELAY: (
        "SECONDS",
        "a post-copy source pushes a batch of pages every SECONDS (those asked for go at once)",
    ),
    Fault.SPAWN_REPLY_DELAY: ("SECONDS", "the template delays its answer to a spawn"),
    Fault.JOIN_STALL: (
        "SECONDS",
        "a sandbox forked by the template sleeps before joining its cgroup",
    ),
    Fault.HOLD_DELAY: ("SECONDS", "the template delays taking over a sandbox's sockets"),
    Fault.WARM_DELAY: ("SECONDS", "the template sleeps before warming up"),
    Fault.PAUSE: ("VERB:STEP", "the CLI stops itself (SIGSTOP) at that step of a verb"),
}
_DEFAULT_S = {Fault.CHECKPOINT_STALL: 5.0, Fault.RESTORE_STALL: 5.0}
MAX_S = 86400.0


class Injection(namedtuple("Injection", "point arg seconds text", defaults=("", 0.0, ""))):
    """A parsed ``CKPT_FAULT``: the point, its argument as given, and its parts
    (``text``: checkpoint-stall's release file, pause's VERB:STEP).  A namedtuple, not
    a typing.NamedTuple: a sandbox's start-up does not import typing."""

    __slots__ = ()
    point: Fault
    arg: str
    seconds: float
    text: str

    def __str__(self) -> str:
        return f"{self.point.value}:{self.arg}" if self.arg else self.point.value


def _seconds(point: Fault, text: str) -> float:
    if not text and point in _DEFAULT_S:
        return _DEFAULT_S[point]
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{point.value} takes seconds, not {text!r}") from None
    if not (math.isfinite(value) and 0 <= value <= MAX_S):
        raise ValueError(f"{point.value} takes 0 to {MAX_S:g} seconds, not {text}")
    return value


def parse(raw: str) -> Injection:
    """``POINT[:ARGUMENT]`` as an ``Injection``; ValueError saying what is wrong."""
    name, _, arg = raw.strip().partition(":")
    try:
        point = Fault(name)
    except ValueError:
        known = ", ".join(f.value for f in Fault)
        raise ValueError(f"unknown fault point {name!r}; give one of {known}") from None
    if point is Fault.PAUSE:
        verb, _, step = arg.partition(":")
        if not verb or not step:
            raise ValueError("pause takes VERB:STEP, e.g. pause:checkpoint:sending")
        return Injection(point, arg, 0.0, arg)
    if point is Fault.CHECKPOINT_STALL:
        value, _, release = arg.partition(":")
        return Injection(point, arg, _seconds(point, value), release)
    return Injection(point, arg, _seconds(point, arg))


def injected(point: Fault) -> Injection | None:
    """The injection when ``CKPT_FAULT`` names ``point``, else None (read now)."""
    from ckpt import settings

    given = settings.current().fault
    return given if given is not None and given.point is point else None


def delay(point: Fault) -> float:
    """Seconds ``CKPT_FAULT`` asks ``point`` to wait, 0 unless it names ``point``."""
    given = injected(point)
    return given.seconds if given is not None else 0.0


__all__ = ["MEANINGS", "Fault", "Injection", "delay", "injected", "parse"]
