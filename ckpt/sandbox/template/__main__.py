"""``python -m ckpt.sandbox.template``: the command a template runs under."""

from ckpt.sandbox.template.server import main

main()
