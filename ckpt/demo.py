"""``ckpt demo``: the tour a new user takes, end to end, with nothing to set up.

In a temporary root it runs an ``http`` sandbox, sends it requests, checkpoints it,
inspects the image, restores it under a CPU quota when the host allows one (uncapped
otherwise, saying so), sends more requests to show the count continuing, prints the
phase timings and the engine's per-type stats, and removes everything it made.
Presentation code, like the CLI: it prints, and library calls raise ``CkptError``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ckpt.errors import CkptError
from ckpt.sandbox.client import lifecycle
from ckpt.sandbox.client.render import stats_renderable, timings_table
from ckpt.sandbox.host.http import get_json
from ckpt.sandbox.wire.paths import Root

DEMO_CPU = 0.5


def _requests(console: Console, address: str, n: int) -> dict:
    host, _, port = address.rpartition(":")
    body: dict = {}
    for _ in range(n):
        _, body = get_json(host, int(port), "/")
        console.print(f"  GET http://{address}/ -> {body}", markup=False)
    return body


def _image_table(image: Path) -> Table:
    """Header metadata and the stream's type table, read without the kernel's classes."""
    from ckpt import state, statefile

    img = statefile.open_image(image)
    meta = img.metadata
    table = Table(title=f"image {image.name}: types in the object stream", title_justify="left")
    for col in ("type", "objects", "bytes"):
        table.add_column(col, justify="left" if col == "type" else "right")
    view = state.inspect_stream(img.read_state())
    for t in sorted(view.types, key=lambda t: -t.nbytes)[:12]:
        table.add_row(Text(t.name), str(t.count), f"{t.nbytes:,}")
    table.caption = (
        f"engine {meta.get('engine')}, workload {meta.get('workload')}, "
        f"{sum(t.count for t in view.types):,} objects in {len(view.types)} types; "
        f"files: {', '.join(sorted(p.name for p in image.iterdir()))}"
    )
    return table


def run(console: Console) -> None:
    """Run the tour; always cleans up the sandbox, its cgroup and the temp root."""
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-demo-"))
    sandbox_id = f"demo-{os.getpid()}"  # cgroups are host-wide: two demos must not clash
    root = Root(tmp / "root")
    image = tmp / "image"
    from ckpt.sandbox.client import template_client

    try:
        console.rule("0. start the warm template (it forks ready-made sandboxes)")
        template_client.start(root.path, wait=True)
        info = template_client.status(root.path) or {}
        console.print(
            f"template pid {info.get('pid')}: kernel, engines and generated code built in "
            f"{info.get('import_ms', 0) + info.get('build_ms', 0):.0f} ms, once",
            markup=False,
        )

        console.rule("1. run an http sandbox")
        res = lifecycle.run(root, sandbox_id, "http", port=0)
        st = res.state
        console.print(
            f"sandbox {st.id}: pid {st.pid}, cgroup {st.cgroup or '(none)'}, "
            f"serving http://{st.address}/",
            markup=False,
        )

        console.rule("2. send it requests")
        before = _requests(console, st.address or "", 3)

        console.rule("3. checkpoint it (it drains, writes its image, hands its socket over)")
        ck = lifecycle.checkpoint(root, sandbox_id, image, stats=True)
        console.print(timings_table("checkpoint timings", ck.timings))

        console.rule("4. inspect the image (no kernel classes needed)")
        console.print(_image_table(image))

        console.rule("5. restore it")
        from ckpt import cgroups

        ok, reason = cgroups.available_for_quota()
        cpus = DEMO_CPU if ok else None
        if ok:
            console.print(
                f"restoring under a CPU quota of {DEMO_CPU} CPU "
                f"(cgroup {root.cgroup_name(sandbox_id)})"
            )
        else:
            console.print(
                f"restoring uncapped: this host cannot apply a CPU quota ({reason})", markup=False
            )
        rs = lifecycle.restore(root, sandbox_id, image, cpus=cpus, stats=True)
        console.print(timings_table("restore timings", rs.timings))
        console.print(
            f"forked from the template: {rs.timings.counters.get('sandbox_start') == 'template'}"
            f"; listening socket: {rs.timings.counters.get('listener')}",
            markup=False,
        )
        console.print(stats_renderable(rs.stats, rs.stats_text))

        console.rule("6. the request count continues")
        after = _requests(console, rs.state.address or "", 3)
        console.print(
            f"requests before checkpoint: {before.get('requests')}, after restore: "
            f"{after.get('requests')}; restores: {after.get('restores')}; same address: "
            f"{rs.state.address == st.address}",
            markup=False,
        )
    finally:
        console.rule("7. clean up")
        try:
            if root.exists(sandbox_id):
                lifecycle.delete(root, sandbox_id, force=True)
            template_client.stop(root.path)
        except CkptError as exc:
            console.print(f"cleanup failed: {exc}", markup=False)
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        console.print(f"removed the sandbox, its cgroup, the template and {tmp}", markup=False)
