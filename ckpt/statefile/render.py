"""Turn an inspect report (``inspect.inspect_image``) into rich renderables.

Builds renderables only; the CLI prints them.  User data (paths, metadata values,
field values) is wrapped in ``Text`` so square brackets are never read as markup.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text


def _kv_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    t = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        shown = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
        t.add_row(Text(k), Text(shown))
    return t


def _integrity(report: dict[str, Any]) -> Text:
    i = report["integrity"]
    if i["ok"] is True:
        return Text(f"integrity: OK ({i['algorithm']}: {i['detail']})", style="green")
    if i["ok"] is False:
        return Text(f"integrity: FAILED ({i['algorithm']}): {i['detail']}", style="bold red")
    wanted = report.get("verify", {})
    if wanted.get("requested") and not wanted.get("complete") and wanted.get("detail"):
        return Text(f"integrity: NOT VERIFIED: {wanted['detail']}", style="bold red")
    return Text(f"integrity: not verified: {i['detail']}", style="yellow")


TYPE_MIN_WIDTH = 24
FIELDS_MIN_WIDTH = 12


def _types(report: dict[str, Any]) -> RenderableType:
    types = report["types"]
    stream = report["stream"]
    if types is None:
        note = stream.get("error") or "stream not decoded"
        return Text(f"types: {note}", style="yellow")
    t = Table(title="types", title_justify="left")
    # Every column fits 80 columns together, borders included: a name is whole on one
    # line up to TYPE_MIN_WIDTH characters and folds (never cut) beyond; the fields wrap
    # between names, and a name wider than the column folds; the counts stay whole.
    widest = max((len(row["name"]) for row in types), default=4)
    t.add_column("type", overflow="fold", min_width=min(widest, TYPE_MIN_WIDTH), ratio=3)
    t.add_column("objects", justify="right", no_wrap=True)
    t.add_column("bytes", justify="right", no_wrap=True)
    t.add_column("fields", overflow="fold", min_width=FIELDS_MIN_WIDTH, ratio=2)
    for row in sorted(types, key=lambda r: -r["bytes"]):
        t.add_row(
            Text(row["name"]),
            f"{row['count']:,}",
            f"{row['bytes']:,}",
            Text(", ".join(row["fields"])),
        )
    t.add_row(
        Text("total", style="bold"),
        f"{sum(r['count'] for r in types):,}",
        f"{sum(r['bytes'] for r in types):,}",
        "",
    )
    return t


def _pages_verified(report: dict[str, Any]) -> str:
    """Yes only when every page's tag was checked; otherwise, why not."""
    if report["pages"]["verified"]:
        return "yes"
    if report.get("verify", {}).get("requested"):
        return "no (read, but the image is signed: pass --key-file)"
    return "no (use --verify)"


def _pages(report: dict[str, Any]) -> RenderableType:
    p = report["pages"]
    if p is None:
        return Text("pages: not read", style="yellow")
    if "error" in p:
        return Text(f"pages: {p['error']}", style="bold red")
    rows = [
        ("scanned", f"{p['scanned']:,} pages"),
        ("zero (not stored)", f"{p['zero']:,} pages in {p['zero_runs']:,} runs"),
        ("stored", f"{p['stored']:,} pages in {p['stored_runs']:,} runs"),
        ("pages.img", f"{p['pages_img_bytes']:,} bytes ({p['compression']})"),
        ("compression ratio", f"{p['compression_ratio']:.2f}x"),
        ("verified", _pages_verified(report)),
    ]
    return _kv_table("pages", rows)


def _objects(report: dict[str, Any]) -> RenderableType | None:
    objs = report["objects"]
    if not objs:
        return None
    lines = Text()
    for o in objs:
        lines.append(f"#{o['id']} ", style="bold")
        lines.append(f"{o['type']}\n", style="cyan")
        for name, value in o["fields"].items():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            lines.append(f"    {name} = {shown}\n")
    return Group(Text("objects", style="bold"), lines)


def render_report(report: dict[str, Any]) -> RenderableType:
    """The whole inspect report as one rich renderable."""
    h = report["header"]
    header = _kv_table(
        "statefile",
        [
            ("path", h["path"]),
            ("format", f"version {h['format_version']}"),
            ("compression", f"{h['compression']} ({h['chunks']} chunks of ≤{h['chunk_size']:,} B)"),
            ("stream", f"{h['stream_bytes']:,} bytes in a {h['file_bytes']:,}-byte file"),
            ("image id", h["image_id"]),
            ("encryption", h.get("encryption", "none")),
        ],
    )
    meta = _kv_table(
        "metadata",
        sorted((k, v) for k, v in report["metadata"].items() if k not in ("pages",)),
    )
    parts: list[RenderableType] = [header, Text(""), meta, Text(""), _integrity(report)]
    stream = report["stream"]
    if stream.get("verified"):
        parts.append(Text("stream: every record decoded", style="green"))
    elif stream.get("error") and stream.get("available"):
        parts.append(Text(f"stream: {stream['error']}", style="bold red"))
    elif stream.get("note"):
        parts.append(Text(f"stream: {stream['note']}"))
    parts += [Text(""), _types(report), Text(""), _pages(report)]
    if report.get("chain"):
        parts += [Text(""), _chain(report["chain"])]
    objs = _objects(report)
    if objs is not None:
        parts += [Text(""), objs]
    return Group(*parts)


def _chain(entries: list[dict[str, Any]]) -> Table:
    """The image chain, newest first: each image's kind, id, stored pages and check."""
    t = Table(title="chain (newest first)", title_justify="left")
    for name, justify in (("#", "right"), ("kind", "left"), ("image id", "left")):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    t.add_column("stored", justify="right")
    t.add_column("pages", justify="left")
    for i, e in enumerate(entries):
        stored = e.get("pages_stored")
        state = "verified" if e.get("verified") else "not read"
        t.add_row(
            str(i),
            e["kind"],
            e["image_id"][:16],
            "-" if stored is None else f"{stored:,}",
            Text(state),
        )
        if "error" in e:
            t.add_row("", Text("broken", style="bold red"), Text(e["error"]), "", "")
    return t
