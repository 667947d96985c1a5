"""How ckpt starts Python children: each imports the ckpt this process runs, whatever
directory it starts in.

``python -m ckpt`` and ``python -c`` put the working directory first on ``sys.path``,
so a ``ckpt/`` folder there would be imported instead of the package: an ImportError
at best, someone else's code run as root at worst.  ``-P`` (Python 3.11+) leaves it
out.  PYTHONPATH still works; the directory holding the ckpt this process imported is
added to it only when the child would not find ckpt otherwise (a source tree run from
its own directory, which ``-P`` would hide).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping


def python_argv(*args: str) -> list[str]:
    """``python -P ARGS``: this interpreter, without the working directory on its path."""
    return [sys.executable, "-P", *args]


def ckpt_argv(*args: str) -> list[str]:
    """``python -P -m ckpt ARGS``."""
    return python_argv("-m", "ckpt", *args)


def python_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: ours, with this command's settings) with PYTHONPATH naming the directory of this process's
    ckpt when nothing else on the child's path would."""
    import ckpt
    from ckpt import settings

    # ours: with this command's settings (--no-template's among them)
    out = {**os.environ, **settings.child_env()} if env is None else dict(env)
    here = os.path.realpath(os.path.dirname(os.path.dirname(ckpt.__file__)))
    given = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    # sys.path[0] is our script's directory or working directory, which -P leaves out
    inherited = sys.path if sys.flags.safe_path else sys.path[1:]
    if here not in {os.path.realpath(p) for p in [*given, *inherited] if p}:
        out["PYTHONPATH"] = os.pathsep.join([here, *given])
    return out
