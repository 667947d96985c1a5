"""The sandbox host: the process that hosts one simulated kernel, in the sandbox's
cgroup (``python -m ckpt.sandbox.host.process``, or forked by the template).  It serves
the control socket and HTTP, and does the checkpoint's and restore's work itself, so that
work is charged to the sandbox's CPU quota: dump, pre-dump and pre-copy, the
copy-on-write snapshot, and images in an object store.

It imports ``wire`` only, never ``client`` or ``template``.  The modules in ``__all__``
are its surface: ``process`` (run by the template's fork), ``http`` (its server, and a
small client for tools), ``dump`` (loaded by the template before it forks),
``precopy_policy`` (the stopping rule migration shares) and ``remote_image``.
"""

__all__ = ["dump", "http", "precopy_policy", "process", "remote_image"]
