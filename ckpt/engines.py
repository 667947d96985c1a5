"""The names of the state engines: one list that every layer checks a name against.

A leaf module (it imports nothing), so the CLI, a sandbox's client side and a migration
peer can refuse an unknown engine without loading the engines themselves.  Which of
them this build can run is ``ckpt.state.ENGINES`` (``native`` needs its C core).
"""

from __future__ import annotations

ENGINE_NAMES = ("native", "typed", "reflect")  # fastest first

__all__ = ["ENGINE_NAMES"]
