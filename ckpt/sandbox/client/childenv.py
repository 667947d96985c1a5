"""The environment of a sandbox or template interpreter that this process starts.

A module of its own so that ``spawn`` (cold sandboxes) and ``template_client`` (the
template) both use it without importing each other.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def child_env() -> dict[str, str]:
    """The sandbox runs with ``python -S``: no ``site`` and no ``.pth`` processing, which
    is most of interpreter start-up on hosts with many ``.pth`` hooks.  Our resolved
    ``sys.path`` (and the directory holding ``ckpt``) is handed over in PYTHONPATH
    instead, so it imports exactly what this process would."""
    import ckpt

    here = str(Path(ckpt.__file__).resolve().parent.parent)
    entries = [here, *(p for p in sys.path if p and p != here and os.path.isdir(p))]
    from ckpt import settings

    env = {
        **os.environ,
        **settings.child_env(),  # this command's settings, --no-template's among them
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(entries)),
    }
    # Every sandbox is a fresh interpreter; without bytecode it compiles all of ckpt
    # again each time (hosts setting PYTHONDONTWRITEBYTECODE).  Keep bytecode in
    # ckpt's own cache directory instead, so nothing is written beside the sources
    # (inside it, so a CKPT_CACHE_DIR of /var/cache/ckpt never writes /var/cache/pycache).
    from ckpt.cachedir import bytecode_dir

    where = bytecode_dir()
    if where is not None and "PYTHONPYCACHEPREFIX" not in env:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(where)
    return env
