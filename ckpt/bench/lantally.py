"""What the LAN migration bench's clients saw, counted: from their events alone.

Each client (``lanload``) keeps one connection and logs what happens to it as events
``(kind, client, t_sent, t_got, key)``, times in ``CLOCK_MONOTONIC`` nanoseconds (one
clock for every namespace of the machine):

* ``open``: a connection was made (the first is the client's own; every later one is
  a reconnect);
* ``answer``: a 200 answer to a request sent at ``t_sent``, whole at ``t_got``;
  ``key`` is the write it acknowledges (the writer's ``w<slot>#<n>``: write ``n`` to
  key ``w<slot>``), or empty;
* ``reset``: the server ended the connection (RST, or EOF before an answer);
* ``refused``: a connection attempt was refused (nothing listened on the address);
* ``timeout``: no answer within the client's deadline for one request;
* ``error``: an answer other than 200 (an answer all the same, for the gaps);
* ``end``: the client stopped, at ``t_got``.

Kept apart from the clients and the bench so that each figure can be checked on a
stream of events made up by hand.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

KINDS = ("open", "answer", "reset", "refused", "timeout", "error", "end")
Event = tuple[str, int, int, int, str]  # kind, client, t_sent ns, t_got ns, key


@dataclass
class Tally:
    """The clients' figures for one migration."""

    resets: int = 0
    refusals: int = 0
    reconnects: int = 0
    timeouts: int = 0
    errors: int = 0
    answers: int = 0
    acked_writes: int = 0
    gaps_ms: list[float] = field(default_factory=list)  # each client's longest
    longest_at_ns: list[tuple[int, int]] = field(default_factory=list)  # (from, to) each
    acked: dict[str, str] = field(default_factory=dict)  # key -> its last acked digest

    @property
    def gap_max_ms(self) -> float:
        return max(self.gaps_ms, default=0.0)

    @property
    def gap_median_ms(self) -> float:
        return statistics.median(self.gaps_ms) if self.gaps_ms else 0.0


def tally(events: Iterable[Event], digests: Mapping[str, str] | None = None) -> Tally:
    """Count ``events`` per client.  A client's longest gap is the longest time between
    two of its answers (their ``t_got``; a 200 or not), or from its last answer to its
    ``end``: a client that got nothing after the move shows all of it.  ``digests``
    gives each acknowledged write's value digest (by the event's key); a key written
    again keeps its last acknowledged value."""
    out = Tally()
    opens: dict[int, int] = {}
    last: dict[int, int] = {}
    longest: dict[int, tuple[int, int]] = {}

    def gap(client: int, t: int) -> None:
        if client in last:
            start = last[client]
            best = longest.get(client)
            if best is None or t - start > best[1] - best[0]:
                longest[client] = (start, t)

    for kind, client, _sent, got, key in sorted(events, key=lambda e: e[3]):
        if kind not in KINDS:
            raise ValueError(f"unknown event {kind!r}")
        if kind == "open":
            opens[client] = opens.get(client, 0) + 1
            if opens[client] > 1:
                out.reconnects += 1
        elif kind in ("answer", "error"):
            gap(client, got)
            last[client] = got
            if kind == "error":
                out.errors += 1
                continue
            out.answers += 1
            if key:
                out.acked_writes += 1
                out.acked[key.partition("#")[0]] = (digests or {}).get(key, "")
        elif kind == "reset":
            out.resets += 1
        elif kind == "refused":
            out.refusals += 1
        elif kind == "timeout":
            out.timeouts += 1
        elif kind == "end":
            gap(client, got)
    for client in sorted(longest):
        start, end = longest[client]
        out.gaps_ms.append(round((end - start) / 1e6, 3))
        out.longest_at_ns.append((start, end))
    return out


def lost_writes(acked: Mapping[str, str], readback: Mapping[str, tuple[int, str]]) -> int:
    """Acknowledged writes that the destination does not give back as written:
    ``readback`` maps a key to (status, digest of the body) as a GET found it; a key
    it lacks was never read back, which counts as lost too."""
    lost = 0
    for key, digest in acked.items():
        got = readback.get(key)
        if got is None or got[0] != 200 or got[1] != digest:
            lost += 1
    return lost
