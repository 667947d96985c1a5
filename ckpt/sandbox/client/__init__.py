"""The CLI side of sandboxes, run by ``ckpt`` commands (and by migration and the
benchmarks, which drive sandboxes as the CLI does): making a sandbox and its cgroup,
verifying its processes, asking it over its control socket, asking the template for a
warm one, and telling the user how it went.

It imports ``wire`` only, never ``host`` or ``template``: the CLI talks to those
processes, it does not run their code.  The modules in ``__all__`` are its surface for
the rest of ``ckpt``; the others (spawn, pids, childenv, outcomes)
serve these.  Modules are loaded on use, to keep the CLI's start fast.
"""

__all__ = [
    "control",
    "deadlines",
    "group",
    "hostcheck",
    "lifecycle",
    "logs",
    "observe",
    "precopy_options",
    "procfs",
    "render",
    "send_client",
    "status",
    "template_client",
    "testhooks",
]
