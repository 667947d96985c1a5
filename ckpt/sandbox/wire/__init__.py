"""What the CLI, the sandbox host and the template agree on, and nothing else: the
typed control protocol and its transport, where a sandbox lives on disk, the template's
socket protocol and its hand-over of live sockets, process titles, the log's exit line,
phase timings, and a sandbox's network namespace (and the thread that works in it).

Every process imports this subpackage; it imports none of the others (``client``,
``host``, ``template``), so a change on one side cannot reach into another but here.
Modules are loaded on use: the CLI that reads a record must not pay for the protocol.
"""

__all__ = [
    "handover",
    "netmove",
    "netns",
    "nsthread",
    "paths",
    "protocol",
    "rpc",
    "sandboxlog",
    "tcprepair",
    "template_proto",
    "timings",
    "title",
]
