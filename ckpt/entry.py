"""The ``ckpt`` console script.

On hosts that set PYTHONDONTWRITEBYTECODE, every command would compile all of ckpt's
modules again (about a third of a command's start-up).  Before importing them, the
entry point sends bytecode into ckpt's own cache directory instead, as the sandbox
processes do (``childenv.child_env``); nothing is written beside the sources.  This
happens only here, never on ``import ckpt``, so a program using ckpt as a library keeps
its own settings.
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.dont_write_bytecode and sys.pycache_prefix is None:
        from ckpt.cachedir import bytecode_dir
        from ckpt.errors import CkptError

        try:
            where = bytecode_dir()
        except CkptError:  # a bad CKPT_* value: the command below says which, in one line
            where = None
        if where is not None:
            sys.pycache_prefix = str(where)
            sys.dont_write_bytecode = False
    from ckpt.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
