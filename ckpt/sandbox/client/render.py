"""Rich renderables for sandbox results, shared by the CLI and the demo.

Kept apart from the rest of the package so the sandbox process never imports rich.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from ckpt.sandbox.client.status import status_text
from ckpt.sandbox.wire.paths import SandboxState
from ckpt.sandbox.wire.timings import Timings

ADDRESS_WIDTH = 21  # "255.255.255.255:65535" whole; a longer IPv6 address folds


def sandboxes_table(states: list[SandboxState]) -> Table:
    """One row per sandbox; long values fold onto a second line rather than being cut,
    and the creation time stays on one, so the table stays readable in 80 columns (the
    cgroup is always ``Root.cgroup_name(ID)``)."""
    from rich import box

    # Without vertical rules or edges, one space between columns: seven columns, a whole
    # timestamp and a whole address fit 80 columns with room left for the ID to fold.
    table = Table(
        title="sandboxes",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=0,
    )
    # An address is read whole or not at all (a port cut in two reads as another port):
    # its column has a set width, the longest address's up to ADDRESS_WIDTH (beyond, it
    # folds), so rich narrows the ID and workload instead, which fold.
    widest = max((len(st.address or "-") for st in states), default=1)
    for col in ("ID", "PID", "STATUS", "WORKLOAD", "ADDRESS", "CPU", "CREATED (UTC)"):
        folds = col in ("ID", "WORKLOAD", "ADDRESS")  # the others stay whole
        width = max(min(widest, ADDRESS_WIDTH), len(col)) if col == "ADDRESS" else None
        table.add_column(col, overflow="fold", no_wrap=not folds, width=width)
    for st in states:
        table.add_row(
            Text(st.id),
            Text(str(st.pid)),
            Text(status_text(st)),
            Text(st.workload),
            Text(st.address or "-"),  # Text: no markup or :emoji: codes in an address
            Text("-" if st.cpu is None else f"{st.cpu:g}"),
            Text(st.created.replace("T", " ").removesuffix("Z")),
        )
    return table


def timings_table(title: str, timings: Timings) -> Table:
    """Phases in milliseconds, then CPU and the CRIU-style counters."""
    table = Table(title=title, title_justify="left", show_header=True)
    table.add_column("phase / counter", overflow="fold")  # long names fold, never cut
    table.add_column("value", justify="right", overflow="fold")
    for name, ns in timings.phases_ns.items():
        table.add_row(name, f"{ns / 1e6:.2f} ms")
    if timings.cpu_usec is not None:
        table.add_row(f"CPU ({timings.cpu_source})", f"{timings.cpu_usec / 1e3:.2f} ms")
    for name, value in timings.counters.items():
        if value is None:
            continue
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        table.add_row(Text(name, style="dim"), shown)
    return table


def stats_renderable(
    stats: dict[str, Any] | None,
    text: str | None,
    *,
    title: str = "per-type state statistics",
    limit: int = 15,
) -> Table | Text:
    """The state engine's per-type table (from ``Stats.as_dict()``), largest time first."""
    rows = (stats or {}).get("types") if isinstance(stats, dict) else None
    if not isinstance(rows, list):
        return Text(text or "")
    table = Table(title=title, title_justify="left")
    # A type name is whole on one line up to 32 characters and folds (never cut) beyond,
    # which leaves the figures room enough at 80 columns.
    widest = max((len(str(row.get("type"))) for row in rows[:limit]), default=4)
    table.add_column("type", overflow="fold", min_width=min(widest, 32))
    for col in ("count", "total", "per object"):
        table.add_column(col, justify="right")
    for row in rows[:limit]:
        table.add_row(
            Text(str(row.get("type"))),
            f"{row.get('count', 0):,}",
            f"{row.get('total_ns', 0) / 1e6:.3f} ms",
            f"{row.get('per_object_ns', 0) / 1e3:.2f} µs",
        )
    if len(rows) > limit:
        table.caption = f"... and {len(rows) - limit} more types"
    total = stats.get("total_ns") if isinstance(stats, dict) else None
    if total is not None:
        table.add_row(
            Text("(all)", style="bold"),
            f"{sum(r.get('count', 0) for r in rows):,}",
            f"{total / 1e6:.3f} ms",
            "",
        )
    return table


def tasks_table(reply: Any) -> Table:
    """``ckpt ps``: one row per task (a ``protocol.TasksReply``), as ps -eLf orders
    them; the name folds rather than being cut."""
    from rich import box

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in ("TID", "PID", "PPID", "STAT", "THREADS", "CPU (ms)", "COMMAND"):
        right = col not in ("STAT", "COMMAND")
        table.add_column(
            col, justify="right" if right else "left", no_wrap=col != "COMMAND", overflow="fold"
        )
    for t in reply.tasks:
        table.add_row(
            str(t.tid),
            str(t.tgid),
            str(t.ppid),
            t.state,
            str(t.threads),
            f"{t.cpu_ns / 1e6:.1f}",
            Text(t.comm),
        )
    if reply.omitted:
        table.caption = f"... and {reply.omitted} more tasks"
    return table


def check_table(items: list[Any]) -> Table:
    """``ckpt check``: one row per capability (``hostcheck.Item``)."""
    from rich import box

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("ITEM", no_wrap=True)
    table.add_column("STATUS", no_wrap=True)
    table.add_column("DETAIL", overflow="fold")
    for item in items:
        table.add_row(item.name, "ok" if item.ok else "missing", Text(item.detail))
    return table
