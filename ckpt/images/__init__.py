"""Where an image lives, decided once: :class:`Location` (a local directory, a
``file://`` URL naming one, or an object-store URL) and the one factory of the writers,
readers, page sinks and sources for it (factory.py).  The only package that knows a
location may be a bucket; ``statefile`` writes and reads files wherever it is told."""

from ckpt.images.location import BadLocation, Location

__all__ = ["BadLocation", "Location"]
