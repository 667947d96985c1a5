"""Sandboxes: three processes and the protocol between them, one subpackage each.

- ``wire``: what every process agrees on (the control protocol, paths, titles, the log's
  exit line, the template's socket protocol); imports none of the others.
- ``client``: the CLI side (``ckpt run``, ``checkpoint``, ``restore``, ``ps`` ...): makes
  sandboxes, verifies their processes, and asks them over the control socket.
- ``host``: inside a sandbox's process, in its cgroup: the kernel, its control socket and
  HTTP server, and the image it writes and reads.
- ``template``: the long-lived process per root that forks warm sandbox hosts.

Nothing is imported here: ``ckpt.sandbox.wire.paths`` must not load the host.
"""

__all__ = ["client", "host", "template", "wire"]
