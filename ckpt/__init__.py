"""ckpt: checkpoint and restore a simulated sandbox kernel, fast."""

__version__ = "0.1.0"
