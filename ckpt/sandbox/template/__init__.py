"""The warm template: one long-lived process per root (``python -m
ckpt.sandbox.template``) that imports and warms everything a sandbox needs once, then
forks a ready sandbox host for each ``ckpt run`` and ``ckpt restore``, and holds live
sockets between a checkpoint and its restore.

It imports ``wire`` and ``host`` (its children are hosts), never ``client``.  Its
clients speak to it through ``wire.template_proto`` and ``wire.handover``.
"""

__all__ = ["server"]
